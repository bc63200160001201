"""Turning an optimisation off changes speed, never results.

Each kernel runs under combinations of the jit options fusion ("off" / False / True / a list),
promote, double_buffer and parallel, on the CPU backend (a reduced set on the interpreter), and
every result is checked against a float64 NumPy/PyTorch reference. The IR is checked to change
as each option says (fused temporaries gone, no TPREFETCH, no parallel loops, ...).

Kernels are compiled once per option set (a module-level cache of jit objects); identical
generated sources share one compiled object, so the file stays fast.
"""
import itertools
import math
import re

import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import RTOL, as_numpy, poisoned, rand, rel_err

FUSIONS = ["off", False, True, ["matmul", "add", "relu"]]


def fusion_id(f):
    return "+".join(f) if isinstance(f, list) else str(f)


def option_sets():
    """Every fusion mode with the other three options all on and all off, and every other mix of
    promote / double_buffer / parallel with the default fusion."""
    out = []
    for f in FUSIONS:
        for on in (True, False):
            out.append(dict(fusion=f, promote=on, double_buffer=on, parallel=on))
    for p, d, q in itertools.product((True, False), repeat=3):
        if not p == d == q:
            out.append(dict(fusion=False, promote=p, double_buffer=d, parallel=q))
    return out


OPTIONS = option_sets()
# The interpreter is slow and strict: a few sets that between them flip every option.
INTERP_OPTIONS = [
    dict(fusion="off", promote=False, double_buffer=False, parallel=False),
    dict(fusion=True, promote=True, double_buffer=True, parallel=True),
    dict(fusion=["matmul", "add", "relu"], promote=False, double_buffer=True, parallel=False),
]


def options_id(o):
    return "fusion={}-promote={:d}-db={:d}-par={:d}".format(
        fusion_id(o["fusion"]), o["promote"], o["double_buffer"], o["parallel"])


# --- kernels --------------------------------------------------------------------------------------

# The seed's kernels as written (2.1, 3.1, 4.2), from their one home in the package.
from pypto.seed_kernels import fused_linear, matrix_multiply, optimized_attention  # noqa: E402


def layer_norm(x, w, b, out):
    out[...] = pypto.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def mlp(x, w1, b1, w2, b2):
    return pypto.gelu(x @ w1 + b1) @ w2 + b2


def column_sum(x, out):
    out[...] = pypto.sum(x, 0, keepdim=True)


def broadcast_exp(x):
    # broadcast_to copies (TMOV); fusion reuses the loaded tile of x for the copy, which must then
    # not be overwritten by exp: x is read again by the add and, hoisted, by later iterations.
    return pypto.exp(pypto.broadcast_to(x, (2, 3, 5, 8))) + x


def loop_accumulate(X, out):
    # (fusion="off" once failed in codegen: "operand 1 must be a whole tile ... in TMOV")
    acc = pypto.zeros((64, 48))
    for j in range(0, X.shape[0], 64):
        acc = acc + X[j:j + 64, :]
    out[...] = acc


def flash_fp16_out(Q, K, V, out):
    # A tile updated in a run-time loop and once after it, then stored converted to f16 (once
    # failed in codegen: "operand 0 must be a whole tile ... in TCVT").
    m = pypto.full((Q.shape[0], 1), -1e30)
    l = pypto.zeros((Q.shape[0], 1))
    acc = pypto.zeros((Q.shape[0], V.shape[1]))
    for j in range(0, K.shape[0], 32):
        s = Q @ K[j:j + 32, :].T
        m_new = pypto.maximum(m, pypto.amax(s, -1, keepdim=True))
        p = pypto.exp(s - m_new)
        alpha = pypto.exp(m - m_new)
        l = l * alpha + pypto.sum(p, -1, keepdim=True)
        acc = acc * alpha + p @ V[j:j + 32, :]
        m = m_new
    acc = acc / l
    out[...] = acc.to(pypto.float16)


def attention_ref(Q, K, V, mask=None):
    Q, K, V = (torch.from_numpy(x).double() for x in (Q, K, V))
    s = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])
    if mask is not None:
        s = s + torch.from_numpy(mask).double()
    return (torch.softmax(s, dim=-1) @ V).numpy()


def _d(*xs):
    return [x.astype(np.float64) for x in xs]


def case_matmul():
    A, B = rand(100, 70), rand(70, 90)  # ragged against the 64 x 64 tiles
    C = poisoned(100, 90)
    return matrix_multiply, (A, B, C), lambda r: C, _d(A)[0] @ B


def case_attention():
    Q, K, V = rand(1, 2, 150, 16), rand(1, 2, 150, 16), rand(1, 2, 150, 16)  # two row blocks, ragged
    return optimized_attention, (Q, K, V), lambda r: r, attention_ref(Q, K, V)


def case_attention_mask():
    S = 150
    Q, K, V = rand(1, 2, S, 16), rand(1, 2, S, 16), rand(1, 2, S, 16)
    mask = np.triu(np.full((S, S), -1e9, dtype=np.float32), k=1)[None, None]
    return optimized_attention, (Q, K, V, mask), lambda r: r, attention_ref(Q, K, V, mask)


def case_fused_linear():
    x, w, b = rand(33, 40), rand(40, 30), rand(30)
    x64, w64 = _d(x, w)
    return fused_linear, (x, w, b), lambda r: r, np.maximum(x64 @ w64 + b, 0.0)


def case_layer_norm():
    x, w, b = rand(37, 24), rand(24), rand(24)
    out = poisoned(37, 24)
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (24,), torch.from_numpy(w).double(),
                                         torch.from_numpy(b).double(), 1e-5).numpy()
    return layer_norm, (x, w, b, out), lambda r: out, ref


def case_mlp():
    x, w1, b1 = rand(20, 16), rand(16, 48) * 0.3, rand(48)
    w2, b2 = rand(48, 12) * 0.3, rand(12)
    d = [torch.from_numpy(t).double() for t in (x, w1, b1, w2, b2)]
    ref = (torch.nn.functional.gelu(d[0] @ d[1] + d[2]) @ d[3] + d[4]).numpy()
    return mlp, (x, w1, b1, w2, b2), lambda r: r, ref


def case_column_sum():
    x = rand(37, 29)
    out = poisoned(1, 29)
    return column_sum, (x, out), lambda r: out, x.astype(np.float64).sum(0, keepdims=True)


def case_broadcast_exp():
    x = rand(5, 8)
    x64 = x.astype(np.float64)
    return broadcast_exp, (x,), lambda r: r, np.broadcast_to(np.exp(x64) + x64, (2, 3, 5, 8))


def case_loop_accumulate():
    X = rand(256, 48)  # (each block's valid extent min(64, 256 - j) is a run-time expression)
    out = poisoned(64, 48)
    ref = X.astype(np.float64).reshape(4, 64, 48).sum(0)
    return loop_accumulate, (X, out), lambda r: out, ref


def case_flash_fp16_out():
    Q, K, V = rand(16, 24), rand(80, 24), rand(80, 40)  # 80 = 2.5 key blocks
    out = poisoned(16, 40, dtype=np.float16)
    d = [torch.from_numpy(t).double() for t in (Q, K, V)]
    ref = (torch.softmax(d[0] @ d[1].T, dim=-1) @ d[2]).numpy()
    return flash_fp16_out, (Q, K, V, out), lambda r: out, ref, 2e-3  # f16 output: ~2^-11 per element


CASES = {
    "loop_accumulate": case_loop_accumulate,
    "flash_fp16_out": case_flash_fp16_out,
    "matmul": case_matmul,
    "attention": case_attention,
    "attention_mask": case_attention_mask,
    "fused_linear": case_fused_linear,
    "layer_norm": case_layer_norm,
    "mlp": case_mlp,
    "column_sum": case_column_sum,
    "broadcast_exp": case_broadcast_exp,
}

_KERNELS = {}


def kernel(fn, backend, opts):
    """One jit object per (function, backend, options), shared by every test of this file."""
    key = (fn.__name__, backend, options_id(opts))
    if key not in _KERNELS:
        _KERNELS[key] = pypto.jit(fn, backend=backend, fusion=opts["fusion"], promote=opts["promote"],
                                  double_buffer=opts["double_buffer"], parallel=opts["parallel"])
    return _KERNELS[key]


def run_case(name, backend, opts):
    c = CASES[name]()
    fn, args, result, ref = c[:4]
    tol = c[4] if len(c) > 4 else RTOL
    r = kernel(fn, backend, opts)(*args)
    out = as_numpy(result(r))
    err = rel_err(out, ref)
    assert err < tol, f"{name} with {options_id(opts)} on {backend}: relative error {err:.3g}"


# --- results --------------------------------------------------------------------------------------

@pytest.mark.parametrize("opts", OPTIONS, ids=options_id)
@pytest.mark.parametrize("name", list(CASES))
def test_results_do_not_depend_on_options_cpu(name, opts):
    run_case(name, "cpu", opts)


@pytest.mark.parametrize("opts", INTERP_OPTIONS, ids=options_id)
@pytest.mark.parametrize("name", ["matmul", "attention_mask", "fused_linear", "layer_norm", "column_sum",
                                  "broadcast_exp", "loop_accumulate", "flash_fp16_out"])
def test_results_do_not_depend_on_options_interp(name, opts):
    run_case(name, "interp", opts)


# --- the IR changes as the options say ------------------------------------------------------------

ALL_ON = dict(fusion=False, promote=True, double_buffer=True, parallel=True)


def lowered(name, **changes):
    fn, args = CASES[name]()[:2]
    return kernel(fn, "cpu", dict(ALL_ON, **changes)).lower(*args)


def block_loop_body(tile_text):
    """The text of the attention's row-block loop (from its `for` to the end of the program)."""
    m = re.search(r"^\s*for %i\b.*$", tile_text, re.M)
    assert m, tile_text
    return tile_text[m.start():]


def test_fusion_keeps_attention_temporaries_out_of_memory():
    fused = block_loop_body(lowered("attention", fusion=True).as_text("tile"))
    assert " gm" not in fused, fused
    unfused = block_loop_body(lowered("attention", fusion="off").as_text("tile"))
    assert " gm" in unfused, unfused
    # Tensor-level programs are the same whatever the options: only lowering differs.
    tensor_level = {lowered("attention", fusion=f).as_text("tensor") for f in ("off", True)}
    assert len(tensor_level) == 1


def test_fusion_modes_on_a_linear_layer():
    def nests(fusion):  # (without promotion, which would move the small temporaries to tiles)
        text = lowered("fused_linear", fusion=fusion, promote=False).as_text("tile")
        return len(re.findall(r"alloc %\S+: f32\[[^\]]*\] gm", text)), text.count("TSTORE")

    # off and False: matmul, add and relu each a nest (three stores); the add's temporary reuses the
    # matmul's buffer, so one temporary. Listed or full: one nest, no temporary. The default
    # (None) fuses add + relu but not the matmul: two nests, one temporary.
    assert nests("off") == (1, 3)
    assert nests(False) == (1, 3)
    assert nests(["matmul", "add", "relu"]) == (0, 1)
    assert nests(True) == (0, 1)
    assert nests(None) == (1, 2)


def test_promote_moves_the_seed_accumulator_to_a_tile():
    on = lowered("matmul", promote=True).as_text("tile")
    off = lowered("matmul", promote=False).as_text("tile")
    assert re.search(r"alloc %\S+: f32\[64, 64\] vec", on), on
    assert not re.search(r"alloc %\S+: f32\[64, 64\] gm", on), on
    assert re.search(r"alloc %\S+: f32\[64, 64\] gm", off), off


def test_double_buffer_off_means_no_prefetch():
    assert "TPREFETCH" in lowered("matmul", double_buffer=True).as_text("isa")
    assert "TPREFETCH" not in lowered("matmul", double_buffer=False).as_text("isa")
    assert "TPREFETCH" not in lowered("matmul", double_buffer=False).as_text("tile")


def test_parallel_off_means_no_parallel_loops():
    for name in ("matmul", "attention"):
        assert "parallel for" in lowered(name, parallel=True).as_text("isa"), name
        assert "parallel for" not in lowered(name, parallel=False).as_text("isa"), name


def half_round_trip(x):
    return pypto.cast(pypto.cast(x * 3.0, pypto.float16), pypto.float32) + 1.0


@pytest.mark.parametrize("fusion", ["off", False, True])
def test_fused_conversion_to_f16_still_rounds(fusion):
    # Tiles compute in f32: a conversion to f16 inside a fused group would not round, so it ends
    # the group and its store rounds, as the program says.
    x = np.random.default_rng(5).standard_normal((33, 70)).astype(np.float32)
    out = pypto.jit(half_round_trip, fusion=fusion)(x)
    ref = (x * np.float32(3.0)).astype(np.float16).astype(np.float64) + 1.0
    assert np.array_equal(np.asarray(out, dtype=np.float64), ref)
