"""Kernels traced by running them (frontend/native.py): what Hugging Face's models do, without
transformers installed - a decorated forward that fills keyword arguments in from a config, a
**kwargs signature, try/with/while and nested functions in a module's forward, a dataclass
mapping as the result, torch.compiler.is_compiling() choosing the trace-friendly path, a cache
that starts from an empty tensor, a mask read at several index tensors. Each against the same
module run by torch, in float64."""
import dataclasses
import functools
from collections import OrderedDict, namedtuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import pypto


@dataclasses.dataclass
class Output(OrderedDict):  # as transformers' ModelOutput: a dataclass that is also a mapping
    last_hidden_state: torch.Tensor = None
    cache: object = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is not None:
                self[f.name] = getattr(self, f.name)


def fills_from_config(forward):
    """A decorator as transformers' output-capturing ones: the wrapper takes *args / **kwargs and
    passes a keyword the caller left out, read from the module's config."""
    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        kwargs.setdefault("scale", self.config["scale"])
        return forward(self, *args, **kwargs)
    return wrapper


class Cache:
    def __init__(self):
        self.keys = torch.tensor([])  # the empty start a cat skips

    def update(self, k):
        self.keys = torch.cat([self.keys, k], dim=-2)
        return self.keys


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.config = {"scale": 0.5}
        self.proj = nn.Linear(d, d)

    @fills_from_config
    def forward(self, x, attention_mask=None, scale=None, **kwargs):
        def padding_mask(b, q, k):  # a nested function reading the mask at two index tensors
            return attention_mask[b, k]
        steps = 0
        while steps < 2:  # Python-level control flow runs at trace time
            x = x + self.proj(x) * scale
            steps += 1
        with torch.no_grad():
            pass
        try:
            lookup = kwargs["lookup"]
        except KeyError:
            lookup = None
        B, S, _ = x.shape
        if torch.compiler.is_compiling() or lookup is not None:
            b = torch.arange(B, device=x.device)[:, None, None]
            q = torch.arange(S)[None, :, None]
            k = torch.arange(S)[None, None, :]
            keep = padding_mask(b, q, k).to(x.device) & (k <= q)
        else:  # the eager path branches on the data (mask.all()), which a trace cannot
            keep = attention_mask[:, None, :].bool() & torch.ones(S, S, dtype=torch.bool).tril() \
                if not attention_mask.all() else torch.ones(S, S, dtype=torch.bool).tril()[None]
        scores = (x @ x.transpose(1, 2)).masked_fill(~keep, float("-inf"))
        cache = Cache()
        keys = cache.update(F.softmax(scores, -1) @ x)
        return Output(last_hidden_state=keys, cache=cache)


def _inputs():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 6, 8, generator=g, dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    return x, mask


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_decorated_module_with_python_control_flow(backend):
    torch.manual_seed(0)
    m = Block().double().eval()
    x, mask = _inputs()
    want = m(x, mask)
    got = pypto.jit(m, backend=backend)(x, mask)
    assert type(got) is Output and set(got.keys()) == {"last_hidden_state", "cache"}
    assert float((got.last_hidden_state - want.last_hidden_state).norm()) < 1e-12 * float(want.last_hidden_state.norm())
    # the cache object comes back holding this call's tensors, not the trace's
    assert torch.equal(got.cache.keys, got.last_hidden_state)
    assert not torch.compiler.is_compiling()  # answered True only while tracing
    x2 = x * 2
    assert float((pypto.jit(m, backend=backend)(x2, mask).last_hidden_state - m(x2, mask).last_hidden_state).norm()) \
        < 1e-12 * float(m(x2, mask).last_hidden_state.norm())


def test_gradients_through_a_native_trace():
    torch.manual_seed(0)
    m = Block().double()
    x, mask = _inputs()
    x.requires_grad_()
    out = pypto.jit(m)(x, mask).last_hidden_state
    cot = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, [x, m.proj.weight], cot)
    want = torch.autograd.grad(m(x, mask).last_hidden_state, [x, m.proj.weight], cot)
    for a, b in zip(got, want):
        assert float((a - b).norm()) < 1e-10 * float(b.norm())


def test_star_args_and_keyword_extras():
    """*args takes nothing; **kwargs takes a call's extra keywords: their numbers as constants
    (one variant per value), their tensors as kernel inputs read at each call."""
    def kernel(x, *rest, **options):
        y = x * options.get("scale", 2.0)
        return y + options["shift"] if "shift" in options else y
    k = pypto.jit(kernel, backend="interp")
    x = torch.randn(3, 3)
    assert torch.equal(k(x), x * 2)
    assert torch.equal(k(x, scale=3.0), x * 3)
    s1, s2 = torch.randn(3), torch.randn(3)
    assert torch.equal(k(x, shift=s1), x * 2 + s1) and torch.equal(k(x, shift=s2), x * 2 + s2)
    with pytest.raises(pypto.PyptoError, match="nothing through"):
        k(x, x)


class KVCache:
    """As transformers' DynamicCache: layers holding key tensors that each call extends in place."""
    class Layer:
        def __init__(self, keys):
            self.keys = keys

    def __init__(self, keys):
        self.layers = [KVCache.Layer(keys)]


class Step(nn.Module):
    def forward(self, x, **kwargs):
        layer = kwargs["cache"].layers[0]
        layer.keys = torch.cat([layer.keys, x], dim=0)
        return layer.keys.sum(0)


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_a_cache_argument_is_updated_in_place(backend):
    k = pypto.jit(Step(), backend=backend)
    g = torch.Generator().manual_seed(2)
    start = torch.randn(2, 4, generator=g)
    ours, ref = KVCache(start.clone()), KVCache(start.clone())
    for n in range(3):
        x = torch.randn(1, 4, generator=g)
        got, want = k(x, cache=ours), Step()(x, cache=ref)
        assert torch.allclose(got, want)
        assert type(ours.layers[0].keys) is torch.Tensor and torch.equal(ours.layers[0].keys, ref.layers[0].keys)
        assert ours.layers[0].keys.shape == (3 + n, 4)


class Failing(nn.Module):
    @fills_from_config
    def forward(self, x, scale=None):
        return x.view(7, 7)  # the line an error must name

    config = {"scale": 1.0}


def test_native_errors_name_the_users_line():
    with pytest.raises(pypto.PyptoError) as e:
        pypto.jit(Failing(), backend="interp")(torch.randn(4, 4))
    line = Failing.forward.__wrapped__.__code__.co_firstlineno + 2
    assert f"test_native_trace.py:{line}:" in str(e.value) and "x.view(7, 7)" in str(e.value)


def test_walked_kernels_still_refuse_while():
    def kernel(x):
        i = 0
        while i < 2:
            i += 1
        return x
    with pytest.raises(pypto.PyptoError, match="while"):
        pypto.jit(kernel, backend="interp")(torch.randn(2, 2))


Pair = namedtuple("Pair", "total diff")


def test_namedtuple_and_dict_results_keep_their_types():
    def kernel(a, b):
        return {"pair": Pair(a + b, a - b), "od": OrderedDict(prod=a * b)}
    a, b = torch.randn(3), torch.randn(3)
    got = pypto.jit(kernel, backend="interp")(a, b)
    assert type(got["pair"]) is Pair and torch.equal(got["pair"].diff, a - b)
    assert type(got["od"]) is OrderedDict and torch.equal(got["od"]["prod"], a * b)


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_several_index_tensors(backend):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 5, 6, generator=g, dtype=torch.float64)
    i, j = torch.tensor([[0], [3], [-1]]), torch.tensor([1, 4, -2, 0])
    for f in (lambda a, i, j: a[i, j], lambda a, i, j: a[:, i, j], lambda a, i, j: a[i, j, 2:5],
              lambda a, i, j: a[torch.arange(4), j] * 2):
        assert torch.equal(pypto.jit(f, backend=backend)(x, i, j), f(x, i, j))
    with pytest.raises(pypto.PyptoError, match="out of range"):
        pypto.jit(lambda a, i, j: a[i, j], backend=backend)(x, torch.tensor([4]), torch.tensor([0]))
    xg = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(pypto.jit(lambda a, i, j: a[i, j] * 3, backend=backend), (xg, i, j))


class LastTokens(nn.Module):
    """As transformers' causal LMs: `logits_to_keep=0` means all positions, read as a Python int."""
    @fills_from_config
    def forward(self, x, scale=None, logits_to_keep=0):
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return x[:, keep] * scale

    config = {"scale": 2.0}


def test_numbers_of_a_native_function_are_constants():
    x = torch.randn(2, 5, 3)
    k = pypto.jit(LastTokens(), backend="interp")
    assert torch.equal(k(x), x * 2)
    assert torch.equal(k(x, logits_to_keep=1), x[:, -1:] * 2)
    assert torch.equal(k(x, logits_to_keep=2), x[:, -2:] * 2)  # one variant per value
