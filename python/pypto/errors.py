"""The exceptions users see: the bottom of the package, below dtypes and the front end."""
from __future__ import annotations

from . import _C

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


def format_location(filename, lineno, source_line, message):
    text = f"{filename}:{lineno}: {message}"
    if source_line:
        text += "\n    " + source_line.strip()
    return text
