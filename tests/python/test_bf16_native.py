"""bf16 matmuls on the native path (AVX512-BF16 vdpbf16ps, where the CPU reports it) and on the
portable path (PYPTO_NATIVE_DOT=0): random bf16 inputs, NaN-poisoned outputs, ragged shapes,
K spanning several tiles with an odd remainder, the fused path; compared with float64 by relative
norm error, with the interpreter (which defines the results), and with each other (one summation
order, docs/isa.md, so both vector paths give the same bits; AMX tiles, where the CPU has them, sum
in an order of their own and are held to the float64 and interpreter bounds)."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import SMALL_TILES, requires_compiler

BF16_TOL = 8e-3  # a bf16 result is rounded once: about 2^-9 relative per element


def mm_into(a, b, c):
    c[...] = pypto.matmul(a, b)


def mlp(x, w1, b1, w2):
    return pypto.gelu(pypto.matmul(x, w1) + b1) @ w2


def bf16(*shape):
    return torch.randn(*shape, dtype=torch.float64).to(torch.bfloat16)


def rel(out, ref):
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "non-finite values in the output"
    return float((out - ref).norm() / ref.norm())


PATHS = {"native": {}, "vector": {"PYPTO_AMX": "0"}, "portable": {"PYPTO_NATIVE_DOT": "0"}}


def run_both(monkeypatch, make, *args):
    """`make()` jitted fresh per path (the path is a compile flag), run on copies of args:
    native (AMX tiles where the CPU has them, else vdpbf16ps), vector (vdpbf16ps even there) and
    portable. The vector and portable paths give the same bits; the tiles may not (docs/isa.md)."""
    outs = {}
    for path, env in PATHS.items():
        for var in ("PYPTO_NATIVE_DOT", "PYPTO_AMX"):
            monkeypatch.setenv(var, env.get(var, "1"))
        fn = make()
        cargs = [a.clone() for a in args]
        r = fn(*cargs)
        outs[path] = r if r is not None else cargs[-1]
    monkeypatch.delenv("PYPTO_NATIVE_DOT")
    monkeypatch.delenv("PYPTO_AMX")
    return outs


SHAPES = [(1, 1, 1), (5, 3, 7), (33, 70, 17), (130, 257, 200)]


@requires_compiler
@pytest.mark.parametrize("tiles", [None, SMALL_TILES], ids=["tiles", "small-tiles"])
def test_bf16_matmul_paths_match_interpreter(monkeypatch, tiles):
    for (m, k, n) in SHAPES:
        a, b = bf16(m, k), bf16(k, n)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        outs = run_both(monkeypatch, lambda: pypto.jit(mm_into, tiles=tiles), a, b, c)
        interp = c.clone()
        pypto.jit(mm_into, backend="interp", tiles=tiles)(a, b, interp)
        ref = a.double() @ b.double()
        for path, out in outs.items():
            assert rel(out, ref) < BF16_TOL, (path, m, k, n)
            assert rel(out, interp) < BF16_TOL, (path, m, k, n)
        assert torch.equal(outs["vector"], outs["portable"]), (m, k, n)


@requires_compiler
def test_bf16_batched_and_fused_mlp(monkeypatch):
    # A fused group: the gelu of the first product is computed in f32 and rounded to its bf16
    # tensor type before the second product, as when it is stored (docs/isa.md).
    x, w1, b1, w2 = bf16(3, 45, 64), bf16(64, 96), bf16(96), bf16(96, 40)
    outs = run_both(monkeypatch, lambda: pypto.jit(mlp, fusion=True), x, w1, b1, w2)
    interp = pypto.jit(mlp, fusion=True, backend="interp")(x, w1, b1, w2)
    h = torch.nn.functional.gelu(x.double() @ w1.double() + b1.double())
    ref = h @ w2.double()
    for path, out in outs.items():
        assert out.dtype == torch.bfloat16 and out.shape == (3, 45, 40)
        assert rel(out, ref) < 2 * BF16_TOL, path
        assert rel(out, interp) < BF16_TOL, path
    assert torch.equal(outs["vector"], outs["portable"])


def test_bf16_operand_tiles_stay_bf16():
    a, b = bf16(64, 48), bf16(48, 32)
    text = pypto.jit(lambda a, b: a @ b).lower(a, b).as_text("tile")
    assert "bf16[64, 48] mat" in text and "bf16[48, 32] mat" in text, text
    # Mixed operands convert to the f32 accumulator's type as before.
    text = pypto.jit(lambda a, b: a @ b).lower(a, b.float()).as_text("tile")
    assert "bf16[64, 48] mat" not in text and "f32[64, 48] mat" in text, text


def mm_bt(a, w):
    return pypto.matmul(a, w.T)


def mm_at(x, b):
    return pypto.matmul(x.T, b)


def mm_acc(a, b, c):
    c += a @ b


# Whole-matrix products (MMATMUL of bf16 operands: both operands packed, the whole K in
# registers): balanced row panels (61 = 13 + 4 x 12), a ragged last panel (33), odd K, columns
# past the last 32-column panel, split by rows (300 x 130) and by columns across the threads.
WHOLE = [("plain", 61, 301, 130), ("plain", 300, 71, 130), ("b_transposed", 33, 301, 260),
         ("a_transposed", 61, 301, 130), ("accumulate", 300, 71, 130)]


@requires_compiler
@pytest.mark.parametrize("variant,m,k,n", WHOLE)
def test_bf16_whole_matrix_product(monkeypatch, variant, m, k, n):
    a, b = bf16(m, k), bf16(k, n)
    if variant == "b_transposed":
        fn, args, ref = mm_bt, [a, b.T.contiguous()], a.double() @ b.double()
    elif variant == "a_transposed":
        fn, args, ref = mm_at, [a.T.contiguous(), b], a.double() @ b.double()
    elif variant == "accumulate":
        c0 = bf16(m, n)
        fn, args, ref = mm_acc, [a, b, c0], c0.double() + a.double() @ b.double()
    else:
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        fn, args, ref = mm_into, [a, b, c], a.double() @ b.double()
    interp_fn = pypto.jit(fn, backend="interp")
    assert "MMATMUL" in interp_fn.lower(*args).as_text("isa")
    outs = run_both(monkeypatch, lambda: pypto.jit(fn), *args)
    iargs = [x.clone() for x in args]
    interp = interp_fn(*iargs)
    interp = interp if interp is not None else iargs[-1]
    for path, out in outs.items():
        assert out.dtype == torch.bfloat16
        assert rel(out, ref) < BF16_TOL, path
        assert rel(out, interp) < BF16_TOL, path
    assert torch.equal(outs["vector"], outs["portable"])
