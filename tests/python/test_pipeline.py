"""pypto.pipeline: stages over forked processes (gloo over loopback) and under a launcher that set
up the process group itself (as torchrun does), against the same stages run in one process."""
import os

import numpy as np
import pytest
import torch

import pypto
import pypto.pipeline_ports
import pypto.pipeline_trace
from pypto.seed_kernels import PipelineStage, run_pipeline
from pypto_testutil import assert_close


def _model(n=4, d=48):
    rng = np.random.default_rng(0)
    stages = [PipelineStage(i, (rng.standard_normal((d, d)) * 0.2).astype(np.float32)) for i in range(n)]
    return stages, rng.standard_normal((20, d)).astype(np.float32)


def _reference(stages, x):
    ref = x.astype(np.float64)
    for st in stages:
        ref = np.maximum(ref @ st.weights, 0.0)
    return ref


@pytest.mark.parametrize("processes", [2, 4])
def test_four_stages_over_processes_equal_one_process(processes):
    stages, x = _model()
    out = pypto.pipeline.run(stages, x, processes=processes, micro_batches=6)
    assert isinstance(out, np.ndarray)
    assert_close(out, _reference(stages, x))
    seq = pypto.pipeline.Pipeline(stages, micro_batches=6)(x)  # in one process
    np.testing.assert_array_equal(out, seq)
    run_pipeline(stages, x)  # the seed's wave loop still works as written
    np.testing.assert_array_equal(out, stages[-1].output_buf)


def test_torch_tensors_and_measured_balance():
    stages, x = _model()
    p = pypto.pipeline.Pipeline(stages, micro_batches=4, balance="auto")
    out = p.run(torch.from_numpy(x), processes=2)
    assert isinstance(out, torch.Tensor)
    assert_close(out.numpy(), _reference(stages, x))
    groups = p.last_stats["groups"]  # from measured times: any split of the four, in order
    assert len(groups) == 2 and sum(groups, []) == [0, 1, 2, 3]


def test_balance_minimises_the_slowest_group():
    assert pypto.pipeline.balance([1, 1, 1, 1], 2) == [2, 2]
    assert pypto.pipeline.balance([4, 1, 1, 1, 1], 2) == [1, 4]
    assert pypto.pipeline.balance([1, 2, 3, 4, 5, 6], 3) in ([3, 2, 1], [4, 1, 1])
    with pytest.raises(pypto.PyptoError, match="cannot place 2 stages on 3"):
        pypto.pipeline.balance([1, 1], 3)


class Failing:
    def compute(self, v):
        raise ValueError("boom in the stage")


class Dying:
    def compute(self, v):
        os._exit(3)


class Growing:
    def __init__(self):
        self.calls = 0

    def compute(self, v):
        self.calls += 1
        return np.concatenate([v] * self.calls, axis=1)  # the shape changes at the second micro-batch


@pytest.mark.parametrize("bad, match", [(Failing(), "(?s)stage 2 failed on micro-batch 0.*boom in the stage"),
                                        (Dying(), "rank 2 stopped answering"),
                                        (Growing(), "stage 3: micro-batch 1 arrives with shape")])
def test_failures_are_reported_not_hung(bad, match):
    stages, x = _model()
    model = stages[:2] + [bad] + stages[3:]
    with pytest.raises(pypto.PyptoError, match=match):
        pypto.pipeline.run(model, x, processes=4, micro_batches=4, timeout=30)


def test_under_a_launcher_with_its_own_process_group(tmp_path):
    """Two ranks set the group up themselves (as torchrun does) and call run(); rank 0 gets the result."""
    stages, x = _model()
    port = pypto.pipeline_ports.free_port()
    result = tmp_path / "out.npy"
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            torch.set_num_threads(1)
            torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=1,
                                                 world_size=2)
            assert pypto.pipeline.Pipeline(stages, micro_batches=3).run(None) is None
            torch.distributed.destroy_process_group()
        except BaseException:  # noqa: B036
            code = 1
        os._exit(code)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2)
    try:
        out = pypto.pipeline.Pipeline(stages, micro_batches=3).run(x)
    finally:
        torch.distributed.destroy_process_group()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    np.save(result, out)
    assert_close(out, _reference(stages, x))


def test_started_workers_serve_many_runs():
    stages, x = _model()
    with pypto.pipeline.Pipeline(stages, micro_batches=5).start(2) as p:
        for k in range(3):
            xs = x[: 20 - 3 * k] * (k + 1)
            assert_close(p.run(xs), _reference(stages, xs))
        assert p.last_stats["processes"] == 2
    assert p._workers is None  # closed: the workers have exited


def test_messages_larger_than_the_shared_rings(monkeypatch):
    """Activations of 10 KiB through 4 KiB rings: sent in pieces, wrapping round, and rank 0 takes
    results while its own send waits for room (else the full rings of the cycle would deadlock)."""
    monkeypatch.setattr(pypto.pipeline_shm, "RING_BYTES", 4096)
    stages, x = _model(n=3, d=256)
    x = np.concatenate([x, x * 0.5], 0)
    out = pypto.pipeline.run(stages, x, processes=3, micro_batches=4)
    assert_close(out, _reference(stages, x))


def test_torch_dtypes_without_numpy_cross_the_boundary():
    """bfloat16 has no NumPy dtype: its bytes cross as they are."""
    x = torch.randn(12, 5).to(torch.bfloat16)
    stages = [lambda t: t * 2, lambda t: t + 1, lambda t: t.float()]
    out = pypto.pipeline.run(stages, x, processes=3, micro_batches=3)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, (x * 2 + 1).float(), rtol=0, atol=0)


def test_trace_per_rank(tmp_path, monkeypatch):
    """PYPTO_PIPELINE_TRACE: every rank writes its events; the summary counts each rank's stage calls."""
    monkeypatch.setenv("PYPTO_PIPELINE_TRACE", str(tmp_path / "t"))
    stages, x = _model()
    with pypto.pipeline.Pipeline(stages, micro_batches=5).start(2) as p:
        p.run(x)
        p.run(x)
    runs = pypto.pipeline_trace.summarize(str(tmp_path / "t"))
    assert len(runs) == 2
    for run in runs:
        assert [v["stage_calls"] for v in run["ranks"].values()] == [5, 5]
        assert 0.0 <= run["bubble"] < 1.0 and run["gpipe_bubble"] == pytest.approx(1 / 6)
        assert run["messages"] == 2 * 5 + 2  # the data both ways, and the end marks


class _PyptoLayer(torch.nn.Module):
    """A stage whose forward is a PyPTO kernel: its derived backward takes part in torch autograd."""

    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d, d) * d ** -0.5)

    def forward(self, x):
        return _relu_matmul(x, self.w)


@pypto.jit
def _relu_matmul(x, w):
    return pypto.relu(pypto.matmul(x, w))


def _trainable(seed=0):
    torch.manual_seed(seed)
    stages = [torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh()), _PyptoLayer(32),
              torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh()), torch.nn.Linear(32, 8)]
    return stages, torch.randn(24, 16), torch.randn(24, 8)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("processes", [2, 3])
def test_training_1f1b_gradients_equal_one_process(processes):
    import copy
    stages, x, y = _trainable()
    ref = copy.deepcopy(stages)
    out = x
    for st in ref:
        out = st(out)
    ref_loss = torch.nn.functional.mse_loss(out, y)
    ref_loss.backward()
    p = pypto.pipeline.Pipeline(stages, micro_batches=5)
    loss = p.train(x, y, torch.nn.functional.mse_loss, processes=processes)
    assert _rel(loss, ref_loss.detach()) < 1e-5
    pairs = [(a, b) for s, r in zip(stages, ref) for a, b in zip(s.parameters(), r.parameters())]
    assert len(pairs) == 7
    for a, b in pairs:
        assert a.grad is not None and _rel(a.grad, b.grad) < 1e-5
    if processes == 2:  # a second step adds its gradients, as backward() does
        p.train(x, y, torch.nn.functional.mse_loss, processes=processes)
        for a, b in pairs:
            assert _rel(a.grad, 2 * b.grad) < 1e-5


def test_training_stage_that_raises_is_reported():
    stages, x, y = _trainable()

    def bad(v):
        raise ValueError("boom in training")
    with pytest.raises(pypto.PyptoError, match="(?s)stage 2 failed in the forward of micro-batch 0.*boom in training"):
        pypto.pipeline.Pipeline(stages[:2] + [bad] + stages[3:], micro_batches=4, timeout=30).train(
            x, y, torch.nn.functional.mse_loss, processes=3)


def test_training_runs_one_forward_one_backward(tmp_path, monkeypatch):
    """The 1F1B order in the per-rank traces: rank 0 runs one forward ahead, the last rank none."""
    import json
    monkeypatch.setenv("PYPTO_PIPELINE_TRACE", str(tmp_path / "t"))
    stages, x, y = _trainable()
    pypto.pipeline.Pipeline(stages, micro_batches=4).train(x, y, torch.nn.functional.mse_loss, processes=2)
    order = {}
    for r in (0, 1):
        events = json.load(open(tmp_path / f"t-rank{r}.json"))["events"]
        order[r] = " ".join(f"{'F' if ev == 'compute' else 'B'}{m}" for _, ev, m in events if ev in ("compute", "backward"))
    assert order[0] == "F0 F1 B0 F2 B1 F3 B2 B3"
    assert order[1] == "F0 B0 F1 B1 F2 B2 F3 B3"
