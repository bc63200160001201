"""The simulated NPU backend (backend="sim", docs/npu_sim.md): the seed's kernels and some of the
test suite's give exactly the interpreter's values; the cycle report is consistent; the target
description is read and checked; what does not fit a local buffer is an error naming the tile."""
import numpy as np
import pytest

import pypto
from pypto.seed_kernels import conv2d_memopt, fused_linear, matrix_multiply, optimized_attention

rng = np.random.default_rng(17)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def rel_err(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def both(fn, args, fill=None, **opts):
    """Runs fn on the interpreter and the simulator; returns (interp out, sim out, sim report)."""
    outs = []
    for backend in ("interp", "sim"):
        k = pypto.jit(fn, backend=backend, **opts)
        a = [x.copy() for x in args]
        if fill is not None:
            a[fill][...] = np.nan
        r = k(*a)
        outs.append(a[fill] if fill is not None else np.asarray(r))
    return outs[0], outs[1], k.last_sim_report()


def test_seed_matrix_multiply_equals_interpreter():
    A, B = rand(96, 80), rand(80, 72)
    ref, out, rep = both(matrix_multiply, [A, B, np.empty((96, 72), np.float32)], fill=2)
    assert np.array_equal(ref, out)
    assert rel_err(out, A.astype(np.float64) @ B) < 1e-5
    assert rep.busy["M"] > 0 and rep.bytes["gm->l1"] > 0 and rep.cycles > 0


def test_seed_attention_equals_interpreter():
    Q, K, V = rand(1, 2, 40, 16), rand(1, 2, 40, 16), rand(1, 2, 40, 16)
    ref, out, rep = both(optimized_attention, [Q, K, V], fusion=True)
    assert np.array_equal(ref, out)
    s = Q.astype(np.float64) @ K.astype(np.float64).swapaxes(-1, -2) / np.sqrt(16)
    p = np.exp(s - s.max(-1, keepdims=True))
    assert rel_err(out, (p / p.sum(-1, keepdims=True)) @ V) < 1e-4
    assert rep.busy["V"] > 0 and rep.busy["M"] > 0


def test_seed_conv2d_and_fused_linear_equal_interpreter():
    x, w, b = rand(2, 4, 10, 9), rand(6, 4, 3, 3), rand(6, 1, 1)
    ref, out, _ = both(conv2d_memopt, [x, w, b])
    assert np.array_equal(ref, out)
    x, w, b = rand(33, 40, ), rand(40, 24), rand(24)
    ref, out, _ = both(fused_linear, [x, w, b], fusion=["matmul", "add", "relu"])
    assert np.array_equal(ref, out)
    assert rel_err(out, np.maximum(x.astype(np.float64) @ w + b, 0)) < 1e-5


@pytest.mark.parametrize("name", ["softmax", "rowsum", "where"])
def test_suite_kernels_equal_interpreter(name):
    def softmax(x):
        return pypto.softmax(x, dim=-1)

    def rowsum(x):
        return (pypto.exp(x) * 2.0 - x).sum(1)

    def where(x):
        return pypto.where(x > 0, pypto.sqrt(pypto.abs(x)), -x)
    fn = {"softmax": softmax, "rowsum": rowsum, "where": where}[name]
    x = rand(70, 130)
    ref, out, rep = both(fn, [x])
    assert np.array_equal(ref, out)
    assert rep.cycles > 0


def test_report_is_consistent():
    def f(x, y):
        return pypto.exp(x) + y
    x, y = rand(300, 200), rand(300, 200)
    k = pypto.jit(f, backend="sim", sim_target={"machine.cores": 4})
    k(x, y)
    rep = k.last_sim_report()
    assert rep.cores == 4 and rep.cores_used == 4
    # every byte of x and y comes in once, the result goes out once
    assert rep.bytes["gm->ub"] == 2 * x.nbytes and rep.bytes["ub->gm"] == x.nbytes
    for p in ("MTE2", "MTE3", "V"):
        assert 0 < rep.utilisation[p] <= 1
        assert rep.busy[p] <= rep.cycles * rep.cores_used
    # no pipe can finish before its own busy time on its core
    assert rep.cycles >= max(rep.busy.values()) / rep.cores_used
    assert pypto.get_last_profile().sim.cycles == rep.cycles
    # spans per core never overlap on one pipe
    by_track = {}
    for core, pipe, b, e, _ in rep.spans:
        by_track.setdefault((core, pipe), []).append((b, e))
    for spans in by_track.values():
        assert all(e0 <= b1 for (_, e0), (b1, _) in zip(spans, spans[1:]))


def test_the_program_carries_sync_flags():
    def f(x):
        return pypto.exp(x) * 3.0
    x = rand(64, 64)
    low = pypto.jit(f, backend="sim").lower(x)
    text = low.as_text("sim")
    assert "SET_FLAG 0, 2, 0" in text and "WAIT_FLAG 0, 2, 0" in text  # MTE2 -> V before compute
    assert "SET_FLAG 2, 1, 0" in text  # V -> MTE3 before the store


def test_cores_and_bandwidth_change_cycles():
    def f(x):
        return pypto.exp(x) + 1.0
    x = rand(512, 256)
    cyc = {}
    for cores in (1, 8):
        k = pypto.jit(f, backend="sim", sim_target={"machine.cores": cores})
        k(x)
        cyc[cores] = k.last_sim_report().cycles
    assert cyc[1] / cyc[8] > 4  # 16 row blocks spread over the cores
    slow = pypto.jit(f, backend="sim", sim_target={"machine.cores": 1, "dma.gm_in.bytes_per_cycle": 8})
    slow(x)
    assert slow.last_sim_report().cycles > cyc[1]


def test_tile_that_does_not_fit_names_it():
    def f(x):
        return pypto.exp(x)
    # explicit tiles are kept: one that does not fit is an error naming it
    with pytest.raises(pypto.PyptoError, match=r"tile '.*' .* does not fit the NPU's ub"):
        pypto.jit(f, backend="sim", tiles={"rows": 64, "cols": 300}, sim_target={"memory.ub.bytes": 4096})(rand(64, 300))
    # so is a program that does not fit even at the smallest tiles
    with pytest.raises(pypto.PyptoError, match=r"tile '.*' .* does not fit the NPU's ub"):
        pypto.jit(f, backend="sim", sim_target={"memory.ub.bytes": 32})(rand(64, 300))


def test_tiles_are_chosen_from_the_buffer_capacities():
    def f(x, y):
        return pypto.exp(x) * y + 1.0
    x, y = rand(64, 300), rand(64, 300)
    ref = pypto.jit(f, backend="interp")(x, y)
    for ub in (262144, 16384):  # the built-in unified buffer, and one 16x smaller
        k = pypto.jit(f, backend="sim", sim_target={"machine.cores": 1, "memory.ub.bytes": ub})
        assert np.array_equal(np.asarray(k(x, y)), np.asarray(ref))
        used, capacity = k.last_sim_report().memory["ub"]
        assert used <= capacity
        assert "_pong" in k.lower(x, y).as_text("sim")  # double-buffered within the capacity
    # the matmul's output tiles are multiples of the cube's fractal, and its tiles fit L1
    a, b = rand(200, 150), rand(150, 120)
    k = pypto.jit(lambda a, b: a @ b, backend="sim", sim_target={"memory.l1.bytes": 262144})
    assert np.array_equal(np.asarray(k(a, b)), np.asarray(pypto.jit(lambda a, b: a @ b, backend="interp")(a, b)))
    text = k.lower(a, b).as_text("tile")
    import re
    # m x n (the accumulator) from the capacities; k (the order of the sums) stays the pipeline's
    shapes = {tuple(map(int, m)) for m in re.findall(r"alloc %\w+: f32\[(\d+), (\d+)\] acc", text)}
    assert shapes and all(r % 16 == 0 and c % 16 == 0 and r * c < 200 * 120 for r, c in shapes), text
    assert k.last_sim_report().memory["l1"][0] <= 262144


def test_bad_target_descriptions_are_errors():
    def f(x):
        return x + 1.0
    for target, what in [({"machine.cores": 0}, "must be positive"), ({"machine.colour": 1}, "unknown key"),
                         ({"spaces.vec": "hbm"}, "no \\[memory.hbm\\]"), ("[nowhere]\nx = 1", "unknown section")]:
        with pytest.raises(pypto.PyptoError, match=what):
            pypto.jit(f, backend="sim", sim_target=target)(rand(8, 8))
    assert "[matrix]" in pypto.sim.default_target_text()


def stream_exp(x, out):
    for i in range(0, x.shape[0], 16):
        out[i:i + 16, :] = pypto.exp(x[i:i + 16, :]) * 2.0 + 1.0


def test_double_buffering_overlaps_load_and_compute():
    x = rand(256, 256)
    cycles, outs = {}, {}
    for db in (False, True):
        out = np.full_like(x, np.nan)
        k = pypto.jit(stream_exp, backend="sim", double_buffer=db, parallel=False, sim_target={"machine.cores": 1})
        k(x, out)
        cycles[db], outs[db] = k.last_sim_report().cycles, out
        if db:
            assert "_pong" in k.lower(x, out).as_text("sim")  # the second buffer of each tile
    ref = np.full_like(x, np.nan)
    pypto.jit(stream_exp, backend="interp", parallel=False)(x, ref)
    assert np.array_equal(outs[True], ref) and np.array_equal(outs[False], ref)
    assert cycles[False] / cycles[True] >= 1.6, cycles


def test_matmul_near_its_roofline():
    A, B = rand(256, 256), rand(256, 256)
    k = pypto.jit(matrix_multiply, backend="sim", sim_target={"machine.cores": 1})
    k(A, B, np.empty((256, 256), np.float32))
    rep = k.last_sim_report()
    bound = max(rep.busy["MTE2"], rep.busy["M"])  # DMA-in bandwidth or the cube, whichever is longer
    assert bound <= rep.cycles <= 1.15 * bound, (rep.cycles, bound)


@pytest.mark.parametrize("cores", [1, 2])
def test_double_buffering_of_each_cores_share_of_the_seed_conv2d(cores):
    # The seed's conv2d is parallel loops over output rows: each core's share runs as a serial,
    # double-buffered loop (20 rows on 1 or 2 cores; on the 32 of the built-in target each core
    # has one row and nothing to overlap).
    x, wt, bias = rand(3, 8, 20, 18), rand(16, 8, 3, 3), rand(16, 1, 1)
    ref = np.asarray(pypto.jit(conv2d_memopt, backend="interp")(x, wt, bias))
    cycles = {}
    for db in (False, True):
        k = pypto.jit(conv2d_memopt, backend="sim", double_buffer=db, sim_target={"machine.cores": cores})
        assert np.array_equal(np.asarray(k(x, wt, bias)), ref)
        cycles[db] = k.last_sim_report().cycles
        if db:
            assert "_core = 0 to" in k.lower(x, wt, bias).as_text("sim")
    assert cycles[False] / cycles[True] >= 1.6, cycles


def test_fusion_moves_fewer_bytes_on_attention():
    Q, K, V = rand(1, 2, 64, 32), rand(1, 2, 64, 32), rand(1, 2, 64, 32)
    reps = {}
    for fusion in (False, True):
        k = pypto.jit(optimized_attention, backend="sim", fusion=fusion)
        k(Q, K, V)
        reps[fusion] = k.last_sim_report()
    assert reps[True].gm_bytes < reps[False].gm_bytes / 2
    assert reps[True].cycles < reps[False].cycles


def test_timeline_picture_script_draws_the_seed_conv2d(tmp_path):
    # tools/sim_timeline.py draws docs/images/sim_conv2d_timeline.png
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "tools" / "sim_timeline.py"
    spec = importlib.util.spec_from_file_location("sim_timeline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    png = mod.main(["--out", str(tmp_path)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20000
