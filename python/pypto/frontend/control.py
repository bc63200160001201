"""Loops and ifs.

* `for v in range(a, b, s)` becomes an IR loop with a symbolic index: it is not unrolled. It is
  unrolled (the index is a Python int) when the tracer learned that its body needs the index as a
  Python value (indexing a Python list, a Python-level name that changes per iteration, ...), when
  it is a `pypto.static_range`, or when it has exactly one iteration; unrolling needs a constant
  trip count of at most UNROLL_LIMIT.
* Tensors reassigned inside a symbolic loop (or a run-time `if`) are loop-carried: they are copied
  into a fresh temporary before it, and every iteration stores its new value back.
* `if` on a value known at trace time walks only that branch; on a run-time scalar it becomes an
  IR if, and Python-level names must agree between the branches (scalars merge with a select).
"""
from __future__ import annotations

import ast

from .. import _C
from . import intrinsics
from ..errors import PyptoError
from .signals import NeedsConcrete, Restart
from .expressions import LoopLocal, truth
from .values import TensorValue, is_expr
from . import tensor_ops as T

UNROLL_LIMIT = 1024


class Break(Exception):
    pass


class Continue(Exception):
    pass


class LoopFrame:
    __slots__ = ("key", "vars", "trip", "node")

    def __init__(self, key, vars_, trip, node):
        self.key = key
        self.vars = vars_
        self.trip = trip
        self.node = node


def _stored_names(stmts):
    """Names rebound by plain assignment anywhere in `stmts` (not `+=`: that is in place for
    tensors and checked afterwards for Python values)."""
    aug = set()
    names = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                aug.add(id(n.target))
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and id(n) not in aug:
                names.add(n.id)
    return names


def _same_static(a, b):
    if a is b:
        return True
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        return False
    if is_expr(a) and is_expr(b):
        return a.same(b)
    if is_expr(a) or is_expr(b):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd objects: not the same
        return False


def _is_scalar(v):
    return is_expr(v) or (isinstance(v, (int, float)) and not isinstance(v, bool))


class ControlFlow:
    """Mixin of FunctionWalker: For, If, Break, Continue."""

    def loop_key(self, node):
        return (self.src.key, node.lineno, node.col_offset)

    def _outer_vars(self):
        vs = set(self.tr.scalar_vars)
        for f in self.tr.loops:
            vs |= f.vars
        return vs

    # --- for -------------------------------------------------------------------------------------
    def s_For(self, node):
        if node.orelse:
            raise PyptoError("unsupported construct in a kernel: for ... else")
        it = node.iter
        if isinstance(it, ast.Call) and not it.keywords and not any(isinstance(a, ast.Starred) for a in it.args):
            f = self.eval(it.func)
            if f is range or intrinsics.intrinsic_of(f) in (intrinsics.PRANGE, intrinsics.STATIC_RANGE):
                args = [self.eval(a) for a in it.args]
                self.cur_node = node
                return self.range_loop(node, intrinsics.intrinsic_of(f), args)
            iterable = self.call(f, [self.eval(a) for a in it.args], {})
        else:
            iterable = self.eval(it)
        if isinstance(iterable, TensorValue):
            if not iterable.shape:
                raise PyptoError("cannot iterate over a 0-d tensor")
            x = iterable
            return self.range_loop(node, None, [x.shape[0]], bind=lambda i: T.index(x, i))
        if is_expr(iterable):
            raise PyptoError("cannot iterate over a run-time scalar; use range(n)")
        self.python_loop(node, iterable)

    def python_loop(self, node, iterable, bind=None):
        path = self.tr.path_of(iterable) if isinstance(iterable, (list, tuple)) else None
        if path is not None:
            self.tr.guard_len(iterable)
        self.loop_kinds.append("py")
        try:
            for idx, item in enumerate(iterable):
                if idx >= UNROLL_LIMIT:
                    raise PyptoError(f"a Python-level loop ran more than {UNROLL_LIMIT} iterations at trace "
                                     "time; use range() over tensor shapes for a real loop")
                if bind is not None:
                    item = bind(item)
                elif path is not None:
                    item = self.tr.from_python(item, path.child(("item", idx), item))
                self.store(node.target, item)
                try:
                    self.walk_block(node.body)
                except Break:
                    break
                except Continue:
                    continue
        finally:
            self.loop_kinds.pop()

    def range_loop(self, node, kind, args, bind=None):
        """A for loop over range(*args); kind: None (range), intrinsics.PRANGE or STATIC_RANGE."""
        if not 1 <= len(args) <= 3:
            raise PyptoError(f"range expected 1 to 3 arguments, got {len(args)}")
        for a in args:
            if isinstance(a, TensorValue):
                raise PyptoError("range() bounds must be integers, got a tensor")
            if isinstance(a, float) or (is_expr(a) and a.is_float):
                raise PyptoError("range() bounds must be integers, got a float")
        lo, hi, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        lo, hi, step = (v.value if is_expr(v) and v.is_const else v for v in (lo, hi, step))
        if is_expr(step):  # a scalar argument becomes a compile-time constant (trace.py restarts)
            raise NeedsConcrete(step, "a loop step must be a compile-time integer")
        if step == 0:
            raise PyptoError("range() arg 3 must not be zero")
        const = not is_expr(lo) and not is_expr(hi)
        trip = len(range(lo, hi, step)) if const else None
        if trip is None:
            span = hi - lo  # symbolic bounds whose difference is constant: the trip count is known
            if is_expr(span) and span.is_const:
                span = span.value
            if not is_expr(span):
                trip = len(range(0, span, step))
        key = self.loop_key(node)
        unroll = kind == intrinsics.STATIC_RANGE or key in self.tr.unroll
        if kind == intrinsics.STATIC_RANGE and trip is None:
            raise NeedsConcrete(hi - lo, "pypto.static_range needs bounds known at compile time")
        if step < 0 and not const:
            raise PyptoError("loops with a negative step need bounds known at compile time")
        if unroll or step < 0 or (trip is not None and trip <= 1 and kind != intrinsics.PRANGE):
            if trip is not None and trip > UNROLL_LIMIT:
                raise PyptoError(f"this loop would be unrolled but has {trip} iterations, more than the limit of "
                                 f"{UNROLL_LIMIT}")
            values = range(lo, hi, step) if const else [lo + i * step for i in range(trip)]
            return self.python_loop(node, values, bind=bind)
        if trip == 0:
            return
        self.symbolic_loop(node, lo, hi, step, kind == intrinsics.PRANGE, trip, key, bind)

    def symbolic_loop(self, node, lo, hi, step, parallel, trip, key, bind):
        tr = self.tr
        carried = self.carry_in(node.body)
        before = dict(self.locals)
        outer = self._outer_vars()
        hint = node.target.id if isinstance(node.target, ast.Name) else "i"
        iv = tr.b.begin_for(hint, lo, hi, step, parallel)
        frame = LoopFrame(key, set(iv.vars()), trip, node)
        tr.loops.append(frame)
        tr.sym_depth += 1
        self.loop_kinds.append("sym")
        try:
            self.store(node.target, bind(iv) if bind is not None else iv)
            self.walk_block(node.body)
            self.carry_out(carried)
            self.check_python_names(before, carried, frame, outer, node)
            tr.b.end_for()
        except NeedsConcrete as e:
            # A scalar argument in the value is specialised first (at the top): unrolling alone
            # could not make it concrete, and unrolling may not be needed once it is.
            needed = set(e.expr.vars()) if e.expr is not None else set()
            if e.expr is None or (frame.vars & needed and not needed & tr.scalar_vars.keys()):
                self.unroll_or_fail(frame, e)
            raise
        finally:
            self.loop_kinds.pop()
            tr.sym_depth -= 1
            tr.loops.pop()
        for name in _target_names(node.target):
            self.locals[name] = LoopLocal(f"'{name}' is the index of the loop at line "
                                          f"{self.src.lineno(node)}, which stays a loop at run time: it has no "
                                          "value after the loop")

    def unroll_or_fail(self, frame, e):
        if frame.trip is not None and frame.trip <= UNROLL_LIMIT:
            raise Restart(unroll=frame.key)
        src = getattr(e, "src", None) or self.src
        where = f" (line {src.lineno(e.node)})" if e.node is not None else ""
        if frame.trip is None:
            why = "its trip count is only known at run time"
        else:
            why = f"it has {frame.trip} iterations, more than the unrolling limit of {UNROLL_LIMIT}"
        raise PyptoError(f"this loop would have to be unrolled because {e.what}{where}, but {why}")

    def carry_in(self, stmts):
        """Copy tensors that the statements rebind into fresh temporaries (loop-carried values)."""
        carried = {}
        for name in sorted(_stored_names(stmts)):
            v = self.locals.get(name)
            if isinstance(v, TensorValue):
                tmp = T.copy(v)
                self.locals[name] = tmp
                carried[name] = tmp
        return carried

    def carry_out(self, carried):
        for name, tmp in carried.items():
            new = self.locals.get(name)
            if new is tmp:
                continue
            if not isinstance(new, TensorValue):
                raise PyptoError(f"'{name}' holds a tensor before the loop/if and a "
                                 f"{type(new).__name__} after an iteration; it must stay a tensor")
            if new.shape != tmp.shape:
                raise PyptoError(f"'{name}' changes shape from {tmp.shape} to {new.shape} inside the loop/if; a "
                                 "value carried across iterations must keep its shape")
            if new.pdtype is not tmp.pdtype:
                new = T.cast(new, tmp.pdtype)
            T.assign(tmp, new)
            self.locals[name] = tmp

    def check_python_names(self, before, carried, frame, outer, node):
        targets = set(_target_names(node.target))
        for name, val in list(self.locals.items()):
            if name in carried or name in targets:
                continue
            if name not in before:
                if isinstance(val, TensorValue) or (is_expr(val) and not set(val.vars()) <= outer):
                    self.locals[name] = LoopLocal(
                        f"'{name}' is assigned inside the loop at line {self.src.lineno(node)}, which stays a loop "
                        "at run time, so it has no single value after the loop; define it before the loop "
                        "(e.g. name = pypto.zeros(...)) and assign into it")
                continue
            old = before[name]
            if _same_static(old, val):
                self.locals[name] = old
                continue
            if type(old) is LoopLocal:
                continue
            e = NeedsConcrete(None, f"'{name}' is reassigned inside the loop (a Python-level value that "
                                    "changes per iteration)")
            e.node, e.src = node, self.src
            raise e

    # --- if --------------------------------------------------------------------------------------
    def s_If(self, node):
        c = self.eval(node.test)
        t = truth(c)
        if t is not None:
            self.walk_block(node.body if t else node.orelse)
            return
        self.symbolic_if(node, c)

    def symbolic_if(self, node, cond):
        tr = self.tr
        carried = self.carry_in(node.body + node.orelse)
        before = dict(self.locals)
        tr.sym_depth += 1
        self.loop_kinds.append("if")
        try:
            tr.b.begin_if(cond)
            self.walk_block(node.body)
            self.carry_out(carried)
            then_env = dict(self.locals)
            self.locals.clear()
            self.locals.update(before)
            if node.orelse:
                tr.b.begin_else()
                self.walk_block(node.orelse)
                self.carry_out(carried)
            else_env = dict(self.locals)
            tr.b.end_if()
        except NeedsConcrete as e:
            if e.expr is None:
                e.expr = cond  # resolving the condition (unrolling / specialising) resolves the request
            raise
        finally:
            self.loop_kinds.pop()
            tr.sym_depth -= 1
        self.locals.clear()
        self.locals.update(self.merge_branches(node, cond, before, then_env, else_env, carried))

    def merge_branches(self, node, cond, before, then_env, else_env, carried):
        out = {}
        line = self.src.lineno(node)
        missing = object()
        for name in set(then_env) | set(else_env):
            a = then_env.get(name, missing)
            b = else_env.get(name, missing)
            if a is b or (a is not missing and b is not missing and _same_static(a, b)):
                out[name] = a
                continue
            if a is missing or b is missing or isinstance(a, TensorValue) or isinstance(b, TensorValue) \
                    or type(a) is LoopLocal or type(b) is LoopLocal:
                if name not in before and (a is missing or b is missing):
                    msg = (f"'{name}' is only assigned in one branch of the if at line {line}, whose condition is "
                           "only known at run time; assign it before the if")
                else:
                    msg = (f"'{name}' is assigned a tensor in a branch of the if at line {line}, whose condition "
                           "is only known at run time; define it before the if (e.g. with pypto.zeros) so that "
                           "both branches update it")
                out[name] = LoopLocal(msg)
                continue
            if _is_scalar(a) and _is_scalar(b):
                out[name] = _C.select(cond, a, b)
                continue
            raise NeedsConcrete(cond, f"'{name}' gets different Python values in the branches of the if at line "
                                      f"{line}, whose condition is only known at run time")
        return out

    # --- break / continue -------------------------------------------------------------------------
    def _check_jump(self, what):
        if not self.loop_kinds:
            raise PyptoError(f"'{what}' outside a loop")
        if self.loop_kinds[-1] != "py":
            raise NeedsConcrete(None, f"'{what}' inside a loop that stays a loop at run time")

    def s_Break(self, node):
        self._check_jump("break")
        raise Break()

    def s_Continue(self, node):
        self._check_jump("continue")
        raise Continue()


def _target_names(t):
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        out = []
        for e in t.elts:
            out.extend(_target_names(e))
        return out
    if isinstance(t, ast.Starred):
        return _target_names(t.value)
    return []


__all__ = ["ControlFlow", "Break", "Continue", "UNROLL_LIMIT"]
