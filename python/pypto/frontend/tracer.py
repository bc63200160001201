"""The trace state of one kernel being built: the C++ builder, the kernel's inputs (explicit
arguments and implicit inputs reached through closures, globals or attributes), its scalar
parameters, the guards that say when a cached trace is still valid, and what the tracer learned
(loops to unroll, scalar arguments to specialise)."""
from __future__ import annotations

import itertools
import re
import sys
import threading
import types

import numpy as np

from .. import _C
from .. import interop
from ..errors import PyptoError
from .values import TensorValue

_state = threading.local()

PRIMITIVES = (int, float, bool, str, bytes, type(None), complex)


def current():
    st = getattr(_state, "stack", None)
    return st[-1] if st else None


class Path:
    """How to find a value again at the next call: a root and attribute / item steps."""

    __slots__ = ("root", "steps", "key", "via_module")

    def __init__(self, root, steps=(), via_module=False):
        self.root = root
        self.steps = tuple(steps)
        self.via_module = via_module
        kind = root[0]
        if kind == "arg":
            rk = ("arg", root[1])
        elif kind == "cell":
            rk = ("cell", id(root[1]))
        elif kind == "global":
            rk = ("global", id(root[1]), root[2])
        elif kind == "call":  # (kind, make, name): make() computes it afresh at every call
            rk = ("call", root[2])
        else:
            rk = ("const", id(root[1]))
        self.key = (rk, self.steps)

    def child(self, step, value=None):
        return Path(self.root, self.steps + (step,), self.via_module or isinstance(value, types.ModuleType))

    def name(self):
        parts = []
        kind = self.root[0]
        if kind == "global":
            parts.append(self.root[2])
        elif kind in ("cell", "call"):
            parts.append(self.root[2])
        elif kind == "arg":
            parts.append(f"arg{self.root[1]}")
        else:
            parts.append("const")
        for kind_, k in self.steps:
            parts.append(str(k))
        if len(parts) > 1 and parts[0] in ("arg0", "const"):
            parts = parts[1:]
        return re.sub(r"\W", "_", "_".join(parts)) or "input"

    def reader(self):
        """A function args -> value (raises on a missing attribute/key)."""
        kind = self.root[0]
        if kind == "arg":
            i = self.root[1]
            fn = lambda args: args[i]  # noqa: E731
        elif kind == "cell":
            cell = self.root[1]
            fn = lambda args: cell.cell_contents  # noqa: E731
        elif kind == "global":
            g, name = self.root[1], self.root[2]
            fn = lambda args: g[name]  # noqa: E731
        elif kind == "call":
            make = self.root[1]
            fn = lambda args: make()  # noqa: E731
        else:
            obj = self.root[1]
            fn = lambda args: obj  # noqa: E731
        for kind_, k in self.steps:
            prev = fn
            if kind_ == "attr":
                fn = (lambda p, k: lambda args: getattr(p(args), k))(prev, k)
            elif kind_ == "len":
                fn = (lambda p: lambda args: len(p(args)))(prev)
            else:
                fn = (lambda p, k: lambda args: p(args)[k])(prev, k)
        return fn


_compiler_state = {"depth": 0, "original": None}
_compiler_lock = threading.Lock()


def _answer_is_compiling(enter):
    """While a kernel is traced, torch.compiler.is_compiling() says True on the tracing thread:
    library code (Hugging Face's masks, caches and checks) then takes the paths it keeps for graph
    capture, which never branch on a tensor's data, as a traced tensor's cannot be read. The
    function is replaced only while some trace runs (torch.compile must see the original one)."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None) if torch is not None else None
    if compiler is None:
        return
    with _compiler_lock:
        st = _compiler_state
        if enter:
            st["depth"] += 1
            if st["depth"] == 1:
                original = st["original"] = compiler.is_compiling

                def is_compiling():
                    return bool(getattr(_state, "stack", None)) or original()
                compiler.is_compiling = is_compiling
        elif st["depth"] > 0:
            st["depth"] -= 1
            if st["depth"] == 0 and st["original"] is not None:
                compiler.is_compiling, st["original"] = st["original"], None


class Tracer:
    def __init__(self, name, unroll=(), static_args=(), backend="cpu", dynamic=None):
        self.name = name
        self.dynamic = dynamic or {}    # arg index -> dims traced as dimension symbols
        self.dim_vars = {}              # dimension symbol var name -> (arg index, dim)
        self._symbol_of_size = {}       # trace-time extent -> symbol name (equal extents share one)
        self.b = _C.Builder(name)
        self.backend = backend
        # Param order: ("arg", index) for explicit tensor arguments, ("implicit", Path, obj) else.
        self.inputs = []
        self.scalar_args = []           # arg indices of scalar params, in order
        self.scalar_vars = {}           # Expr var name -> arg index
        self._implicit = {}             # path key / id(array) -> TensorValue
        self.guards = []                # (Path, value): primitive values read through paths
        self.paths = {}                 # id(obj) -> (obj, Path) for objects reached from roots
        self.unroll = set(unroll)
        self.static_args = set(static_args)
        # Called with torch tensors (or a module): tensor methods whose meaning differs between
        # NumPy and torch follow torch (x.max(dim) gives (values, indices)).
        self.torch_flavour = False
        self.loops = []                 # active symbolic loop frames (innermost last)
        self.sym_depth = 0              # nesting of symbolic loops and ifs
        self.owned = set()              # ids of Python containers the kernel created
        self._keep = []                 # keeps objects in `paths`/`owned` alive (ids stay unique)
        self.param_index = {}           # buffer_id of a param view -> its position in `inputs`
        self.written = set()            # positions in `inputs` of the params the kernel stores into
        self.cur_stmt = None            # (KernelSource, statement node) being walked
        self.index_sites = []           # "file:line: text" of every indexing by tensors

    def note_index_site(self):
        """Remembers the statement being walked as one that indexes by tensors: a run-time index
        error names it."""
        if self.cur_stmt is not None:
            src, node = self.cur_stmt
            site = f"{src.filename}:{src.lineno(node)}: {src.line_text(node).strip()}"
            if site not in self.index_sites:
                self.index_sites.append(site)

    # --- context -------------------------------------------------------------------------------
    def __enter__(self):
        st = getattr(_state, "stack", None)
        if st is None:
            st = _state.stack = []
        st.append(self)
        _answer_is_compiling(True)
        return self

    def __exit__(self, *exc):
        _state.stack.pop()
        _answer_is_compiling(False)
        return False

    # --- inputs ----------------------------------------------------------------------------------
    def tensor_param(self, name, arr, source):
        dt, shape = interop.array_info(arr, f"argument '{name}'")
        dims = self.dynamic.get(source[1]) if source[0] == "arg" else None
        if dims:
            # Dynamic dims sharing their trace-time extent share a symbol (the cache key records
            # which dims are equal, so a call where they differ gets its own variant).
            symbols = []
            for d, n in enumerate(shape):
                if d in dims:
                    symbols.append(self._symbol_of_size.setdefault(n, f"{name}_{d}"))
                else:
                    symbols.append("")
            view = self.b.add_param(name, dt.c, list(shape), symbols)
            for d, e in enumerate(view.valid_shape):
                if d in dims:
                    for v in e.vars():
                        self.dim_vars.setdefault(v, (source[1], d))
        else:
            view = self.b.add_param(name, dt.c, list(shape))
        self.param_index[view.buffer_id] = len(self.inputs)
        self.inputs.append(source)
        return TensorValue(self, view)

    def scalar_param(self, name, is_float, arg_index):
        e = self.b.add_scalar_param(name, _C.DType.F64 if is_float else _C.DType.I64)
        self.scalar_args.append(arg_index)
        for v in e.vars():
            self.scalar_vars[v] = arg_index
        return e

    def implicit_input(self, obj, path):
        """An array reached through a closure, global or attribute: a kernel input read afresh at
        every call, never baked into the binary."""
        if path is None:
            path = self.path_of(obj) or Path(("const", obj))
        tv = self._implicit.get(path.key)
        if tv is None:
            tv = self._implicit.get(("id", id(obj)))
        if tv is not None:
            return tv
        dt, shape = interop.array_info(obj, f"'{path.name()}' (used inside the kernel)")
        view = self.b.add_param(path.name(), dt.c, list(shape))
        tv = TensorValue(self, view)
        self.param_index[view.buffer_id] = len(self.inputs)
        self.inputs.append(("implicit", path, obj))
        self._implicit[path.key] = tv
        self._implicit[("id", id(obj))] = tv
        self._keep.append(obj)
        return tv

    def guard_module_state(self, module):
        """Trace again when an nn.Module's train()/eval() state or its submodules' hooks change:
        submodules run as plain Python while tracing (dropout, batch norm, their hooks), so what
        they read is baked into the kernel and not seen as guards otherwise. (The root's own hooks
        run outside the kernel: jit.py.)"""
        def state():
            return tuple((m.training, tuple(m._forward_pre_hooks), tuple(m._forward_hooks)) if m is not module
                         else m.training for m in module.modules())
        self.guards.append((Path(("call", state, "module_state")), state()))

    def fresh_seed(self):
        """A (1,) int64 kernel input holding a new random seed at every call (random_ops.py):
        drawn from torch's default generator for torch callers, else from NumPy's global one."""
        if self.torch_flavour or getattr(self, "seed_from_torch", False):
            import torch

            def make():
                return torch.randint(-(1 << 63), (1 << 63) - 1, (1,), dtype=torch.int64)
            placeholder = torch.zeros(1, dtype=torch.int64)
        else:
            def make():
                return np.random.randint(-(1 << 63), (1 << 63) - 1, size=(1,), dtype=np.int64)
            placeholder = np.zeros(1, dtype=np.int64)
        path = Path(("call", make, "random_seed"))
        # One input per kernel; each use is told apart by its ordinal (random_ops salts with it),
        # so two dropouts of one kernel draw independent masks.
        self.seed_uses = getattr(self, "seed_uses", 0) + 1
        # The trace sees a placeholder of the same kind: the generator is drawn once per call, not
        # also while tracing (so torch.manual_seed(s) then a first call repeats like later ones).
        return self.implicit_input(placeholder, path), self.seed_uses

    def const_input(self, arr):
        return self.implicit_input(arr, None)

    def from_python(self, value, path):
        """A Python value reached through `path` (None = unknown): arrays become implicit inputs,
        primitives read through closures/globals/attributes become guards, objects remember their
        path so that arrays inside them can be re-read."""
        if interop.is_array(value):
            return self.implicit_input(value, path)
        if path is None:
            return value
        if isinstance(value, PRIMITIVES):
            if not path.via_module and not (path.root[0] == "arg" and not path.steps):
                self.guards.append((path, value))
            return value
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
            return value
        if id(value) not in self.paths:
            self.paths[id(value)] = (value, path)
            self._keep.append(value)
        return value

    def note_module_tensors(self, obj, path):
        """A torch nn.Module argument (a kernel made from a module or its forward): its
        parameters and buffers, used by submodule code that runs as plain Python, are found
        again through their attribute paths at every call (updated or replaced weights are seen)."""
        named = getattr(obj, "named_parameters", None)
        if named is None or not callable(getattr(obj, "named_buffers", None)):
            return
        for name, t in itertools.chain(named(), obj.named_buffers()):
            if t is not None and id(t) not in self.paths:
                p = path
                for part in name.split("."):
                    p = p.child(("attr", part))
                self.paths[id(t)] = (t, p)
                self._keep.append(t)

    def guard_len(self, container):
        """The trace depends on the length of a container reached through a path (iterating over
        it, len()): a different length at a later call means a new trace."""
        p = self.path_of(container)
        if p is not None and not p.via_module and not (p.root[0] == "arg" and not p.steps):
            try:
                n = len(container)
            except TypeError:
                return
            self.guards.append((p.child(("len", None)), n))

    def path_of(self, obj):
        e = self.paths.get(id(obj))
        return e[1] if e is not None and e[0] is obj else None

    def own(self, container):
        self.owned.add(id(container))
        self._keep.append(container)
        return container

    def is_owned(self, container):
        return id(container) in self.owned

    def note_write(self, view):
        """A store into `view`: remember which input it writes (torch custom ops declare them)."""
        if view.buffer_kind == "param":
            k = self.param_index.get(view.buffer_id)
            if k is not None:
                self.written.add(k)

    # --- finish ----------------------------------------------------------------------------------
    def finish(self, outputs):
        return self.b.finish([o.bv for o in outputs])


def check_same_tracer(tr, x):
    if isinstance(x, TensorValue) and x.tr is not tr:
        raise PyptoError("a tensor from another kernel's trace was used")
