"""Output arguments: a kernel refuses to write read-only memory, stride-0 views or arguments
that overlap other arguments, and respects torch's autograd rules (leaf tensors, version
counters, lazily negated views). Every refusal is a PyptoError naming the argument, raised
before anything is written."""
import numpy as np
import pytest
import torch

import pypto
from pypto_testutil import assert_close, jit, rand


def add_into(out, x):
    out[...] = x + 1.0


def test_read_only_numpy_output_refused(backend):
    out = rand(4, 4)
    out.flags.writeable = False
    before = out.copy()
    with pytest.raises(pypto.PyptoError, match=r"argument 1 \('out'\).*read-only"):
        jit(add_into, backend)(out, rand(4, 4))
    np.testing.assert_array_equal(out, before)


def test_bytes_backed_output_refused(backend):
    data = bytes(64)
    out = np.frombuffer(data, np.float32).reshape(4, 4)
    with pytest.raises(pypto.PyptoError, match="read-only"):
        jit(add_into, backend)(out, rand(4, 4))
    assert data == bytes(64)


def test_stride0_outputs_refused(backend):
    base = rand(1, 4)
    out = np.lib.stride_tricks.as_strided(base, shape=(4, 4), strides=(0, 4), writeable=True)
    with pytest.raises(pypto.PyptoError, match="stride-0"):
        jit(add_into, backend)(out, rand(4, 4))
    t = torch.randn(1, 4)
    before = t.clone()
    with pytest.raises(pypto.PyptoError, match="stride-0"):
        jit(add_into, backend)(t.expand(4, 4), torch.randn(4, 4))
    assert torch.equal(t, before)


def shift_into(out, x):
    out[...] = x * 2.0


def test_overlapping_output_refused(backend):
    a = rand(9, 4)
    before = a.copy()
    with pytest.raises(pypto.PyptoError, match=r"shares memory with argument 2 \('x'\)"):
        jit(shift_into, backend)(a[1:], a[:-1])
    np.testing.assert_array_equal(a, before)
    with pytest.raises(pypto.PyptoError, match="shares memory"):
        jit(shift_into, backend)(a[:4], a[:4])


def test_disjoint_views_of_one_array_accepted(backend):
    a = rand(6, 8)
    x = a[:, 4:].copy()
    jit(shift_into, backend)(a[:, :4], a[:, 4:])   # interleaved byte ranges, disjoint elements
    assert_close(a[:, :4], x.astype(np.float64) * 2)


def test_reading_one_array_twice_is_fine(backend):
    @pypto.jit(backend=backend)
    def add2(x, y):
        return x + y
    a = rand(5, 3)
    assert_close(add2(a, a), a.astype(np.float64) * 2)


def test_torch_leaf_requiring_grad_refused(backend):
    w = torch.randn(4, 4, requires_grad=True)
    before = w.detach().clone()
    with pytest.raises(pypto.PyptoError, match="leaf tensor that requires grad"):
        jit(add_into, backend)(w, torch.randn(4, 4))
    assert torch.equal(w.detach(), before)      # refused before anything was written
    with torch.no_grad():                       # as torch allows w.add_(1) under no_grad
        jit(add_into, backend)(w, torch.ones(4, 4))
    assert torch.equal(w.detach(), torch.full((4, 4), 2.0))


def test_torch_version_counter_bumped(backend):
    a = torch.randn(4, 4, requires_grad=True)
    b = a * 1.0
    y = (b * b).sum()                           # saves b for backward
    v = b._version
    with torch.no_grad():
        jit(add_into, backend)(b, torch.randn(4, 4))
    assert b._version > v
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_torch_neg_view_read_as_negated(backend):
    @pypto.jit(backend=backend)
    def twice(x):
        return x * 2.0
    a = torch.randn(3, 5)
    n = torch._neg_view(a)
    assert_close(twice(n).numpy(), -2.0 * a.double().numpy())
    with pytest.raises(pypto.PyptoError, match="negated"):
        jit(add_into, backend)(n, torch.randn(3, 5))


def test_read_only_inputs_are_fine(backend):
    # Inputs the kernel only reads (and prefetches, in a tile loop) may be read-only.
    @pypto.jit(backend=backend)
    def rowsum(x):
        return pypto.sum(x, -1)
    x = rand(300, 70)
    x.flags.writeable = False
    assert_close(rowsum(x), x.astype(np.float64).sum(-1))
    a = rand(2, 3, 4)
    a.flags.writeable = False
    b = rand(2, 4, 5)
    assert_close(pypto.jit(lambda_free_matmul, backend=backend)(a, b), a.astype(np.float64) @ b)


def lambda_free_matmul(a, b):
    return pypto.matmul(a, b)
