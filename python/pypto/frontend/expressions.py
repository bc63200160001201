"""Evaluation of expressions while walking a kernel's AST.

Python values fold in Python; tensors map to builder operations (through TensorValue's
operators); run-time scalars are builder Exprs. Names resolve like Python: the kernel's locals,
then closure cells, then the function's globals, then builtins; arrays found outside the locals
become implicit inputs of the kernel."""
from __future__ import annotations

import ast
import builtins
import operator

from .. import _C
from ..errors import PyptoError
from .signals import NeedsConcrete
from .tracer import Path
from .values import TensorValue, is_expr, is_symbolic
from . import index_ops as X
from . import tensor_ops as T

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
_CMPOPS = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_UNSUPPORTED_EXPR = {
    ast.Lambda: "lambda", ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Await: "await",
}


class LoopLocal:
    """Stands for a name whose value only exists inside a loop (or one branch of an `if`) that
    stays a loop at run time; using it afterwards is an error."""

    __slots__ = ("message",)

    def __init__(self, message):
        self.message = message


def first_symbolic(*values):
    for v in values:
        if is_symbolic(v):
            return v
        if isinstance(v, (list, tuple)):
            s = first_symbolic(*v)
            if s is not None:
                return s
        if isinstance(v, dict):
            s = first_symbolic(*v.values())
            if s is not None:
                return s
        if isinstance(v, slice):
            s = first_symbolic(v.start, v.stop, v.step)
            if s is not None:
                return s
    return None


def concrete(v, what):
    """A Python value from a possibly symbolic one (NeedsConcrete when only known at run time)."""
    if is_expr(v):
        if v.is_const:
            return v.value
        raise NeedsConcrete(v, what)
    if isinstance(v, TensorValue):
        raise PyptoError(f"{what}: got a tensor, whose data is only known when the kernel runs")
    if isinstance(v, tuple):
        return tuple(concrete(x, what) for x in v)
    if isinstance(v, slice):
        return slice(concrete(v.start, what), concrete(v.stop, what), concrete(v.step, what))
    return v


def truth(v):
    """True / False for values known at trace time; None for a symbolic scalar."""
    if isinstance(v, TensorValue):
        raise PyptoError("a tensor cannot be used as a condition while tracing (its data is only known "
                         "when the kernel runs); use pypto.where(cond, a, b)")
    if is_expr(v):
        if v.is_const:
            return bool(v.value)
        return None
    return bool(v)


def is_scalar(v):
    return is_expr(v) or (isinstance(v, (int, float)) and not isinstance(v, bool))


class ExpressionEvaluator:
    """Mixin of the AST walker: `eval(node)` and the helpers expressions need. Calls go through
    the walker's `call(f, args, kwargs)` (calls.py)."""

    # Set by the walker: tr (Tracer), src (SourceInfo), locals, cells, globals, builtins.

    def eval(self, node):
        h = _EXPR_HANDLERS.get(type(node))
        if h is None:
            what = _UNSUPPORTED_EXPR.get(type(node))
            if what is not None:
                raise PyptoError(f"unsupported construct in a kernel: {what}")
            raise PyptoError(f"unsupported expression in a kernel: {type(node).__name__}")
        self.cur_node = node
        return h(self, node)

    # --- leaves ----------------------------------------------------------------------------------
    def e_Constant(self, node):
        return node.value

    def e_Name(self, node):
        name = node.id
        if name in self.locals:
            v = self.locals[name]
            if type(v) is LoopLocal:
                raise PyptoError(v.message)
            return v
        return self.lookup_free(name)

    def lookup_free(self, name):
        tr = self.tr
        if name in self.cells:
            cell = self.cells[name]
            try:
                v = cell.cell_contents
            except ValueError:
                raise PyptoError(f"free variable '{name}' is referenced before assignment") from None
            return tr.from_python(v, Path(("cell", cell, name), (), _is_module(v)))
        g = self.globals
        if name in g:
            v = g[name]
            if _is_module(v):
                # Arrays reached through a module (mod.W) are re-read from it at every call; its
                # Python constants are taken as fixed (no guards).
                if id(v) not in tr.paths:
                    tr.paths[id(v)] = (v, Path(("const", v), (), True))
                    tr._keep.append(v)
                return v
            return tr.from_python(v, Path(("global", g, name)))
        b = self.builtins
        if name in b:
            return b[name]
        raise PyptoError(f"name '{name}' is not defined")

    # --- attributes and subscripts ---------------------------------------------------------------
    def e_Attribute(self, node):
        return self.get_attr(self.eval(node.value), node.attr)

    def get_attr(self, base, attr):
        if isinstance(base, TensorValue):
            if attr.startswith("_"):
                raise PyptoError(f"tensors have no attribute '{attr}'")
            try:
                return getattr(base, attr)
            except AttributeError:
                raise PyptoError(f"tensors have no attribute '{attr}'") from None
        if is_expr(base):
            if attr in ("is_const", "value", "dtype", "real"):
                return getattr(base, attr) if attr != "real" else base
            raise PyptoError(f"a run-time scalar has no attribute '{attr}'")
        try:
            v = getattr(base, attr)
        except AttributeError as e:
            raise PyptoError(str(e)) from None
        p = self.tr.path_of(base)
        return self.tr.from_python(v, p.child(("attr", attr), v) if p is not None else None)

    def e_Subscript(self, node):
        base = self.eval(node.value)
        key = self.eval_index(node.slice)
        return self.get_item(base, key)

    def eval_index(self, s):
        if isinstance(s, ast.Slice):
            return slice(self.eval(s.lower) if s.lower is not None else None,
                         self.eval(s.upper) if s.upper is not None else None,
                         self.eval(s.step) if s.step is not None else None)
        if isinstance(s, ast.Tuple):
            return tuple(self.eval_index(e) for e in s.elts)
        return self.eval(s)

    def get_item(self, base, key):
        if isinstance(base, TensorValue):
            return X.index(base, key)
        if is_expr(base):
            raise PyptoError("a run-time scalar cannot be indexed")
        k = concrete(key, "an index into a Python value (list, tuple, dict) must be known at trace time")
        try:
            v = base[k]
        except (IndexError, KeyError, TypeError) as e:
            raise PyptoError(f"{type(e).__name__}: {e} (indexing {type(base).__name__} with {k!r})") from None
        p = self.tr.path_of(base)
        if p is not None and isinstance(k, (int, str)):
            return self.tr.from_python(v, p.child(("item", k), v))
        return self.tr.from_python(v, None)

    # --- operators -------------------------------------------------------------------------------
    def e_BinOp(self, node):
        return self.binop(type(node.op), self.eval(node.left), self.eval(node.right))

    def binop(self, opt, l, r):
        if isinstance(l, TensorValue) or isinstance(r, TensorValue):
            return _BINOPS[opt](l, r)
        if opt is ast.MatMult:
            raise PyptoError("@ needs tensor operands")
        if is_expr(l) or is_expr(r):
            return self.scalar_binop(opt, l, r)
        try:
            return _BINOPS[opt](l, r)
        except TypeError:
            s = first_symbolic(l, r)
            if s is not None:
                raise NeedsConcrete(s, "an operation on Python values needs a value known at trace time") from None
            raise

    def scalar_binop(self, opt, l, r):
        if opt is ast.Pow:
            e = r.value if is_expr(r) and r.is_const else r
            if isinstance(e, int) and not isinstance(e, bool) and 0 <= e <= 16:
                acc = 1
                for _ in range(e):
                    acc = acc * l
                return acc
            if is_expr(l) and l.is_const and is_expr(r) and r.is_const:
                return l.value ** r.value
            raise PyptoError("** on run-time scalars needs a small constant integer exponent")
        res = _BINOPS[opt](l, r)  # & | ^ << >> are bitwise on integer scalars, as in Python
        if res is NotImplemented:
            raise PyptoError(f"unsupported operand types: {type(l).__name__} and {type(r).__name__}")
        return res

    def e_UnaryOp(self, node):
        v = self.eval(node.operand)
        op = type(node.op)
        if op is ast.USub:
            return -v
        if op is ast.UAdd:
            return v
        if op is ast.Not:
            if isinstance(v, TensorValue):
                return T.logical_not(v)
            t = truth(v)
            if t is None:
                return _C.logic_not(v)
            return not t
        if op is ast.Invert:
            return ~v
        raise PyptoError(f"unsupported unary operator {op.__name__}")

    def e_Compare(self, node):
        left = self.eval(node.left)
        result = None
        for op, cnode in zip(node.ops, node.comparators):
            right = self.eval(cnode)
            r = self.compare(type(op), left, right)
            if result is None:
                result = r
            elif isinstance(result, TensorValue) or isinstance(r, TensorValue):
                result = result & r
            else:
                t = truth(result)
                if t is False:
                    return False
                result = r if t is True else _C.logic_and(result, r)
            if not isinstance(result, TensorValue) and truth(result) is False:
                return result
            left = right
        return result

    def compare(self, opt, l, r):
        if opt is ast.Is:
            return l is r
        if opt is ast.IsNot:
            return l is not r
        if opt in (ast.In, ast.NotIn):
            if isinstance(r, TensorValue) or isinstance(l, TensorValue):
                raise PyptoError("`in` is not supported on tensors")
            if is_symbolic(l):
                raise NeedsConcrete(l, "`in` on Python values needs a value known at trace time")
            res = concrete(l, "`in`") in r
            return res if opt is ast.In else not res
        res = _CMPOPS[opt](l, r)
        return res

    def e_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        acc = self.eval(node.values[0])
        for vnode in node.values[1:]:
            t = truth(acc)
            if t is not None:
                if is_and != t:
                    return acc  # short-circuit, as Python
                acc = self.eval(vnode)
                continue
            rhs = self.eval(vnode)
            if not is_scalar(rhs) and not isinstance(rhs, bool):
                raise NeedsConcrete(acc, "`and` / `or` between a run-time condition and a Python value")
            acc = _C.logic_and(acc, rhs) if is_and else _C.logic_or(acc, rhs)
        return acc

    def e_IfExp(self, node):
        c = self.eval(node.test)
        t = truth(c)
        if t is not None:
            return self.eval(node.body if t else node.orelse)
        a = self.eval(node.body)
        b = self.eval(node.orelse)
        if (is_scalar(a) or isinstance(a, bool)) and (is_scalar(b) or isinstance(b, bool)):
            return _C.select(c, a, b)
        if isinstance(a, TensorValue) or isinstance(b, TensorValue):
            tr = self.tr
            mask = T.wrap(tr, tr.b.full([1], _C.DType.Bool, c))
            return T.where(mask, a, b)
        raise NeedsConcrete(c, "a conditional expression choosing between Python values")

    # --- displays and comprehensions -------------------------------------------------------------
    def _elements(self, elts, symbolic=False):
        """The values of a display's or a call's elements, `*seq` unpacked: a tensor into its slices
        along dim 0, a sequence into its items (tensors as they are; scalars made concrete in a
        display, kept symbolic in a call's arguments: x.view(*x.shape[:-1], h, d) with a dynamic dim)."""
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = self.eval(e.value)
                if isinstance(v, TensorValue):
                    out.extend(list(v))
                else:
                    out.extend(x if isinstance(x, TensorValue) or symbolic else concrete(x, "unpacking with *")
                               for x in tuple(v))
            else:
                out.append(self.eval(e))
        return out

    def e_Tuple(self, node):
        return tuple(self._elements(node.elts))

    def e_List(self, node):
        return self.tr.own(self._elements(node.elts))

    def e_Set(self, node):
        return self.tr.own(set(concrete(tuple(self._elements(node.elts)), "set elements")))

    def e_Dict(self, node):
        d = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                d.update(self.eval(v))
            else:
                d[concrete(self.eval(k), "dict keys")] = self.eval(v)
        return self.tr.own(d)

    def e_JoinedStr(self, node):
        return "".join(str(self.eval(v)) if not isinstance(v, ast.Constant) else v.value for v in node.values)

    def e_FormattedValue(self, node):
        v = self.eval(node.value)
        spec = self.eval(node.format_spec) if node.format_spec is not None else ""
        if node.conversion == ord("r"):
            v = repr(v)
        elif node.conversion == ord("s"):
            v = str(v)
        return format(v, spec)

    def _comprehension(self, generators, emit):
        saved = {}
        names = set()
        for g in generators:
            for n in ast.walk(g.target):
                if isinstance(n, ast.Name):
                    names.add(n.id)
        for n in names:
            if n in self.locals:
                saved[n] = self.locals[n]

        def rec(i):
            if i == len(generators):
                emit()
                return
            g = generators[i]
            if g.is_async:
                raise PyptoError("async comprehensions are not supported")
            it = self.eval(g.iter)
            if isinstance(it, TensorValue):
                raise PyptoError("comprehensions over tensors are not supported; use a for loop or a "
                                 "tensor operation")
            if is_expr(it):
                raise PyptoError("cannot iterate over a run-time scalar")
            for item in it:
                self.store(g.target, item)
                if all(truth(self.eval(c)) for c in g.ifs):
                    rec(i + 1)

        try:
            rec(0)
        finally:
            for n in names:
                self.locals.pop(n, None)
            self.locals.update(saved)

    def e_ListComp(self, node):
        out = []
        self._comprehension(node.generators, lambda: out.append(self.eval(node.elt)))
        return self.tr.own(out)

    def e_GeneratorExp(self, node):
        out = []
        self._comprehension(node.generators, lambda: out.append(self.eval(node.elt)))
        return iter(out)

    def e_SetComp(self, node):
        out = set()
        self._comprehension(node.generators, lambda: out.add(concrete(self.eval(node.elt), "set elements")))
        return self.tr.own(out)

    def e_DictComp(self, node):
        out = {}

        def emit():
            out[concrete(self.eval(node.key), "dict keys")] = self.eval(node.value)
        self._comprehension(node.generators, emit)
        return self.tr.own(out)

    def e_NamedExpr(self, node):
        v = self.eval(node.value)
        self.store(node.target, v)
        return v

    def e_Starred(self, node):
        raise PyptoError("unsupported construct in a kernel: star-args (*x) outside a list or tuple")

    # --- calls -----------------------------------------------------------------------------------
    def e_Call(self, node):
        f = self.eval(node.func)
        args = self._elements(node.args, symbolic=True)
        kwargs = {}
        for k in node.keywords:
            if k.arg is not None:
                kwargs[k.arg] = self.eval(k.value)
                continue
            extra = self.eval(k.value)  # f(**options): a mapping known while tracing
            if not isinstance(extra, dict):
                raise PyptoError(f"**kwargs in a call needs a dict known while tracing, got {type(extra).__name__}")
            kwargs.update(extra)
        self.cur_node = node
        return self.call(f, args, kwargs)



def _is_module(v):
    return type(v).__name__ == "module"


_EXPR_HANDLERS = {}
for _name in dir(ExpressionEvaluator):
    if _name.startswith("e_"):
        _EXPR_HANDLERS[getattr(ast, _name[2:])] = getattr(ExpressionEvaluator, _name)

BUILTINS = builtins.__dict__
