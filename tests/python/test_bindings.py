"""The _C bindings the front end drives: Expr operators, Builder, View, Kernel."""
import numpy as np
import pytest

import pypto
from pypto import _C
from pypto_testutil import assert_close, rand


def test_expr_operators_fold_and_stay_symbolic():
    i = _C.var("i")
    e = (i + 64) - i
    assert e.is_const and e.value == 64 and int(e) == 64
    assert (_C.int_imm(7) // 2).value == 3 and (_C.int_imm(7) % 4).value == 3
    assert (_C.int_imm(3) / 2).value == pytest.approx(1.5)
    s = _C.expr_min(i + 64, 100)
    assert not s.is_const and s.value is None and "i" in s.vars()
    assert isinstance(i < 5, _C.Expr) and isinstance(-i, _C.Expr)
    assert (2 * i).same(i + i)
    with pytest.raises(TypeError, match="run time|only known"):
        bool(i < 5)
    with pytest.raises(TypeError):
        int(i)
    with pytest.raises(TypeError):
        [0, 1][i]
    assert bool(_C.int_imm(1) < 2) is True
    assert float(_C.float_imm(2.5)) == 2.5
    assert [10, 20, 30][_C.int_imm(1)] == 20  # __index__ on a constant
    assert (i == None) is False  # noqa: E711 - other types compare by identity
    assert _C.select(_C.int_imm(1), 3, 4).value == 3


def test_builder_program_and_kernel(backend):
    b = _C.Builder("axpy")
    x = b.add_param("x", _C.DType.F32, [10, 7])
    y = b.add_param("y", _C.DType.F32, [10, 7])
    alpha = b.add_scalar_param("alpha", _C.DType.F64)
    assert x.shape == [10, 7] and x.dtype == "f32" and x.rank == 2
    out = b.empty([10, 7], _C.DType.F32)
    i = b.begin_for("i", 0, 10, 4)
    rows = b.slice(x, [slice(i, i + 4)])
    assert rows.shape == [4, 7]
    t = b.binary(_C.Opcode.TMUL, rows, alpha)
    b.assign(b.slice(out, [slice(i, i + 4)]), b.binary(_C.Opcode.TADD, t, b.slice(y, [slice(i, i + 4)])))
    b.end_for()
    prog = b.finish([out])
    k = _C.Kernel(prog, backend)
    assert [p[3] for p in k.params()] == ["param", "param", "output"]
    assert "for %i" in k.as_text("tensor")
    k.compile()
    xv, yv, ov = rand(10, 7), rand(10, 7), np.full((10, 7), np.nan, np.float32)
    k.run([xv, yv, ov], [0.5])
    assert_close(ov, 0.5 * xv.astype(np.float64) + yv)


def test_builder_errors_are_pypto_errors():
    b = _C.Builder("bad")
    x = b.add_param("x", _C.DType.F32, [3, 4])
    y = b.add_param("y", _C.DType.F32, [5])
    with pytest.raises(pypto.PyptoError, match=r"\(3, 4\).*\(5,\)"):
        b.binary(_C.Opcode.TADD, x, y)
    with pytest.raises(pypto.PyptoError, match=r"too many indices for a tensor of shape \(3, 4\): 3 given"):
        b.slice(x, [0, 0, 0])
    assert issubclass(pypto.PyptoError, ValueError)


def test_kernel_run_checks_arguments():
    b = _C.Builder("neg")
    x = b.add_param("x", _C.DType.F32, [4])
    k = _C.Kernel(b.finish([b.unary(_C.Opcode.TNEG, x)]), "interp")
    with pytest.raises(pypto.PyptoError, match=r"argument 1 \('x'\): expected f32\[4\], got f32\[5\]"):
        k.run([np.ones(5, np.float32), np.empty(4, np.float32)], [])
    with pytest.raises(pypto.PyptoError, match="tensor argument 0: expected an array .*got str"):
        k.run(["not an array", np.empty(4, np.float32)], [])
    with pytest.raises(pypto.PyptoError, match="unknown backend 'tpu'"):
        _C.Kernel(b.finish([]), "tpu")
