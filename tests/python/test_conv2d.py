"""conv2d: stride-1 f32 convolutions lower to an implicit GEMM (the input copied once into
zero-padded flat rows, one matrix product per filter tap, the taps run as one GEMM on the CPU);
strided ones to a stride-1 convolution of the input's phases; dilated strided ones and other
dtypes to per-tap batched matmuls. Checked against torch in float64 on both
backends, over paddings, dilations, batches and kernel shapes, outputs poisoned with NaN."""
import numpy as np
import pytest

import pypto
from pypto_testutil import assert_close, jit, poisoned, rand

torch = pytest.importorskip("torch")


def ref_conv(x, w, b, stride, padding, dilation):
    t = torch.from_numpy
    y = torch.nn.functional.conv2d(t(x).double().reshape(-1, *x.shape[-3:]), t(w).double(), t(b).double(),
                                   stride, padding, dilation)
    return y.numpy().reshape(*x.shape[:-3], *y.shape[-3:])


CASES = [  # input, weight, stride, padding, dilation
    ((2, 3, 9, 11), (5, 3, 3, 3), 1, 1, 1),
    ((3, 10, 12), (4, 3, 5, 5), 1, 2, 1),  # CHW
    ((1, 4, 10, 9), (6, 4, 3, 2), 1, (1, 0), (2, 1)),
    ((2, 4, 8, 8), (3, 4, 3, 3), 1, 0, 1),
    ((1, 4, 9, 9), (3, 4, 3, 3), 1, (2, 3), 1),  # padding wider than the kernel's reach
    ((1, 4, 7, 8), (3, 4, 1, 1), 1, 0, 1),
    ((1, 4, 9, 9), (3, 4, 3, 3), 2, 1, 1),  # stride 2: a stride-1 convolution of the input's phases
    ((1, 3, 20, 22), (8, 3, 7, 7), 2, 3, 1),  # a 7 x 7 stride-2 first layer
    ((2, 4, 9, 10), (5, 4, 1, 1), 2, 0, 1),  # 1 x 1, stride 2: one phase
    ((2, 4, 11, 9), (3, 4, 3, 3), (2, 1), (1, 2), 1),  # strides and paddings differing per axis
    ((1, 3, 10, 11), (4, 3, 2, 2), 3, 0, 1),  # a stride past the kernel: phases without taps
    ((1, 2, 5, 5), (3, 2, 3, 3), 2, 2, 1),  # padding as wide as the image's half
    ((1, 1, 2, 2), (2, 1, 3, 3), 2, 1, 1),  # an image smaller than the stride's phases
    ((1, 16, 64, 64), (64, 16, 3, 3), 2, 1, 1),  # phases big enough for the whole-matrix GEMM
    ((1, 4, 13, 13), (3, 4, 3, 3), 2, 1, 2),  # stride and dilation: the per-tap lowering
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", CASES)
def test_conv2d_matches_torch(backend, xs, ws, stride, padding, dilation):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])

    def conv(x, w, b, out):
        out[...] = pypto.conv2d(x, w, b, stride, padding, dilation)

    want = ref_conv(x, w, b, stride, padding, dilation)
    out = poisoned(*want.shape)
    jit(conv, backend)(x, w, b, out)
    assert_close(out, want, 1e-5)


def test_conv2d_taps_are_one_gemm():
    """The 9 taps of a 3x3 convolution with 64 channels are whole-matrix products into one
    destination, which the CPU backend runs as one sum (K = 64 * 9) stored through the wrap;
    batched input: one image per iteration of a loop."""
    x, w = rand(2, 64, 24, 24), rand(64, 64, 3, 3)
    k = jit(lambda x, w: pypto.conv2d(x, w, None, 1, 1, 1), "cpu")
    isa = k.lower(x, w).as_text("isa")
    assert isa.count("MMATMUL") == 9
    assert k.lower(x, w).as_text("source").count("pto::mmatmul_sum_wrapped(") == 1
    assert_close(k(x, w), ref_conv(x, w, np.zeros(64, np.float32), 1, 1, 1), 1e-5)


WRAPPED = [  # input, weight, padding, dilation: products big enough for whole-matrix GEMMs
    ((1, 64, 24, 24), (64, 64, 3, 3), 1, 1),
    ((3, 64, 24, 25), (64, 64, 3, 3), 1, 1),  # three images, one per loop iteration
    ((64, 24, 30), (48, 64, 5, 5), 2, 1),  # CHW
    ((1, 64, 24, 23), (72, 64, 3, 2), (1, 0), (2, 1)),  # more rows than the in-place path takes
    ((1, 64, 32, 32), (40, 64, 1, 1), 0, 1),  # no gap: the wrap is the width
    ((1, 3, 128, 128), (64, 3, 3, 3), 1, 1),  # a first layer: K = 3 per tap, 27 in all
]


@pytest.mark.parametrize("xs,ws,padding,dilation", WRAPPED)
def test_conv2d_stores_through_the_wrap(xs, ws, padding, dilation):
    """An image's taps run as one sum whose tiles are stored straight into the output, skipping the
    padded rows' gap columns (pto::mmatmul_sum_wrapped): no wide result, no copy nest after it;
    into a poisoned output, with a bias, into an output viewed with a column stride, profiled."""
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])

    def conv(x, w, b, out):
        out[...] = pypto.conv2d(x, w, b, 1, padding, dilation)

    want = ref_conv(x, w, b, 1, padding, dilation)
    k = jit(conv, "cpu")
    out = poisoned(*want.shape)
    src = k.lower(x, w, b, out).as_text("source")
    assert src.count("pto::mmatmul_sum_wrapped(") == 1 and "pto::mmatmul_sum(" not in src
    k(x, w, b, out)
    assert_close(out, want, 1e-5)
    wide = poisoned(*want.shape[:-1], 2 * want.shape[-1])
    k(x, w, b, wide[..., ::2])
    assert_close(wide[..., ::2], want, 1e-5)
    assert np.isnan(wide[..., 1::2]).all()
    out = poisoned(*want.shape)
    k.profile(x, w, b, out)  # the profiled build fuses the same way
    assert_close(out, want, 1e-5)


DEPTHWISE = [  # input, stride, padding, dilation, bias
    ((2, 6, 9, 7), 1, 1, 1, True), ((2, 6, 9, 8), 2, 1, 1, False), ((6, 10, 9), 1, "same", 2, True),
    ((1, 5, 9, 9), 2, 0, 1, True), ((2, 4, 5, 5), 1, "valid", 1, False), ((2, 3, 8, 9), (2, 1), (0, 2), (1, 2), True),
]


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("xs, stride, padding, dilation, bias", DEPTHWISE)
def test_depthwise_conv2d_and_its_gradients_match_torch(backend, xs, stride, padding, dilation, bias):
    """torch.nn.functional.conv2d with groups == channels: multiply-adds of the padded input's
    shifted windows (one nest), not a convolution per channel; values and the gradients of input,
    weight and bias against torch in float64."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(*xs, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(xs[-3], 1, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(xs[-3], generator=g, dtype=torch.float64, requires_grad=True) if bias else None

    class Depthwise(torch.nn.Module):
        def forward(self, x, w, b):
            return torch.nn.functional.conv2d(x, w, b, stride, padding, dilation, groups=x.shape[-3])

    m = Depthwise()
    got, want = pypto.jit(m, backend=backend)(x, w, b), m(x, w, b)
    assert got.shape == want.shape
    assert float((got - want).norm()) < 1e-13 * float(want.norm())
    dy = torch.randn(want.shape, generator=g, dtype=torch.float64)
    params = [t for t in (x, w, b) if t is not None]
    for a, r in zip(torch.autograd.grad(got, params, dy), torch.autograd.grad(want, params, dy)):
        assert float((a - r).norm()) < 1e-13 * float(r.norm())


DEPTHWISE_PLANES = [  # input, kernel, stride, padding, dilation: TDWCONV per plane, in bands, or not
    ((2, 4, 14, 14), 7, 1, 3, 1),     # ConvNeXt's 7 x 7
    ((1, 3, 13, 10), 3, 2, 1, 1),     # a stride that skips the last padded column
    ((1, 2, 230, 40), 3, 1, 1, 1),    # taller than a tile: bands of output rows
    ((1, 2, 97, 41), 5, 2, 2, 2),     # bands of a prime row count: one output row each
    ((1, 2, 3, 2100), 3, 1, 1, 1),    # a row of windows wider than a tile: the tap-wise form
    ((2, 3, 9, 40), (1, 3), 1, (0, 1), 1),  # a 1-row filter over 16-column blocks and a tail
]


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("xs, k, stride, padding, dilation", DEPTHWISE_PLANES)
def test_depthwise_planes_bands_and_gradients(backend, xs, k, stride, padding, dilation):
    """The depthwise convolution's TDWCONV per plane (or band of rows) against torch in float64
    and float32, with the gradients of input, weight and bias."""
    kh, kw = (k, k) if isinstance(k, int) else k
    for dt, tol in ((torch.float64, 1e-13), (torch.float32, 2e-6)):
        g = torch.Generator().manual_seed(3)
        x = torch.randn(*xs, generator=g, dtype=dt, requires_grad=True)
        w = torch.randn(xs[1], 1, kh, kw, generator=g, dtype=dt, requires_grad=True)
        b = torch.randn(xs[1], generator=g, dtype=dt, requires_grad=True)

        def f(x, w, b):
            return torch.nn.functional.conv2d(x, w, b, stride, padding, dilation, groups=x.shape[1])

        got, want = pypto.jit(f, backend=backend)(x, w, b), f(x, w, b)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert float((got - want).norm()) < tol * float(want.norm())
        dy = torch.randn(want.shape, generator=g, dtype=dt)
        for a, r in zip(torch.autograd.grad(got, (x, w, b), dy), torch.autograd.grad(want, (x, w, b), dy)):
            assert float((a - r).norm()) < tol * 10 * float(r.norm())


def test_depthwise_over_a_dynamic_batch_and_in_bf16():
    """One kernel for every batch size (the plane loop runs to the batch's run-time extent), and
    bf16 planes accumulated in f32 and returned in bf16, as torch."""
    k = pypto.jit(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1, groups=8))
    w = torch.randn(8, 1, 3, 3)
    for n in (1, 3, 5, 2):
        x = torch.randn(n, 8, 12, 12)
        torch.testing.assert_close(k(x, w), torch.nn.functional.conv2d(x, w, padding=1, groups=8),
                                   rtol=1e-5, atol=1e-5)
    assert len(k.cache_info().dynamic) >= 1
    xb, wb = torch.randn(2, 8, 10, 10).bfloat16(), w.bfloat16()
    got = pypto.jit(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1, groups=8))(xb, wb)
    want = torch.nn.functional.conv2d(xb.float(), wb.float(), padding=1, groups=8)
    assert got.dtype == torch.bfloat16
    assert float((got.float() - want).norm()) < 8e-3 * float(want.norm())
