"""The seed's fusion contract: fusion=True fuses everything the boundary rules allow;
fusion=[...] fuses exactly the listed kinds of op (an unknown name is an error); fusion=False
fuses only the instructions of one composite op. Checked on the tile-level program (one store
per nest: each nest stores only the values needed outside it) and on the results."""
import numpy as np
import pytest

import pypto
from pypto_testutil import assert_close, rand


def linear(x, w, b):
    return pypto.relu(pypto.add(pypto.matmul(x, w), b))


def tanh_chain(x):
    return pypto.tanh(pypto.tanh(x) * 2.0 + 1.0)


def norm_chain(x, w):
    return pypto.rms_norm(pypto.relu(pypto.layer_norm(x, (x.shape[-1],))), (x.shape[-1],), w)


# Public ops made of several instructions: each call is labelled (`seq hardswish { ... }` in the
# tensor IR) and counts as one composite.
def hardswish_relu(x):
    return pypto.relu(pypto.hardswish(x))


def logsumexp_chain(x):
    return pypto.exp(x - pypto.logsumexp(x, -1, keepdim=True))


def var_chain(x):
    return pypto.sqrt(pypto.var(x, -1, keepdim=True) + 1.0)


# Attention: scores, scale, mask, softmax, weighted sum. Under the default list (no "matmul") the
# two products still join the chain, as one nest: the scores never reach memory.
def attention(q, k, v, mask):
    return pypto.matmul(pypto.softmax(pypto.matmul(q, k.transpose(-2, -1)) * 0.25 + mask, -1), v)


# The same shape of chain without a softmax is no attention: its products keep their own nests.
def relu_chain(q, k, v, mask):
    return pypto.matmul(pypto.relu(pypto.matmul(q, k.transpose(-2, -1)) * 0.25 + mask), v)


def nests(fn, fusion, *args):
    """Results and the number of nests (stores) of `fn` compiled with `fusion`."""
    k = pypto.jit(fn, fusion=fusion, backend="interp", promote=False)  # (promotion keeps small temps in tiles)
    return k(*args), k.lower(*args).as_text("tile").count("TSTORE")


CASES = {
    # relu(add(matmul)): the seed's fused_linear
    "linear": (linear, [(True, 1), (["matmul", "add", "relu"], 1), (["add", "relu"], 2), (["matmul", "add"], 2),
                        (["matmul", "relu"], 3), (["matmul"], 3), (False, 3), ("off", 3)]),
    # tanh, mul, add, tanh
    "tanh": (tanh_chain, [(True, 1), (["tanh", "mul", "add"], 1), (["mul", "add"], 3), (["tanh", "mul"], 3),
                          (["tanh"], 4), (False, 4)]),
    # layer_norm, relu, rms_norm: each norm is one nest on its own even with fusion=False
    "norm": (norm_chain, [(True, 1), (["layer_norm", "relu", "rms_norm"], 1), (["layer_norm", "relu"], 2),
                          (["relu", "rms_norm"], 2), (["layer_norm", "rms_norm"], 3), (False, 3)]),
    # one call of hardswish (add, clamp, mul, mul), then relu: the call joins relu only when all its
    # kinds are listed, and stays one nest otherwise
    "hardswish": (hardswish_relu, [(True, 1), (None, 1), (False, 2), ("off", 6), (["relu"], 2),
                                   (["add", "mul", "maximum", "minimum", "relu"], 1)]),
    "logsumexp": (logsumexp_chain, [(True, 1), (None, 1), (False, 3), (["sub", "exp"], 2)]),
    "var": (var_chain, [(True, 1), (None, 1), (False, 3), (["add", "sqrt"], 2), ("off", 8)]),
    "attention": (attention, [(True, 1), (None, 1), (["mul", "add", "softmax"], 1), (["softmax"], 5),
                              (["mul", "add"], 4), (False, 5)]),
    "relu_chain": (relu_chain, [(True, 1), (None, 3), (["mul", "add", "relu"], 3), (False, 5)]),
}


def reference(name, args):
    a = [np.asarray(v, dtype=np.float64) for v in args]
    if name == "linear":
        return np.maximum(a[0] @ a[1] + a[2], 0)
    if name == "tanh":
        return np.tanh(np.tanh(a[0]) * 2 + 1)
    if name == "hardswish":
        return np.maximum(a[0] * np.clip(a[0] + 3, 0, 6) / 6, 0)
    if name == "logsumexp":
        m = a[0].max(-1, keepdims=True)
        return np.exp(a[0] - (m + np.log(np.exp(a[0] - m).sum(-1, keepdims=True))))
    if name == "var":
        return np.sqrt(a[0].var(-1, ddof=1, keepdims=True) + 1)
    if name in ("attention", "relu_chain"):
        s = a[0] @ np.swapaxes(a[1], -2, -1) * 0.25 + a[3]
        if name == "relu_chain":
            return np.maximum(s, 0) @ a[2]
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True) @ a[2]
    x = a[0]
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    r = np.maximum(ln, 0)
    return r / np.sqrt((r * r).mean(-1, keepdims=True) + 1e-6) * a[1]


@pytest.mark.parametrize("name", CASES)
def test_fusion_lists_group_exactly_the_listed_kinds(name):
    fn, expectations = CASES[name]
    args = {"linear": (rand(40, 24), rand(24, 16), rand(16)), "tanh": (rand(33, 70),),
            "norm": (rand(9, 48), rand(48)), "hardswish": (rand(9, 48) * 4,), "logsumexp": (rand(9, 48),),
            "var": (rand(9, 48),)}.get(name) or (rand(2, 24, 16), rand(2, 20, 16), rand(2, 20, 8), rand(24, 20))
    ref = reference(name, args)
    for fusion, want in expectations:
        out, stores = nests(fn, fusion, *args)
        assert stores == want, f"fusion={fusion!r}: {stores} nests, expected {want}"
        assert_close(out, ref)


def test_public_op_call_is_labelled_in_the_tensor_ir():
    """What one call of a multi-instruction op emits is one labelled group; a single-instruction
    op is not wrapped; its allocations stay in front of it. The text parses back."""
    lowered = pypto.jit(hardswish_relu, backend="interp").lower(rand(9, 48))
    text = lowered.as_text("tensor")
    group = text.split("seq hardswish {")[1].split("}")[0]
    assert "TADD" in group and "HARDTANH" in group and group.count("TMUL") == 2, text
    assert "TRELU" not in group and "alloc" not in group and text.count("seq ") == 1, text
    parsed = pypto.isa.parse(text)
    pypto.isa.verify(parsed, "tensor")
    assert pypto.isa.to_text(parsed) == text


def test_public_op_call_is_labelled_in_the_tile_ir():
    """A call whose instructions fused among themselves (or not at all) keeps its label around
    the nests it became; one that fused with its neighbours has none (its nest is theirs). The
    label is for the reader: the ISA program (what runs) has none, and results do not change."""
    x = rand(9, 48) * 4
    for fusion, labelled in ((False, True), (["relu"], True), ("off", True), (True, False)):
        lowered = pypto.jit(hardswish_relu, backend="interp", fusion=fusion).lower(x)
        tile = lowered.as_text("tile")
        assert ("seq hardswish {" in tile) == labelled, (fusion, tile)
        if labelled:
            group = tile.split("seq hardswish {")[1].split("\n  }")[0]
            assert "TADD" in group and "TRELU" not in group, tile
            assert tile.index("seq hardswish {") < tile.index("TRELU"), tile
        assert "seq " not in lowered.as_text("isa"), fusion
        pypto.isa.verify(pypto.isa.parse(tile), "tile")
    lowered = pypto.jit(var_chain, backend="interp", fusion=False).lower(x)  # (var: one nest of its own)
    assert lowered.as_text("tile").count("seq var {") == 1
    assert_close(pypto.jit(hardswish_relu, fusion=False)(x), reference("hardswish", (x,)))


def test_unknown_fusion_name_is_an_error():
    with pytest.raises(pypto.PyptoError, match="unknown kind of op 'bogus'.*known: .*matmul"):
        pypto.jit(linear, fusion=["matmul", "bogus"])
