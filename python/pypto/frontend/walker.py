"""The statement walker: turns a kernel function's body into builder calls.

Every error raised while walking a statement becomes a PyptoError naming the kernel's file, line
and source text. Loops and ifs live in control.py."""
from __future__ import annotations

import ast
import importlib

from . import intrinsics
from .calls import call_value, check_mutation
from .control import ControlFlow, Break, Continue
from ..errors import KernelSourceError, PyptoError
from .signals import NeedsConcrete, Restart
from .expressions import BUILTINS, ExpressionEvaluator, LoopLocal, concrete
from .source import SourceInfo
from .values import Opcode, TensorValue, is_expr
from .index_ops import has_tensor_index, setitem
from .index_ops import index as tensor_index
from . import tensor_ops as T

_UNSUPPORTED_STMT = {
    ast.While: "while loops (use `for ... in range(...)`)",
    ast.Try: "try/except",
    ast.With: "with statements",
    ast.AsyncWith: "async with",
    ast.AsyncFor: "async for",
    ast.AsyncFunctionDef: "async functions",
    ast.FunctionDef: "nested function definitions (define helpers outside the kernel)",
    ast.ClassDef: "class definitions",
    ast.Global: "global declarations",
    ast.Nonlocal: "nonlocal declarations",
}
if hasattr(ast, "Match"):
    _UNSUPPORTED_STMT[ast.Match] = "match statements"
if hasattr(ast, "TryStar"):
    _UNSUPPORTED_STMT[ast.TryStar] = "try/except*"

_INPLACE = {ast.Add: Opcode.TADD, ast.Sub: Opcode.TSUB, ast.Mult: Opcode.TMUL, ast.Div: Opcode.TDIV,
            ast.Pow: Opcode.TPOW, ast.BitAnd: Opcode.TAND, ast.BitOr: Opcode.TOR}

MAX_INLINE_DEPTH = 32


class ReturnSignal(Exception):
    def __init__(self, value):
        super().__init__("return")
        self.value = value


class FunctionWalker(ExpressionEvaluator, ControlFlow):
    def __init__(self, tr, src: SourceInfo, depth=0):
        self.tr = tr
        self.src = src
        func = src.func
        self.locals = {}
        code = func.__code__
        self.cells = dict(zip(code.co_freevars, func.__closure__ or ()))
        self.globals = func.__globals__
        b = self.globals.get("__builtins__", BUILTINS)
        self.builtins = b if isinstance(b, dict) else b.__dict__
        self.depth = depth
        self.cur_node = None
        self.base_sym_depth = tr.sym_depth
        self.loop_kinds = []  # "py" / "sym" / "if" for break/continue checks

    # --- entry -----------------------------------------------------------------------------------
    def run(self, bound):
        """Walk the body with parameters bound to values; returns the kernel's return value."""
        self.locals.update(bound)
        try:
            self.walk_block(self.src.fdef.body)
        except ReturnSignal as r:
            return r.value
        return None

    def walk_block(self, stmts):
        for s in stmts:
            self.visit(s)

    def visit(self, node):
        h = _STMT_HANDLERS.get(type(node))
        self.cur_node = node
        self.tr.cur_stmt = (self.src, node)  # where ops with run-time checks record their line
        # autodiff's errors and run-time index checks name the kernel line of a statement
        self.tr.b.set_location(f"{self.src.filename}:{self.src.lineno(node)}: {self.src.line_text(node).strip()}")
        try:
            if h is None:
                what = _UNSUPPORTED_STMT.get(type(node), type(node).__name__)
                raise PyptoError(f"unsupported construct in a kernel: {what}")
            h(self, node)
        except (Restart, ReturnSignal, Break, Continue, KernelSourceError):
            raise
        except NeedsConcrete as e:
            if e.node is None:
                e.node = self._blame(node)
                e.src = self.src
            raise
        except RecursionError:
            raise KernelSourceError(self.src.where(node, "recursion too deep while tracing")) from None
        except PyptoError as e:
            raise KernelSourceError(self.src.where(self._blame(node), str(e))) from None
        except Exception as e:  # noqa: BLE001 - every failure must name the kernel line
            raise KernelSourceError(self.src.where(self._blame(node), f"{type(e).__name__}: {e}")) from e

    def _blame(self, stmt):
        """The innermost expression being evaluated when it failed, if it lies in `stmt`."""
        n = self.cur_node
        if n is not None and hasattr(n, "lineno") and stmt.lineno <= n.lineno <= getattr(stmt, "end_lineno", 10**9):
            if not isinstance(stmt, (ast.For, ast.If)) or n.lineno == stmt.lineno:
                return n
        return stmt

    def error(self, node, message):
        return KernelSourceError(self.src.where(node, message))

    # --- simple statements -------------------------------------------------------------------------
    def s_Expr(self, node):
        if isinstance(node.value, ast.Constant):
            return  # docstring or a bare constant
        self.eval(node.value)

    def s_Pass(self, node):
        pass

    def s_Assign(self, node):
        value = self.eval(node.value)
        for t in node.targets:
            self.store(t, value)

    def s_AnnAssign(self, node):
        if node.value is not None:
            self.store(node.target, self.eval(node.value))

    def s_Return(self, node):
        if self.tr.sym_depth > self.base_sym_depth:
            # Unrolling the loop / specialising on the condition's scalar makes it a Python-level
            # return; when neither is possible the loop or top level reports this message.
            raise NeedsConcrete(None, "return inside a loop or an if whose condition is only known at run "
                                      "time (assign the result and return it at the end)")
        raise ReturnSignal(self.eval(node.value) if node.value is not None else None)

    def s_Assert(self, node):
        t = self.eval(node.test)
        if isinstance(t, TensorValue):
            raise PyptoError("assert on a tensor is not supported (its data is only known at run time)")
        if is_expr(t) and not t.is_const:
            return  # only known at run time: nothing to check while tracing
        if not (t.value if is_expr(t) else t):
            msg = self.eval(node.msg) if node.msg is not None else ""
            raise PyptoError(f"assertion failed{': ' + str(msg) if msg != '' else ''}")

    def s_Raise(self, node):
        if node.exc is None:
            raise PyptoError("bare `raise` is not supported in a kernel")
        exc = self.eval(node.exc)
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc = exc()
        if not isinstance(exc, BaseException):
            raise PyptoError("exceptions must derive from BaseException")
        raise PyptoError(f"{type(exc).__name__}: {exc}")

    def s_Import(self, node):
        for a in node.names:
            mod = importlib.import_module(a.name)
            if a.asname:
                self.locals[a.asname] = mod
            else:
                top = a.name.split(".")[0]
                self.locals[top] = importlib.import_module(top)

    def s_ImportFrom(self, node):
        if node.level:
            raise PyptoError("relative imports are not supported inside a kernel")
        mod = importlib.import_module(node.module)
        for a in node.names:
            if a.name == "*":
                raise PyptoError("`from ... import *` is not supported inside a kernel")
            self.locals[a.asname or a.name] = getattr(mod, a.name)

    def s_Delete(self, node):
        for t in node.targets:
            if isinstance(t, ast.Name):
                v = self.locals.get(t.id)
                if isinstance(v, TensorValue):
                    raise PyptoError(f"unsupported construct in a kernel: del of a tensor ('{t.id}')")
                if t.id not in self.locals:
                    raise PyptoError(f"name '{t.id}' is not defined")
                del self.locals[t.id]
            elif isinstance(t, ast.Subscript):
                base = self.eval(t.value)
                if isinstance(base, TensorValue):
                    raise PyptoError("unsupported construct in a kernel: del of a tensor element")
                check_mutation(self, base)
                del base[concrete(self.eval_index(t.slice), "del index")]
            else:
                raise PyptoError("unsupported construct in a kernel: del of an attribute")

    # --- assignment targets --------------------------------------------------------------------
    def store(self, target, value):
        if isinstance(target, ast.Name):
            self.locals[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            self.unpack(target.elts, value)
        elif isinstance(target, ast.Subscript):
            base = self.eval(target.value)
            key = self.eval_index(target.slice)
            self.cur_node = target
            if isinstance(base, TensorValue):
                setitem(base, key, value)
            elif is_expr(base):
                raise PyptoError("a run-time scalar cannot be assigned into")
            else:
                k = concrete(key, "an index into a Python value (list, dict) must be known at trace time")
                check_mutation(self, base)
                base[k] = value
        elif isinstance(target, ast.Attribute):
            raise PyptoError(f"assigning to an attribute (.{target.attr} = ...) is not supported inside a "
                             "kernel: it would change a Python object at trace time only")
        elif isinstance(target, ast.Starred):
            raise PyptoError("unsupported construct in a kernel: starred assignment target")
        else:
            raise PyptoError(f"unsupported assignment target {type(target).__name__}")

    def unpack(self, elts, value):
        if isinstance(value, TensorValue):
            items = list(value)
        elif is_expr(value):
            raise PyptoError("cannot unpack a run-time scalar")
        else:
            try:
                items = list(value)
            except TypeError:
                raise PyptoError(f"cannot unpack non-iterable {type(value).__name__} object") from None
        star = [i for i, e in enumerate(elts) if isinstance(e, ast.Starred)]
        if star:
            i = star[0]
            n_after = len(elts) - i - 1
            if len(items) < len(elts) - 1:
                raise PyptoError(f"not enough values to unpack (expected at least {len(elts) - 1}, got "
                                 f"{len(items)})")
            head, mid, tail = items[:i], items[i:len(items) - n_after], items[len(items) - n_after:]
            for e, v in zip(elts[:i], head):
                self.store(e, v)
            self.store(elts[i].value, self.tr.own(list(mid)))
            for e, v in zip(elts[i + 1:], tail):
                self.store(e, v)
            return
        if len(items) != len(elts):
            if len(items) < len(elts):
                raise PyptoError(f"not enough values to unpack (expected {len(elts)}, got {len(items)})")
            raise PyptoError(f"too many values to unpack (expected {len(elts)}, got {len(items)})")
        for e, v in zip(elts, items):
            self.store(e, v)

    def s_AugAssign(self, node):
        t = node.target
        opt = type(node.op)
        if isinstance(t, ast.Name):
            cur = self.e_Name(t)
            if isinstance(cur, TensorValue):
                self.inplace(cur, opt, node.value)
            else:
                self.locals[t.id] = self.binop(opt, cur, self.eval(node.value))
        elif isinstance(t, ast.Subscript):
            base = self.eval(t.value)
            key = self.eval_index(t.slice)
            if isinstance(base, TensorValue) and has_tensor_index(key):  # x[idx] += v: read, combine, write back
                setitem(base, key, self.binop(opt, tensor_index(base, key), self.eval(node.value)))
            elif isinstance(base, TensorValue):
                self.inplace(T.index(base, key), opt, node.value)
            else:
                k = concrete(key, "an index into a Python value must be known at trace time")
                new = self.binop(opt, base[k], self.eval(node.value))
                check_mutation(self, base)
                base[k] = new
        else:
            raise PyptoError("augmented assignment to an attribute is not supported inside a kernel")

    def call(self, f, args, kwargs):
        return call_value(self, f, args, kwargs)

    def inplace(self, dst, opt, value_node):
        """dst op= value on a tensor: in place (`+=` of a matmul accumulates: TMATMUL_ACC)."""
        if opt is ast.Add:
            mm, value = self.matmul_or_value(value_node)
            if mm is not None:
                T.matmul_acc(dst, *mm)
                return
        else:
            value = self.eval(value_node)
        op = _INPLACE.get(opt)
        if op is None:
            raise PyptoError(f"in-place operator {opt.__name__} is not supported on tensors")
        T.update(op, dst, value)

    def matmul_or_value(self, node):
        """((a, b), None) when `node` multiplies two tensors of rank >= 2 (then `+=` accumulates
        in place), else (None, the evaluated value). Operands are evaluated once either way."""
        def ok(a, b):
            return isinstance(a, TensorValue) and isinstance(b, TensorValue) and a.ndim >= 2 and b.ndim >= 2
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            a, b = self.eval(node.left), self.eval(node.right)
            if ok(a, b):
                return (a, b), None
            return None, self.binop(ast.MatMult, a, b)
        if isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords \
                and not any(isinstance(x, ast.Starred) for x in node.args):
            f = self.eval(node.func)
            a, b = self.eval(node.args[0]), self.eval(node.args[1])
            if intrinsics.intrinsic_of(f) == intrinsics.MATMUL and ok(a, b):
                return (a, b), None
            self.cur_node = node
            return None, self.call(f, [a, b], {})
        return None, self.eval(node)

    # --- inlining of other kernels ---------------------------------------------------------------
    def inline_kernel(self, jf, args, kwargs):
        if self.depth >= MAX_INLINE_DEPTH:
            raise PyptoError("kernels call each other too deeply (recursion is not supported)")
        src = jf._source()
        if jf._self is not None:
            args = [jf._self] + list(args)
        try:
            bound = jf._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise PyptoError(f"calling kernel '{src.name}': {e}") from None
        bound.apply_defaults()
        w = FunctionWalker(self.tr, src, self.depth + 1)
        return w.run(dict(bound.arguments))


_STMT_HANDLERS = {}
for _cls in (FunctionWalker, ControlFlow):
    for _name in dir(_cls):
        if _name.startswith("s_"):
            _STMT_HANDLERS[getattr(ast, _name[2:])] = getattr(FunctionWalker, _name)

__all__ = ["FunctionWalker", "ReturnSignal", "LoopLocal"]
