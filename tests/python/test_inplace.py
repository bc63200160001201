"""pypto.inplace(x): the next elementwise op reading x writes its result into x's buffer (seen in
the tensor and tile IR); global temporaries are reused by lifetime, so a five-op chain with
fusion off allocates one full-size temporary, not four. Results are unchanged."""
import numpy as np

import pypto
from pypto_testutil import assert_close, poisoned, rand


def chain(x):
    return pypto.relu(pypto.tanh(pypto.exp(x) * 0.5 + x))


def donating(x, y):
    t = pypto.exp(x) * 0.5
    u = pypto.add(pypto.inplace(t), y)   # written into t
    return pypto.sigmoid(pypto.inplace(u))  # and again


def into_argument(x, y):
    pypto.exp(pypto.inplace(x))  # the caller's x receives exp(x)
    return x + y


def ref_chain(x):
    x = x.astype(np.float64)
    return np.maximum(np.tanh(np.exp(x) * 0.5 + x), 0)


def test_five_op_chain_with_fusion_off_needs_one_temporary():
    x = rand(70, 300)
    for backend in ("interp", "cpu"):
        k = pypto.jit(chain, fusion="off", backend=backend, promote=False)
        tile = k.lower(x).as_text("tile")
        assert tile.count(" gm\n") == 1, tile
        assert_close(k(x), ref_chain(x))


def test_inplace_writes_into_the_donated_buffer():
    x, y = rand(40, 90), rand(40, 90)
    k = pypto.jit(donating, fusion="off", backend="interp")
    tensor = k.lower(x, y).as_text("tensor")
    assert "TADD %t_1, %t_1, %y" in tensor, tensor
    assert "TSIGMOID %t_1, %t_1" in tensor, tensor
    assert tensor.count("alloc") == 1, tensor  # only exp's result: t_1 became the output
    t = np.exp(x.astype(np.float64)) * 0.5 + y
    assert_close(k(x, y), 1 / (1 + np.exp(-t)))


def test_inplace_into_an_argument_updates_the_callers_array():
    x, y = rand(8, 16), rand(8, 16)
    x0 = x.copy()
    out = pypto.jit(into_argument, backend="interp")(x, y)
    assert_close(x, np.exp(x0.astype(np.float64)))
    assert_close(out, np.exp(x0.astype(np.float64)) + y)


def mlp_chain(x, w0, w1, w2):
    for w in (w0, w1, w2):
        x = pypto.relu(pypto.matmul(x, w))
    return x


def test_a_matmul_never_writes_into_the_temporary_it_reads():
    """relu(x @ w) three times with fusion off: the relu writes in place into the first matmul's
    temporary, and the second matmul reads that buffer; reusing it again for the second matmul's
    output would overwrite columns still to be read (the reuse pass once checked the buffer's first
    tenant instead of the one it held then)."""
    x, *ws = rand(64, 512), *(rand(512, 512) * 0.06 for _ in range(3))
    ref = x.astype(np.float64)
    for w in ws:
        ref = np.maximum(ref @ w, 0)
    for backend in ("cpu", "interp"):
        assert_close(pypto.jit(mlp_chain, backend=backend, fusion="off")(x, *ws), ref)
