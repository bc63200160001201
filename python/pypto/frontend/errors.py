"""Errors of the front end, and the control-flow signals the tracer uses internally."""
from __future__ import annotations

from .. import _C

# The one exception type users see. It is created by the C++ module (so that errors thrown by the
# builder, the passes and the runtime arrive as the same type) and is a subclass of ValueError.
PyptoError = _C.PyptoError


class KernelSourceError(PyptoError):
    """A PyptoError that already names the kernel's file, line and source text."""


class ArgumentError(PyptoError, TypeError):
    """A kernel called with the wrong arguments (count or names)."""


class AutogradError(PyptoError, RuntimeError):
    """A kernel write that torch's autograd rules forbid (a leaf that requires grad): a
    RuntimeError, as torch's own in-place operations raise, and a PyptoError."""


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


def format_location(filename, lineno, source_line, message):
    text = f"{filename}:{lineno}: {message}"
    if source_line:
        text += "\n    " + source_line.strip()
    return text
