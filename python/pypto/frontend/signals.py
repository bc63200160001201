"""The control-flow signals the tracer uses internally (never seen by users)."""
from __future__ import annotations


class Restart(Exception):
    """Internal: trace again with more loops unrolled or more scalar arguments made static."""

    def __init__(self, unroll=None, static_arg=None, why=None, static_dim=None):
        super().__init__("restart")
        self.unroll = unroll
        self.static_arg = static_arg
        self.static_dim = static_dim  # (arg index, dim): a dynamic dim needed as a Python value
        self.why = why  # "file:line: what needed the value", for kernel.cache_info()


class NeedsConcrete(Exception):
    """Internal: a symbolic value was used where a Python value is needed (indexing a Python list,
    a Python `if` on Python values, ...). The innermost loop it depends on gets unrolled, or the
    scalar argument it depends on becomes a compile-time constant. `expr` None = the innermost
    symbolic loop, whatever it is (e.g. a Python list mutated inside it)."""

    def __init__(self, expr, what):
        super().__init__(what)
        self.expr = expr
        self.what = what
        self.node = None
