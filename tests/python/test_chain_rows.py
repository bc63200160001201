"""Elementwise chains in the CPU backend (src/backends/cpu/row_fusion_chain.cpp,
include/pto/cpu/chain_rows.hpp): TLOADs, elementwise f32 instructions and the TSTORE of
the last result are one call that reads the sources' rows in place and writes the result once.

The reference for bit-for-bit checks is the same chain run one instruction per kernel: each such
kernel is one fused single-instruction call (binary_rows / unary_rows / scalar_rows), which
test_row_fusion.py checks against the instruction as written. A chain must round each step as
its instruction does (no FMA contraction across steps) and read each operand from its own step."""
import numpy as np
import pytest

import pypto
from pypto_testutil import edge_rand, rand, requires_compiler

pytestmark = requires_compiler


def one(f):
    """f as its own kernel (one instruction: a single fused call)."""
    return pypto.jit(f, backend="cpu")


ADD, SUB, MUL, DIV = (one(lambda a, b: a + b), one(lambda a, b: a - b), one(lambda a, b: a * b),
                      one(lambda a, b: a / b))
MAX = one(lambda a, b: pypto.maximum(a, b))
EXP, GELU, RELU = one(lambda a: pypto.exp(a)), one(lambda a: pypto.gelu(a)), one(lambda a: pypto.relu(a))
HALF = one(lambda a: a / 2.0)
PLUS_ONE, ONE_MINUS = one(lambda a: a + 1.0), one(lambda a: 1.0 - a)

# (chain, the same chain one instruction per kernel); non-commutative steps with operands both
# ways round, scalars on either side, reuse of a source after an intermediate, three sources.
CHAINS = {
    "x*y+1": (lambda x, y, z: x * y + 1.0, lambda x, y, z: PLUS_ONE(MUL(x, y))),
    "(x-y)*x/2": (lambda x, y, z: (x - y) * x / 2.0, lambda x, y, z: HALF(MUL(SUB(x, y), x))),
    "y/(x-y)": (lambda x, y, z: y / (x - y), lambda x, y, z: DIV(y, SUB(x, y))),
    "1-exp(x)*y": (lambda x, y, z: 1.0 - pypto.exp(x) * y, lambda x, y, z: ONE_MINUS(MUL(EXP(x), y))),
    "max(x,y)*gelu(x)": (lambda x, y, z: pypto.maximum(x, y) * pypto.gelu(x),
                         lambda x, y, z: MUL(MAX(x, y), GELU(x))),
    "relu(x*y+z)-z": (lambda x, y, z: pypto.relu(x * y + z) - z,
                      lambda x, y, z: SUB(RELU(ADD(MUL(x, y), z)), z)),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_chain_is_one_call_and_equals_its_instructions(name):
    chain, steps = CHAINS[name]
    kernel = one(chain)
    for shape in [(37, 4100), (6, 45), (2703 * 3,)]:
        x, y, z = (edge_rand(37, 2703).reshape(-1)[: shape[0]] if len(shape) == 1 else edge_rand(*shape)
                   for _ in range(3))
        y, z = y[::-1].copy(), np.roll(z, 3, axis=0)  # specials in other places than x's
        assert "pto::fused::chain_rows<" in kernel.lower(x, y, z).as_text("source"), (name, shape)
        want = steps(x, y, z)
        np.testing.assert_array_equal(kernel(x, y, z), want, err_msg=f"{name} {shape}")
        # column-strided sources take the call's loads into the tiles (same chain, same results)
        if x.ndim == 2:
            xf, yf, zf = (np.asfortranarray(a) for a in (x, y, z))
            np.testing.assert_array_equal(kernel(xf, yf, zf), want, err_msg=f"{name} {shape} strided")


def test_chain_matches_the_interpreter():
    x, y, z = rand(33, 300), rand(33, 300), rand(33, 300)
    for name, (chain, _) in CHAINS.items():
        got = one(chain)(x, y, z)
        ref = pypto.jit(chain, backend="interp")(x, y, z)
        # (exp's vector form may differ from the interpreter's in the last bit: by norm, not
        # elementwise, since 1 - exp(x) * y cancels)
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-6, name


def test_chain_into_its_own_source_and_an_overlapping_output():
    """Written into a source (the same rows) or into rows shifted by one of a source (not the same
    rows: the call takes the tile path, since its in-place rows would read what it wrote)."""
    x, y = rand(40, 300), rand(40, 300)

    def into_x(x, y):
        x[:, :] = x * y + x

    def shifted(x, y):
        x[1:, :] = x[:-1, :] * y[1:, :] - 1.0

    ref = x * y + x
    k = one(into_x)
    assert "pto::fused::chain_rows<" in k.lower(x.copy(), y).as_text("source")
    xc = x.copy()
    k(xc, y)
    np.testing.assert_array_equal(xc, ref)
    ref = x.copy()
    ref[1:] = x[:-1] * y[1:] - np.float32(1.0)
    xc = x.copy()
    one(shifted)(xc, y)
    np.testing.assert_array_equal(xc, ref)


# Broadcast operands: a bias row (1 x C, loaded in the run), a per-row column (R x 1, loaded
# before the column loop: a tile the run only reads), both at once, and a column by a row.
BROADCASTS = {
    "relu(x*2+b)": (lambda x, b, c: pypto.relu(x * 2.0 + b), lambda x, b, c: RELU(ADD(MUL2(x), b))),
    "(x-c)*x": (lambda x, b, c: (x - c) * x, lambda x, b, c: MUL(SUB(x, c), x)),
    "(b-x)/c+b": (lambda x, b, c: (b - x) / c + b, lambda x, b, c: ADD(DIV(SUB(b, x), c), b)),
    "c*b+x": (lambda x, b, c: c * b + x, lambda x, b, c: ADD(MUL(c, b), x)),
    "x+b": (lambda x, b, c: x + b, lambda x, b, c: ADD(x, b)),  # one instruction: a bias add
}
MUL2 = one(lambda a: a * 2.0)


@pytest.mark.parametrize("name", list(BROADCASTS))
def test_chain_with_broadcast_operands(name):
    chain, steps = BROADCASTS[name]
    kernel = one(chain)
    for rows, cols in [(64, 700), (5, 4100), (6, 17)]:
        x, b, c = edge_rand(rows, cols), rand(cols), rand(rows, 1)
        assert "pto::fused::chain_rows<" in kernel.lower(x, b, c).as_text("source"), name
        want = steps(x, b, c)
        np.testing.assert_array_equal(kernel(x, b, c), want, err_msg=f"{name} {rows}x{cols}")
        np.testing.assert_array_equal(kernel(np.asfortranarray(x), b, c), want, err_msg=f"{name} strided")
        ref = pypto.jit(chain, backend="interp")(x, b, c)
        np.testing.assert_array_equal(kernel(x, b, c), ref, err_msg=f"{name} interpreter")
