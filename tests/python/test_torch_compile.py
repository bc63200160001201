"""Kernels inside torch.compile / torch.export: torch.library custom ops with fake
implementations from PyPTO's shape inference (python/pypto/torch_ops.py)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import torch  # a hard dependency (Makefile PY_PKGS): a missing torch must fail, not skip

import torch.nn.functional as F  # noqa: E402

import pypto  # noqa: E402
from pypto import torch_ops  # noqa: E402
from pypto_testutil import assert_close  # noqa: E402


def _close(out, ref, tol=1e-5):
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape, out.dtype, ref.dtype)
    assert_close(out.detach().double().numpy(), ref.detach().double().numpy(), tol)


@pypto.jit(backend="interp")
def gated(x, w, b):
    h = pypto.matmul(x, w) + b
    return pypto.silu(h) * h, h.sum(-1)


@pypto.jit(backend="interp")
def scale_into(x, out, s):
    out[...] = x * s
    return pypto.rms_norm(x, (x.shape[-1],))


class Mixed(torch.nn.Module):
    """torch ops around two kernels: one returning two results, one storing into an argument."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(12, 12)
        self.w = torch.nn.Parameter(torch.randn(12, 8))
        self.b = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        y, s = gated(h, self.w, self.b)
        buf = torch.empty_like(h)
        n = scale_into(h, buf, 0.5)
        return torch.relu(y) + s.unsqueeze(-1), buf * 2 + n


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_matches_eager(dynamic):
    torch.manual_seed(0)
    m = Mixed()
    cm = torch.compile(m, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    with torch.no_grad():
        for rows in (5, 9, 13):
            x = torch.randn(rows, 12)
            for got, ref in zip(cm(x), m(x)):
                _close(got, ref)


class Norm(torch.nn.Module):
    """A module whose weight reaches the kernel as an implicit input (pypto.jit(module))."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(8))

    def forward(self, x):
        return pypto.rms_norm(x, (x.shape[-1],), self.weight) * 2


class Trainable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(12, 12)
        self.w = torch.nn.Parameter(torch.randn(12, 8) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(8))
        self.norm = Norm()
        self.norm_kernel = pypto.jit(self.norm, backend="interp")

    def forward(self, x, use_kernels=True):
        h = torch.tanh(self.lin(x))
        if use_kernels:
            y, s = gated(h, self.w, self.b)
            return (self.norm_kernel(y) * s.unsqueeze(-1)).sum()
        g = h @ self.w + self.b
        y, s = F.silu(g) * g, g.sum(-1)
        normed = F.rms_norm(y, (8,), self.norm.weight, eps=1e-6) * 2
        return (normed * s.unsqueeze(-1)).sum()


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_backward_matches_torch(dynamic):
    torch.manual_seed(3)
    m = Trainable()
    cm = torch.compile(m, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for rows in (5, 9):
        x = torch.randn(rows, 12, requires_grad=True)
        ref = m(x, use_kernels=False)
        ref_grads = torch.autograd.grad(ref, [x] + list(m.parameters()), allow_unused=True)
        got = cm(x)
        got_grads = torch.autograd.grad(got, [x] + list(m.parameters()), allow_unused=True)
        _close(got.detach(), ref.detach())
        for g, r in zip(got_grads, ref_grads):
            if r is None:
                continue
            _close(g, r, 1e-4)


def test_compile_inductor_and_graph_has_custom_op():
    torch.manual_seed(1)
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    @pypto.jit
    def k(x, y):
        return pypto.relu(x @ y)

    def f(x, y):
        return torch.sin(k(torch.cos(x), y)) * 3

    x, y = torch.randn(6, 5), torch.randn(5, 7)
    _close(torch.compile(f, fullgraph=True)(x, y), f(x, y))
    torch.compile(f, fullgraph=True, backend=backend)(x, y)
    assert len(seen) == 1  # one graph: no break


def test_mutated_argument_is_declared_and_written():
    x = torch.randn(4, 6)
    out = torch.full((4, 6), float("nan"))

    def f(x, out):
        return scale_into(x, out, 3.0)

    torch.compile(f, fullgraph=True, backend="aot_eager")(x, out)
    _close(out, x * 3)
    ops = scale_into._torch_ops
    (op,) = ops.values()
    schema = op.op._schema
    assert [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments[:2]] == [False, True]


def test_export_dynamic_dim():
    torch.manual_seed(2)
    m = Mixed()
    x = torch.randn(7, 12)
    ep = torch.export.export(m, (x,), dynamic_shapes={"x": {0: torch.export.Dim("rows")}})
    assert "torch.ops.pypto." in ep.graph_module.code
    x2 = torch.randn(11, 12)
    with torch.no_grad():
        for got, ref in zip(ep.module()(x2), m(x2)):
            _close(got, ref)


# --- the fake implementation agrees with the real kernel, for every op, static and symbolic ------

def _k(fn):
    return pypto.jit(fn, backend="interp")


def op_add(x, y):
    return x + y


def op_bcast(x, y):
    return x * y


def op_exp(x):
    return pypto.exp(x)


def op_gelu(x):
    return pypto.gelu(x, "tanh")


def op_cmp(x, y):
    return x > y


def op_where(x, y):
    return pypto.where(x > 0, x, y)


def op_cast(x):
    return pypto.cast(x, pypto.float64)


def op_sum(x):
    return x.sum(-1)


def op_sum_all(x):
    return x.sum()


def op_mean_keep(x):
    return pypto.mean(x, 0, keepdim=True)


def op_max(x):
    return pypto.max(x, 1)


def op_matmul(x, y):
    return x @ y


def op_bmm(x, y):
    return x @ y


def op_softmax(x):
    return pypto.softmax(x, -1)


def op_log_softmax(x):
    return pypto.log_softmax(x, 0)


def op_layer_norm(x):
    return pypto.layer_norm(x, (x.shape[-1],))


def op_rms_norm(x, w):
    return pypto.rms_norm(x, (x.shape[-1],), w)


def op_transpose(x):
    return pypto.transpose(x, 0, 1)


def op_permute(x):
    return pypto.permute(x, (2, 0, 1))


def op_flatten(x):
    return pypto.reshape(x, (-1,))


def op_merge(x):
    return pypto.reshape(x, (x.shape[0] * x.shape[1], x.shape[2]))


def op_unsqueeze(x):
    return pypto.unsqueeze(x, 1)


def op_cat(x, y):
    return pypto.cat([x, y], 0)


def op_cat2(x, y):
    return pypto.cat([x, y, x], 1)


def op_slice(x):
    return x[1:, :4]


def op_half(x):
    return x[:, : x.shape[1] // 2]


def op_bcast_to(x):
    return pypto.broadcast_to(x, (3,) + tuple(x.shape))


def op_full(x):
    return pypto.full((x.shape[0], 3), 2.0) + x[:, :3]


def op_two_outs(x):
    return (x + 1, x.sum(0))


SWEEP = {
    "add": (_k(op_add), [(6, 10), (6, 10)]),
    "bcast": (_k(op_bcast), [(6, 10), (10,)]),
    "exp": (_k(op_exp), [(6, 10)]),
    "gelu": (_k(op_gelu), [(6, 10)]),
    "cmp": (_k(op_cmp), [(6, 10), (6, 10)]),
    "where": (_k(op_where), [(6, 10), (6, 10)]),
    "cast": (_k(op_cast), [(6, 10)]),
    "sum": (_k(op_sum), [(6, 10)]),
    "sum_all": (_k(op_sum_all), [(6, 10)]),
    "mean_keep": (_k(op_mean_keep), [(6, 10)]),
    "max": (_k(op_max), [(6, 10)]),
    "matmul": (_k(op_matmul), [(6, 10), (10, 4)]),
    "bmm": (_k(op_bmm), [(3, 6, 10), (3, 10, 4)]),
    "softmax": (_k(op_softmax), [(6, 10)]),
    "log_softmax": (_k(op_log_softmax), [(6, 10)]),
    "layer_norm": (_k(op_layer_norm), [(6, 10)]),
    "rms_norm": (_k(op_rms_norm), [(6, 10), (10,)]),
    "transpose": (_k(op_transpose), [(6, 10)]),
    "permute": (_k(op_permute), [(3, 6, 10)]),
    "flatten": (_k(op_flatten), [(6, 10)]),
    "merge": (_k(op_merge), [(3, 6, 10)]),
    "unsqueeze": (_k(op_unsqueeze), [(6, 10)]),
    "cat": (_k(op_cat), [(6, 10), (6, 10)]),
    "cat2": (_k(op_cat2), [(6, 10), (6, 4)]),
    "slice": (_k(op_slice), [(6, 10)]),
    "half": (_k(op_half), [(6, 10)]),
    "bcast_to": (_k(op_bcast_to), [(6, 10)]),
    "full": (_k(op_full), [(6, 10)]),
    "two_outs": (_k(op_two_outs), [(6, 10)]),
}
GROW = {6: 9, 10: 14, 4: 5, 3: 2}  # each example size -> another size of the same kind


@pytest.mark.parametrize("name", sorted(SWEEP))
def test_fake_matches_real(name):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
    kernel, shapes = SWEEP[name]
    xs = [torch.randn(*s) for s in shapes]
    xs2 = [torch.randn(*[GROW[d] for d in s]) for s in shapes]
    real, real2 = kernel(*xs), kernel(*xs2)
    real = list(real) if isinstance(real, tuple) else [real]
    real2 = list(real2) if isinstance(real2, tuple) else [real2]
    # static fake tensors
    with FakeTensorMode() as mode:
        fake = torch_ops._run_op(kernel, None, tuple(mode.from_tensor(x) for x in xs), {})
    fake = list(fake) if isinstance(fake, tuple) else [fake]
    assert [(tuple(f.shape), f.dtype) for f in fake] == [(tuple(r.shape), r.dtype) for r in real]
    # symbolic sizes: the output sizes as expressions, evaluated at the other sizes
    env = ShapeEnv()
    with FakeTensorMode(shape_env=env) as mode:
        ctx = [StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DUCK] * x.dim()) for x in xs]
        fx = [mode.from_tensor(x, symbolic_context=c) for x, c in zip(xs, ctx)]
        fake = torch_ops._run_op(kernel, None, tuple(fx), {})
    fake = list(fake) if isinstance(fake, tuple) else [fake]
    subst = {}
    for f in fx:
        for d in f.shape:
            if isinstance(d, torch.SymInt):
                subst[d.node.expr] = GROW[int(d.node.hint)]
    for f, r, r2 in zip(fake, real, real2):
        assert f.dtype == r.dtype
        assert tuple(int(d) if not isinstance(d, torch.SymInt) else int(d.node.hint) for d in f.shape) == \
            tuple(r.shape)
        grown = tuple(int(d.node.expr.xreplace(subst)) if isinstance(d, torch.SymInt) else int(d)
                      for d in f.shape)
        assert grown == tuple(r2.shape), (name, f.shape, r2.shape)


def test_fake_without_a_size_law_specialises():
    """A kernel that only works at one size: the sizes are guarded, not guessed."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
    kernel = _k(op_fixed)
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        x = mode.from_tensor(torch.randn(6, 10),
                             symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DUCK] * 2))
        out = torch_ops._run_op(kernel, None, (x,), {})
    assert tuple(out.shape) == (6, 10) and all(not isinstance(d, torch.SymInt) for d in out.shape)


def op_fixed(x):
    return pypto.broadcast_to(x, (6, 10)) + 1


def test_no_leak_warnings_at_exit(tmp_path):
    code = textwrap.dedent("""
        import torch, pypto
        @pypto.jit(backend="interp")
        def k(x):
            return x * 2
        f = torch.compile(lambda x: k(x) + 1, fullgraph=True, backend="aot_eager")
        print(float(f(torch.ones(3)).sum()))
        pypto.relu(torch.ones(2))
    """)
    script = tmp_path / "leak_check.py"
    script.write_text(code)
    # nanobind's report is on here: what pypto holds must be released at exit (jit.py)
    env = dict(os.environ, PYPTO_LEAK_WARNINGS="1")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "9.0"
    assert "leak" not in r.stderr, r.stderr
