"""The torch functions of frontend/torch_more.py inside kernels, each against torch in float64 on
random inputs: in-place methods, statistics, shapes and indexing, products, resampling (linear
and nearest at any size), losses; and gradients through a few of them."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pypto


def _inputs():
    g = torch.Generator().manual_seed(11)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return dict(x=r(4, 6), y=r(4, 6), v=r(6), sq=r(5, 5), b3=r(2, 4, 6), img=r(1, 3, 8, 8),
                w3=r(3, 6, 6), idx=torch.randint(0, 6, (4, 6), generator=g))


def _kernel(f):
    """A kernel taking _inputs()'s tensors positionally and giving them to f as a dict."""
    def kernel(x, y, v, sq, b3, img, w3, idx):
        return f(dict(x=x, y=y, v=v, sq=sq, b3=b3, img=img, w3=w3, idx=idx))
    return pypto.jit(kernel, backend="interp")


CASES = {
    "add_": lambda t: t["x"].clone().add_(t["y"], alpha=2), "mul_": lambda t: t["x"].clone().mul_(2),
    "clamp_": lambda t: t["x"].clone().clamp_(-0.5, 0.5), "zero_": lambda t: t["x"].clone().zero_() + t["y"],
    "fill_": lambda t: t["x"].clone().fill_(3.0), "copy_": lambda t: torch.empty_like(t["x"]).copy_(t["y"]),
    "relu_inplace": lambda t: F.relu(t["x"].clone(), inplace=True), "sigmoid_": lambda t: t["x"].clone().sigmoid_(),
    "addcmul_": lambda t: t["x"].clone().addcmul_(t["x"], t["y"], value=0.5),
    "std_mean": lambda t: torch.stack(torch.std_mean(t["x"], -1)),
    "var_mean": lambda t: torch.stack(torch.var_mean(t["x"], -1, correction=0)),
    "aminmax": lambda t: torch.stack(tuple(torch.aminmax(t["x"], dim=-1))),
    "median": lambda t: t["x"].median(-1).values, "median_all": lambda t: t["x"].median(),
    "median_idx": lambda t: t["x"].median(-1).indices.double(),
    "kthvalue": lambda t: torch.kthvalue(t["x"], 2, -1).values, "quantile": lambda t: torch.quantile(t["x"], 0.3, dim=-1),
    "count_nonzero": lambda t: torch.count_nonzero(t["x"] > 0, dim=-1).double(),
    "tile": lambda t: torch.tile(t["x"], (2, 1)), "tile_varargs": lambda t: t["x"].tile(2, 1, 3),
    "tile_int": lambda t: t["x"].tile(2), "angle": lambda t: torch.angle(t["x"]),
    "angle_int": lambda t: torch.angle(t["idx"] - 3), "ldexp": lambda t: torch.ldexp(t["x"], t["idx"] - 2),
    "block_diag": lambda t: torch.block_diag(t["x"][:2, :3], t["v"][:2], t["v"][3], t["sq"]),
    "block_diag_int": lambda t: torch.block_diag(t["idx"][:2, :2], t["idx"][2:, :3]).double(), "take_along_dim": lambda t: torch.take_along_dim(t["x"], t["idx"], -1),
    "meshgrid_ij": lambda t: torch.stack(torch.meshgrid(t["v"][:3], t["v"][:4], indexing="ij")),
    "meshgrid_xy": lambda t: torch.stack(torch.meshgrid(t["v"][:3], t["v"][:4], indexing="xy")),
    "diff": lambda t: torch.diff(t["x"], dim=-1), "diff2": lambda t: torch.diff(t["x"], n=2, dim=0, append=t["y"]),
    "tensordot": lambda t: torch.tensordot(t["b3"], t["x"], dims=([1, 2], [0, 1])),
    "tensordot_int": lambda t: torch.tensordot(t["b3"], t["x"].T, dims=1),
    "diagonal": lambda t: torch.diagonal(t["sq"], 1), "diagonal_neg": lambda t: torch.diagonal(t["x"], -1),
    "diag_vec": lambda t: torch.diag(t["v"], -2), "trace": lambda t: torch.trace(t["sq"]) + t["x"],
    "kron": lambda t: torch.kron(t["sq"][:2, :3], t["x"][:3, :2]),
    "cross": lambda t: torch.linalg.cross(t["x"][:, :3], t["y"][:, :3]), "cdist": lambda t: torch.cdist(t["x"], t["y"]),
    "cdist_p1": lambda t: torch.cdist(t["x"], t["y"], p=1), "index_fill": lambda t: t["x"].index_fill(1, t["idx"][0, :2], -1.0),
    "rot90": lambda t: torch.rot90(t["x"]), "rot90_3": lambda t: torch.rot90(t["b3"], 3, (1, 2)),
    "matrix_norm": lambda t: torch.linalg.matrix_norm(t["b3"]), "matrix_norm_inf": lambda t: torch.linalg.matrix_norm(t["b3"], ord=float("inf")),
    "masked_scatter": lambda t: t["x"].masked_scatter(t["x"] > 0, t["y"]),
    "addmv": lambda t: torch.addmv(t["x"][:, 0], t["x"], t["v"], beta=0.5), "addr": lambda t: torch.addr(t["sq"], t["v"][:5], t["v"][:5]),
    "addbmm": lambda t: torch.addbmm(t["sq"][:4, :4], t["b3"], t["b3"].transpose(1, 2)),
    "bilinear": lambda t: F.bilinear(t["x"], t["y"], t["w3"]),
    "expit": lambda t: torch.special.expit(t["x"]), "xlog1py": lambda t: torch.special.xlog1py(t["x"], t["y"].abs()),
    "rrelu_eval": lambda t: F.rrelu(t["x"], training=False),
    "interp_bilinear": lambda t: F.interpolate(t["img"], scale_factor=2, mode="bilinear"),
    "interp_bilinear_ac": lambda t: F.interpolate(t["img"], size=(5, 11), mode="bilinear", align_corners=True),
    "interp_linear": lambda t: F.interpolate(t["b3"], scale_factor=1.5, mode="linear"),
    "interp_nearest": lambda t: F.interpolate(t["img"], size=(5, 12), mode="nearest"),
    "interp_nearest_exact": lambda t: F.interpolate(t["img"], size=(5, 12), mode="nearest-exact"),
    "margin_ranking": lambda t: F.margin_ranking_loss(t["x"][:, 0], t["y"][:, 0], torch.sign(t["v"][:4])),
    "soft_margin": lambda t: F.soft_margin_loss(t["x"], torch.sign(t["y"])),
    "hinge_embedding": lambda t: F.hinge_embedding_loss(t["x"], torch.sign(t["y"])),
    "cosine_embedding": lambda t: F.cosine_embedding_loss(t["x"], t["y"], torch.sign(t["v"][:4])),
    "triplet": lambda t: F.triplet_margin_loss(t["x"], t["y"], t["y"].flip(0)),
    "poisson_nll": lambda t: F.poisson_nll_loss(t["x"], t["y"].abs()),
    "poisson_nll_full": lambda t: F.poisson_nll_loss(t["x"].abs(), t["y"].abs() * 3, log_input=False, full=True),
    "gaussian_nll": lambda t: F.gaussian_nll_loss(t["x"], t["y"], t["v"].abs().expand(4, 6)),
    "multilabel_soft_margin": lambda t: F.multilabel_soft_margin_loss(t["x"], (t["y"] > 0).double()),
    "pad_reflect": lambda t: F.pad(t["img"], (2, 3, 1, 0), mode="reflect"),
    "pad_replicate": lambda t: F.pad(t["b3"], (4, 1), mode="replicate"),
    "pad_circular": lambda t: F.pad(t["img"], (1, 8, 3, 2), mode="circular"),
    "unfold": lambda t: F.unfold(t["img"], 3, padding=1),
    "unfold_strided": lambda t: F.unfold(t["img"], (2, 3), dilation=(2, 1), padding=(1, 0), stride=2),
    "local_response_norm": lambda t: F.local_response_norm(t["img"], 2, alpha=0.1, k=1.5),
    "searchsorted": lambda t: torch.searchsorted(torch.sort(t["v"]).values, t["x"]).double(),
    "searchsorted_rows": lambda t: torch.searchsorted(torch.sort(t["x"]).values, t["y"][:, :3], side="right").double(),
    "bucketize": lambda t: torch.bucketize(t["x"], torch.sort(t["v"]).values, right=True).double(),
    "adaptive_avg_pool2d_uneven": lambda t: F.adaptive_avg_pool2d(t["img"], (3, 5)),
    "adaptive_avg_pool1d": lambda t: F.adaptive_avg_pool1d(t["b3"], 4),
    # Tensor.unfold: sliding windows, not F.unfold's im2col of the same name
    "tensor_unfold": lambda t: t["b3"].unfold(2, 3, 2), "tensor_unfold_mid": lambda t: t["b3"].unfold(-2, 2, 1),
    "tensor_unfold_whole": lambda t: t["v"].unfold(0, 6, 1), "tensor_unfold_gap": lambda t: t["x"].unfold(1, 1, 4),
    "tensor_unfold_0d": lambda t: t["x"][1, 2].unfold(0, 1, 1),
    # the methods' (values, indices) as torch's named pairs
    "sort_values": lambda t: t["x"].sort(-1).values + t["x"].sort(0, descending=True).indices,
    "topk_values": lambda t: t["x"].topk(2, -1).values * t["x"].topk(2, -1, largest=False).indices,
    "cummax_values": lambda t: t["x"].cummax(-1).values + t["x"].cummin(0).indices,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_more_matches_torch(name):
    f = CASES[name]
    t = _inputs()
    ref = f(t)
    got = _kernel(f)(*t.values())
    assert tuple(got.shape) == tuple(ref.shape)
    assert float((got - ref).norm()) <= 1e-10 * max(1.0, float(ref.norm()))


@pytest.mark.parametrize("name", ["interp_bilinear", "tensordot", "std_mean", "cdist", "masked_scatter", "mul_",
                                  "pad_reflect", "pad_replicate", "pad_circular", "unfold_strided",
                                  "local_response_norm", "adaptive_avg_pool2d_uneven", "tensor_unfold_mid"])
def test_torch_more_gradients(name):
    f = CASES[name]
    t = _inputs()
    for k in ("x", "y", "b3", "img"):
        t[k].requires_grad_()
    out = _kernel(f)(*t.values())
    cot = torch.randn(out.shape, dtype=torch.float64)
    leaves = [t[k] for k in ("x", "y", "b3", "img")]
    got = torch.autograd.grad(out, leaves, cot, allow_unused=True)
    ref = torch.autograd.grad(f(t), leaves, cot, allow_unused=True)
    for a, b in zip(got, ref):
        if b is None:
            assert a is None or float(a.norm()) == 0
        else:
            assert float((a - b).norm() / b.norm()) < 1e-9


def test_bilinear_upsampling_native():
    img = torch.randn(2, 3, 17, 9)
    k = pypto.jit(lambda x: F.interpolate(x, size=(40, 20), mode="bilinear"))
    ref = F.interpolate(img, size=(40, 20), mode="bilinear")
    assert float((k(img) - ref).norm() / ref.norm()) < 1e-6


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_native(mode):
    """A 3-d padding (5-d input) natively, every element equal to torch's (pads copy values)."""
    x = torch.randn(2, 3, 4, 6, 5)
    p = (1, 2, 0, 3, 2, 1)
    assert torch.equal(pypto.jit(lambda a: F.pad(a, p, mode=mode))(x), F.pad(x, p, mode=mode))


@pytest.mark.parametrize("p, mode, msg", [((6, 0), "reflect", "smaller than the dimension's size 6"),
                                          ((0, 7), "circular", "must not exceed"),
                                          ((-1, 0), "replicate", "negative padding"),
                                          ((1, 1), "symmetric", "mode must be")])
def test_pad_mode_errors_name_the_line(p, mode, msg):
    with pytest.raises(pypto.PyptoError, match=msg) as e:
        pypto.jit(lambda a: F.pad(a, p, mode=mode), backend="interp")(torch.randn(4, 6))
    assert "test_torch_more.py" in str(e.value)


def test_searchsorted_ties_and_dtypes():
    """Ties go left or right as torch's; int64 indices, int32 with out_int32; natively."""
    seq = torch.tensor([0.0, 1.0, 1.0, 2.0, 5.0])
    vals = torch.tensor([[1.0, -3.0, 2.0], [5.0, 9.0, 1.5]])
    for f in (lambda s, v: torch.searchsorted(s, v), lambda s, v: torch.searchsorted(s, v, right=True),
              lambda s, v: torch.searchsorted(s, v, side="right"),
              lambda s, v: torch.searchsorted(s, v, out_int32=True)):
        got, want = pypto.jit(f)(seq, vals), f(seq, vals)
        assert got.dtype == want.dtype and torch.equal(got, want)
    got = pypto.jit(lambda v, s: torch.bucketize(v, s, out_int32=True))(vals, seq)
    assert got.dtype == torch.int32 and torch.equal(got, torch.bucketize(vals, seq, out_int32=True))


def _relu_inplace(x):
    h = x * 2
    F.relu(h, inplace=True)  # the result is only in h
    return h


def _module_inplace(x):
    h = x * 2
    torch.nn.ReLU(inplace=True)(h)
    F.leaky_relu(h, 0.1, inplace=True)
    F.dropout(h, 0.5, training=False, inplace=True)
    return torch.sigmoid_(h).clamp_(max=0.7)


@pytest.mark.parametrize("f", [_relu_inplace, _module_inplace])
def test_inplace_keyword_writes_back(f):
    # (in-place chains of non-linear ops are not differentiated: a clear refusal)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=f is _relu_inplace)
    out = pypto.jit(f, backend="interp")(x)
    assert float((out - f(x)).norm()) == 0
    if f is _module_inplace:
        return
    cot = torch.randn(4, 5, dtype=torch.float64)
    got = torch.autograd.grad(out, x, cot)[0]
    ref = torch.autograd.grad(f(x), x, cot)[0]
    assert float((got - ref).norm() / ref.norm()) < 1e-12


def test_inplace_shape_changes_are_refused():
    def f(x):
        y = x * 1
        y.squeeze_()
        return y
    with pytest.raises(pypto.PyptoError, match="squeeze_ is not supported"):
        pypto.jit(f, backend="interp")(torch.randn(4, 1, 5))


def test_tensor_unfold_errors_name_the_line():
    x = torch.randn(3, 10)
    with pytest.raises(pypto.PyptoError, match=r"test_torch_more.py:\d+.*Tensor.unfold: size 11 and step 1"):
        pypto.jit(lambda x: x.unfold(1, 11, 1))(x)
    with pytest.raises(pypto.PyptoError, match=r"Tensor.unfold: size 2 and step 0"):
        pypto.jit(lambda x: x.unfold(0, 2, 0))(x)


# Empty slices, as transformers' rotary embeddings make them when the whole head rotates
# (Phi3, GPT-NeoX / StableLM at factor 1): q[..., d:] has no elements, torch.cat skips it.
def _rotate_all(q):
    d = q.shape[-1]
    rot, rest = q[..., :d], q[..., d:]
    return torch.cat([rot * 2, rest], dim=-1)


def _split_zero(q):
    a, b = torch.split(q, [q.shape[-1], 0], -1)
    return torch.cat([b, a], -1) + 1


def _narrow_zero(q):
    return torch.cat([q.narrow(1, q.shape[1], 0), q, q[:, 9:]], 1) * 3


def _return_empty(q):
    return q[..., q.shape[-1]:], q + 1


@pytest.mark.parametrize("f", [_rotate_all, _split_zero, _narrow_zero, _return_empty])
@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_empty_slices_match_torch(f, backend):
    q = torch.randn(2, 4, 8, dtype=torch.float64)
    got, want = pypto.jit(f, backend=backend)(q), f(q)
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert float((g - w).norm()) <= 1e-15 * max(float(w.norm()), 1.0)


def test_empty_slice_in_numpy_kernels():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    got = pypto.jit(lambda x: pypto.concat([x[:, 5:], x * 2, x[:, :0]], -1))(x)
    assert got.shape == (3, 5) and np.array_equal(got, x * 2)
