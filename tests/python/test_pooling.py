"""torch.nn.functional's pooling and pixel rearrangements inside kernels (frontend/torch_pool.py)
against torch in float64, on both backends: max / average / power-average pooling with padding,
dilation, ceil_mode, count_include_pad and return_indices, max_unpool, adaptive average and maximum pooling,
pixel_shuffle / pixel_unshuffle / channel_shuffle, their gradients and their errors."""
import pytest
import torch
import torch.nn.functional as F

import pypto

BACKENDS = ["interp", "cpu"]


def _pair(t):
    return torch.stack([t[0], t[1].double()])  # (values, indices) as one tensor to compare


CASES = {
    "max_ceil": lambda i: F.max_pool2d(i, 3, 2, 1, ceil_mode=True),
    "max_ceil_dilated": lambda i: F.max_pool2d(i, 3, 2, 1, dilation=2, ceil_mode=True),
    "max_indices": lambda i: _pair(F.max_pool2d(i, 3, 2, 1, return_indices=True)),
    "max_indices_ceil": lambda i: _pair(F.max_pool2d(i, (2, 3), 2, 1, dilation=(1, 2), ceil_mode=True,
                                                     return_indices=True)),
    "max_module_indices": lambda i: torch.nn.MaxPool2d(2, return_indices=True)(i)[1].double(),
    "avg_ceil": lambda i: F.avg_pool2d(i, 3, 2, 1, ceil_mode=True),
    "avg_ceil_exclude_pad": lambda i: F.avg_pool2d(i, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg_exclude_pad": lambda i: F.avg_pool2d(i, 3, 1, 1, count_include_pad=False),
    "avg_divisor": lambda i: F.avg_pool2d(i, 2, divisor_override=3),
    "lp_2": lambda i: F.lp_pool2d(i.abs(), 2, 3, 2),
    "lp_3_ceil": lambda i: F.lp_pool2d(i.abs(), 3, 2, ceil_mode=True),
    "adaptive_max_uneven": lambda i: F.adaptive_max_pool2d(i, (4, 5)),
    "adaptive_max_indices": lambda i: _pair(F.adaptive_max_pool2d(i[..., :10, :12], (5, 4), return_indices=True)),
    "adaptive_avg_uneven": lambda i: F.adaptive_avg_pool2d(i, (4, 5)),
    "adaptive_avg_none": lambda i: F.adaptive_avg_pool2d(i, (None, 3)),
    "pixel_unshuffle": lambda i: F.pixel_unshuffle(i[..., :10, :12], 2),
    "pixel_shuffle": lambda i: F.pixel_shuffle(i[:, :4], 2),
    "channel_shuffle": lambda i: F.channel_shuffle(i, 3),
    "channel_shuffle_module": lambda i: torch.nn.ChannelShuffle(2)(i),
    "max_1d_ceil": lambda i: F.max_pool1d(i.flatten(2), 3, 2, 1, ceil_mode=True),
    "max_1d_indices": lambda i: _pair(F.max_pool1d(i.flatten(2), 4, 3, 2, return_indices=True)),
    "avg_1d_ceil_exclude_pad": lambda i: F.avg_pool1d(i.flatten(2), 4, 3, 1, ceil_mode=True, count_include_pad=False),
    "lp_1d": lambda i: F.lp_pool1d(i.flatten(2), 2, 3),
    "adaptive_max_1d": lambda i: F.adaptive_max_pool1d(i.flatten(2), 7),
    "chw_input": lambda i: F.max_pool2d(i[0], 3, 2, ceil_mode=True),
    "max_unpool": lambda i: F.max_unpool2d(*F.max_pool2d(i[..., :10, :12], 2, return_indices=True), 2),
    "max_unpool_sized": lambda i: F.max_unpool2d(*F.max_pool2d(i, 3, 2, 1, return_indices=True), 3, 2, 1,
                                                 output_size=i.shape),
    "max_unpool_module": lambda i: torch.nn.MaxUnpool2d(2)(*torch.nn.MaxPool2d(2, return_indices=True)(i[..., :10, :12].cos())),
    "max_unpool_1d": lambda i: F.max_unpool1d(*F.max_pool1d(i.flatten(2), 4, return_indices=True), 4),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name, backend):
    f = CASES[name]
    img = torch.randn(2, 6, 11, 13, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = f(img)
    got = pypto.jit(f, backend=backend)(img)
    assert got.shape == want.shape
    assert float((got - want).norm() / want.norm()) < 1e-13


def test_into_a_poisoned_output_float32():
    @pypto.jit
    def k(x, out):
        out[...] = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    x = torch.randn(2, 3, 9, 10)
    out = torch.full((2, 3, 5, 6), float("nan"))
    k(x, out)
    want = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    assert float((out - want).norm() / want.norm()) < 1e-6


GRADS = {
    "max_ceil": lambda i: F.max_pool2d(i, 3, 2, 1, ceil_mode=True),
    "avg_ceil_exclude_pad": lambda i: F.avg_pool2d(i, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "lp_2": lambda i: F.lp_pool2d(i, 2, 3, 2),
    "adaptive_max_uneven": lambda i: F.adaptive_max_pool2d(i, (4, 5)),
    "pixel_unshuffle": lambda i: F.pixel_unshuffle(i[..., :10, :12], 2) * 1.5,
    "channel_shuffle": lambda i: F.channel_shuffle(i, 3).sin(),
    "max_unpool": lambda i: F.max_unpool2d(*F.max_pool2d(i, 3, 2, 1, return_indices=True), 3, 2, 1,
                                           output_size=i.shape) * 2,
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_match_torch(name):
    f = GRADS[name]
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 6, 11, 13, generator=g, dtype=torch.float64).requires_grad_()
    out = pypto.jit(f)(x)
    dy = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got, = torch.autograd.grad(out, x, dy)
    want, = torch.autograd.grad(f(x), x, dy)
    assert float((got - want).norm() / want.norm()) < 1e-13


def test_errors_name_the_line():
    x = torch.randn(1, 4, 9, 9, dtype=torch.float64)
    with pytest.raises(pypto.PyptoError, match=r"test_pooling.py:\d+.*padding 2 is more than half"):
        pypto.jit(lambda x: F.max_pool2d(x, 3, 1, 2))(x)
    with pytest.raises(pypto.PyptoError, match=r"test_pooling.py:\d+.*return_indices needs the output size"):
        pypto.jit(lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True))(x)
    with pytest.raises(pypto.PyptoError, match=r"test_pooling.py:\d+.*not divisible into 3 groups"):
        pypto.jit(lambda x: F.channel_shuffle(x, 3))(x)
    with pytest.raises(pypto.PyptoError, match=r"test_pooling.py:\d+.*pixel_unshuffle"):
        pypto.jit(lambda x: F.pixel_unshuffle(x, 2))(x)
