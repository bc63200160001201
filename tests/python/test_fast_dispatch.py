"""The C++ call path (bind_dispatch.cpp): once the Python path has run a variant, calls with
the same signature run in one C++ call. It must be taken (cache_info().fast_calls counts its
calls), give the results of the Python path, and leave every call it cannot or must not take to
the Python path, so errors are exactly the Python path's: each error case below is first made
to match a registered variant, then raised with the fast path on and off and compared."""
import sys

import numpy as np
import pytest
import torch

import pypto
from pypto import _C
from pypto_testutil import assert_close, jit, rand


def mul_add(a, b, c):
    return a * b + c


def add_into(out, x):
    out[...] = x + 1.0


def shift_into(out, x):
    out[...] = x * 2.0


def read_at(x, s):
    return x[s] + 0.0


def lookup(ids, table):
    return pypto.embedding(ids, table)


def two_outputs(x, y, alpha, n):
    return x * alpha + n, x - y, y


@pytest.fixture(params=["glue", "attributes"], autouse=True)
def torch_reader(request):
    """Torch tensors are read (and outputs made) through pypto._torch_glue where it was built,
    else through their Python attributes and torch.empty: both are tested."""
    jit_module = sys.modules["pypto.jit"]
    glue = jit_module._torch_glue(torch)
    if request.param == "glue" and glue is None:
        pytest.skip("pypto._torch_glue was not built (torch not installed at build time)")
    bind = (torch.Tensor, torch.nn.Parameter, torch.empty, torch.is_grad_enabled)
    assert _C.bind_torch(*bind, glue if request.param == "glue" else None) == (request.param == "glue")
    yield request.param
    _C.bind_torch(*bind, glue)


def test_glue_built_with_torch_in_use():
    """The build makes pypto._torch_glue wherever torch is installed (CMakeLists.txt)."""
    assert sys.modules["pypto.jit"]._torch_glue(torch) is not None


def error_both_ways(kernel, *args):
    """The PyptoError message of kernel(*args) with the fast path on and off (equal), checking
    that the failing call was no fast call."""
    messages = []
    for on in (True, False):
        before = kernel.cache_info().fast_calls
        _C.set_fast_dispatch(on)
        try:
            with pytest.raises(pypto.PyptoError) as e:
                kernel(*args)
        finally:
            _C.set_fast_dispatch(True)
        assert kernel.cache_info().fast_calls == before
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    return messages[0]


def slow_result(kernel, *args):
    _C.set_fast_dispatch(False)
    try:
        return kernel(*args)
    finally:
        _C.set_fast_dispatch(True)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_fast_path_taken_and_results_identical(backend, lib):
    k = jit(mul_add, backend)
    a, b, c = (rand(8, 8) for _ in range(3))
    if lib == "torch":
        a, b, c = (torch.from_numpy(x) for x in (a, b, c))
    first = k(a, b, c)                     # the Python path: trace, compile, register
    assert k.cache_info().fast_calls == 0
    fast = k(a, b, c)
    assert k.cache_info().fast_calls == 1
    slow = slow_result(k, a, b, c)
    assert k.cache_info().fast_calls == 1
    assert type(fast) is type(slow) is type(first)
    if lib == "torch":
        assert fast.dtype == slow.dtype == torch.float32 and fast.device == slow.device
        assert not fast.requires_grad and fast.is_contiguous() and fast.data_ptr() != first.data_ptr()
        assert torch.equal(fast, slow)
        fast = fast.numpy()
    else:
        assert fast.dtype == slow.dtype and fast.flags.c_contiguous and fast.flags.writeable
        np.testing.assert_array_equal(fast, slow)
    assert_close(fast, np.asarray(a, np.float64) * np.asarray(b) + np.asarray(c))
    p = pypto.get_last_profile()
    assert p.kernel == "mul_add" and p.total_ms >= p.run_ms > 0


def test_strided_arguments_and_scalars_and_several_outputs(backend):
    k = jit(two_outputs, backend)
    x, y = torch.randn(6, 6), torch.randn(6, 6)
    k(x, y, 0.5, 3)
    xt, yt = x.t(), y[::1, :]               # a transposed view: same signature, other strides
    out, diff, same = k(xt, yt, 1.5, -2)
    assert k.cache_info().fast_calls == 1
    assert same is yt
    assert_close(out, xt.double() * 1.5 - 2)
    assert_close(diff, xt.double() - yt.double())
    k(x, y, 2, 3)                            # an int for the float: another signature
    assert k.cache_info().fast_calls == 1


def test_autograd_calls_take_the_python_path(backend):
    k = jit(mul_add, backend)
    a, b, c = (torch.randn(4, 4) for _ in range(3))
    k(a, b, c)
    w = a.clone().requires_grad_()
    k(w, b, c).sum().backward()
    assert k.cache_info().fast_calls == 0
    assert torch.allclose(w.grad, b)
    with torch.no_grad():
        k(w, b, c)                           # no grad recorded: the fast path may take it
    assert k.cache_info().fast_calls == 1


def test_read_only_output_error_unchanged(backend):
    k = jit(add_into, backend)
    k(rand(4, 4), rand(4, 4))
    out = rand(4, 4)
    out.flags.writeable = False
    before = out.copy()
    msg = error_both_ways(k, out, rand(4, 4))
    assert "argument 1 ('out')" in msg and "read-only" in msg
    np.testing.assert_array_equal(out, before)


def test_overlapping_and_stride0_errors_unchanged(backend):
    k = jit(shift_into, backend)
    a = rand(9, 4)
    k(a[:8].copy(), a[1:].copy())
    before = a.copy()
    msg = error_both_ways(k, a[:8], a[1:])
    assert "shares memory with argument 2 ('x')" in msg
    np.testing.assert_array_equal(a, before)
    t = torch.randn(1, 4)
    k(torch.randn(4, 4), torch.randn(4, 4))
    assert "stride-0" in error_both_ways(k, t.expand(4, 4), torch.randn(4, 4))


def test_shape_dtype_device_errors_unchanged(backend):
    k = jit(mul_add, backend)
    a, b, c = (torch.randn(4, 4) for _ in range(3))
    k(a, b, c)
    msg = error_both_ways(k, a, torch.randn(4, 5), c)   # another signature: traced, refused
    assert "a * b + c" in msg
    assert "device" in error_both_ways(k, a, b.to("meta"), c)
    assert "dtype" in error_both_ways(k, a, b.to(torch.complex64), c)
    assert "layout torch.sparse_coo" in error_both_ways(k, a, b.to_sparse(), c)


def test_index_errors_unchanged(backend):
    k = jit(read_at, backend)
    x = rand(8, 4)
    k(x, 2)
    assert "out of range" in error_both_ways(k, x, 8)   # checked before the run
    table = rand(10, 4)
    g = jit(lookup, backend)
    g(np.array([9, 0]), table)
    msg = error_both_ways(g, np.array([10, 0]), table)  # raised by the kernel while it runs
    assert "index 10 is out of range" in msg and "return pypto.embedding(ids, table)" in msg


def test_dynamic_variants_matched_by_extent_classes():
    @pypto.jit(dynamic=True)
    def add_rows(x, y):
        return x + y

    for n in (5, 7, 9):
        x, y = rand(n, 3), rand(n, 3)
        assert_close(add_rows(x, y), x.astype(np.float64) + y)
    assert add_rows.cache_info().size == 1
    calls = add_rows.cache_info().fast_calls
    assert calls >= 1
    x = rand(11, 3)
    assert_close(add_rows(x, x), x.astype(np.float64) * 2)
    assert add_rows.cache_info().fast_calls == calls + 1
    add_rows(rand(3, 3), rand(3, 3))         # 3 == 3: another pattern of extents, another variant
    assert add_rows.cache_info().size == 2


def test_fast_path_off_with_profiling():
    k = pypto.jit(mul_add)
    a, b, c = (rand(4, 4) for _ in range(3))
    k(a, b, c)
    with pypto.profiling():
        k(a, b, c)
        assert pypto.get_last_profile().profiled
    assert k.cache_info().fast_calls == 0
    k(a, b, c)
    assert k.cache_info().fast_calls == 1


def test_torch_outputs_fresh_and_as_torch_empty_makes_them():
    """The glue allocates a fast call's torch output with aten::empty's CPU kernel, past the
    dispatcher: each call's output is its own memory, an inference tensor under inference_mode
    (as torch.empty makes one there), and torch.profiler still sees the allocation."""
    k = jit(mul_add, "cpu")
    a, b, c = (torch.from_numpy(rand(8, 8)) for _ in range(3))
    first = k(a, b, c)
    outs = [k(a, b, c) for _ in range(4)]
    assert k.cache_info().fast_calls == 4
    assert len({o.data_ptr() for o in [first] + outs}) == 5
    want = a.double() * b + c
    for o in outs:
        assert_close(o, want)
    outs[0].fill_(float("nan"))                # a later call does not write into an earlier output
    assert_close(k(a, b, c), want)
    assert torch.isnan(outs[0]).all()
    with torch.inference_mode():
        inf = k(a, b, c)
        assert inf.is_inference() == torch.empty(1).is_inference() == True
    assert not k(a, b, c).is_inference()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        k(a, b, c)
    assert any(e.name == "aten::empty" for e in prof.events())


def test_written_argument_layouts():
    """A written argument's layout check: row-major (size-1 dims with any stride) and transposed
    views are written in place; strides that reach one element twice are refused."""
    k = jit(add_into, "cpu")
    x = rand(4, 4)
    k(rand(4, 4), x)
    base = np.full((4, 7, 4), np.nan, np.float32)
    out = base[:, 3:4, :].reshape(4, 4)            # a view: stride 7*4 along dim 0
    k(out, x)
    assert_close(out, x.astype(np.float64) + 1)
    tout = torch.full((4, 4), float("nan")).t()    # column-major
    k(tout, torch.from_numpy(x))
    assert_close(tout, torch.from_numpy(x).double() + 1)
    assert k.cache_info().fast_calls >= 1
    overlapping = torch.zeros(16).as_strided((4, 4), (2, 1))
    assert "several indices" in error_both_ways(k, overlapping, torch.from_numpy(x))


def test_call_slot_leaves_hooks_keywords_and_misses_to_python():
    """kernel(...) runs the C++ path from JitFunction's call slot (no Python frame); a module's
    hooks registered after the path is warm still run, keyword calls and signatures it has no
    variant for take the Python __call__, which stays the class's (torch.compile traces it)."""
    assert type(pypto.JitFunction.__dict__["__call__"]).__name__ == "function"
    lin = torch.nn.Linear(8, 4)
    k = pypto.jit(lin)
    x = torch.randn(3, 8)
    with torch.no_grad():
        k(x), k(x)
        seen = []
        h = lin.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
        out = k(x)
        h.remove()
    assert seen == [(3, 8)]
    torch.testing.assert_close(out, lin(x).detach())
    f = pypto.jit(mul_add)
    a, b, c = (torch.from_numpy(rand(8, 8)) for _ in range(3))
    f(a, b, c)
    n = f.cache_info().fast_calls
    torch.testing.assert_close(f(a, b, c=c), a * b + c)          # keywords: the Python path
    torch.testing.assert_close(f(a[:4], b[:4], c[:4]), a[:4] * b[:4] + c[:4])  # a miss, then compiled
    assert f.cache_info().fast_calls == n
    torch.testing.assert_close(f(a, b, c), a * b + c)
    assert f.cache_info().fast_calls == n + 1
