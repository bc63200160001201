"""Public functions the front end treats specially: the loop forms (`for i in pypto.prange(...)`,
`pypto.static_range`) and matmul (`acc += pypto.matmul(a, b)` accumulates in place). The public
API, which sits above the front end, tags them; the walker reads the tag instead of comparing
against the API's functions. It also registers every public operation, so that errors can name
the nearest one."""
from __future__ import annotations

ATTR = "__pypto_intrinsic__"
PRANGE, STATIC_RANGE, MATMUL = "prange", "static_range", "matmul"

_public_ops = []


def intrinsic(kind):
    """Decorator: marks a public function as the intrinsic `kind`."""
    def tag(fn):
        setattr(fn, ATTR, kind)
        return fn
    return tag


def intrinsic_of(f):
    """The intrinsic kind of `f` (PRANGE, STATIC_RANGE, MATMUL), or None."""
    return getattr(f, ATTR, None)


def register_public_op(fn):
    _public_ops.append(fn)
    return fn


def public_op_names():
    """The names of the public operations (pypto.X) made so far."""
    return sorted({f.__name__ for f in _public_ops if not f.__name__.startswith("_")})
