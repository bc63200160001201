"""Memory-bound cases of issue 15: a vector add of 2^24 elements (Triton's first tutorial), a
column sum (x.sum(0), the reduction of a layer-norm backward), a row maximum (x.amax(-1)), an
argmax over logits, a log-softmax and a layer-norm backward, each
against torch, with a 1-thread column (impls "@1") beside the suite's thread count."""
import numpy as np

from bench.cases import Bar, Case, Impl, kernel, pypto_impl, rand, torch64, torch_impl


def _peer_bars(name, other="torch"):
    return [Bar("vs", 1.0, other=other, label=f"{name} >= 1.0x {other}")]


def _one_thread(impl):
    """The impl on one thread: each call runs with torch's and PyPTO's thread counts at 1 (PyPTO
    runs its loops on torch's OpenMP threads once torch is loaded), restored after it (a few
    microseconds, against calls of milliseconds)."""
    setup = impl.setup

    def one_thread_setup():
        import pypto
        import torch
        fn = setup()

        def run():
            tn, pn = torch.get_num_threads(), pypto.num_threads()
            torch.set_num_threads(1)
            pypto.set_num_threads(1)
            try:
                return fn()
            finally:
                torch.set_num_threads(tn)
                pypto.set_num_threads(pn)
        return run
    impl.name += "@1"
    impl.setup = one_thread_setup
    impl.threads = 1
    return impl


def vector_add_case(ctx, n):
    rng = ctx.rng()
    x, y = rand(rng, n), rand(rng, n)

    def tfn(x, y):
        return x + y
    return Case(name="vector_add", shape=f"{n}",
                impls=[pypto_impl("vector_add", x, y), torch_impl("torch", tfn, x, y),
                       _one_thread(pypto_impl("vector_add", x, y)), _one_thread(torch_impl("torch", tfn, x, y))],
                reference=torch64(tfn, x, y), bytes=3.0 * n * 4,
                bars=_peer_bars("vector_add") + [Bar("vs", 1.0, impl="pypto@1", other="torch@1",
                                                     label="vector_add 1 thread >= 1.0x torch")], tol=1e-6)


def _reduction_case(ctx, name, tfn, rows, cols, tol):
    """A reduction of a rows x cols matrix that reads it once: PyPTO's `name` kernel against torch,
    each also on one thread."""
    x = rand(ctx.rng(), rows, cols)
    return Case(name=name, shape=f"{rows}x{cols}",
                impls=[pypto_impl(name, x), torch_impl("torch", tfn, x),
                       _one_thread(pypto_impl(name, x)), _one_thread(torch_impl("torch", tfn, x))],
                reference=torch64(tfn, x), bytes=1.0 * rows * cols * 4, bars=_peer_bars(name), tol=tol)


def column_sum_case(ctx, rows, cols):
    return _reduction_case(ctx, "column_sum", lambda x: x.sum(0), rows, cols, 1e-5)


def row_max_case(ctx, rows, cols):
    """x.amax(-1): a row reduction reading each row once where it lies."""
    return _reduction_case(ctx, "row_max", lambda x: x.amax(-1), rows, cols, 1e-6)


def argmax_case(ctx, rows, cols):
    """x.argmax(-1) over a language model's logits (greedy decoding): the first maximum of each
    row, read once where it lies; exact."""
    return _reduction_case(ctx, "argmax", lambda x: x.argmax(-1), rows, cols, 0.0)


def log_softmax_case(ctx, rows, cols):
    """log_softmax over rows (a language model's loss): read once, written once."""
    rng = ctx.rng()
    x = rand(rng, rows, cols)

    def tfn(x):
        return x.log_softmax(-1)
    return Case(name="log_softmax", shape=f"{rows}x{cols}",
                impls=[pypto_impl("log_softmax", x), torch_impl("torch", tfn, x)],
                reference=torch64(tfn, x), bytes=2.0 * rows * cols * 4, bars=_peer_bars("log_softmax"), tol=1e-5)


def layer_norm_backward_case(ctx, rows, cols):
    """The backward of y = layer_norm(x, w, b) for a given cotangent: pypto.vjp's pullback (the
    derived backward kernel) against torch autograd's backward."""
    rng = ctx.rng()
    x, w, b, cot = rand(rng, rows, cols), rand(rng, cols), rand(rng, cols), rand(rng, rows, cols)

    def pypto_setup():
        import pypto
        _, pullback = pypto.vjp(kernel("layer_norm"), x, w, b)
        return lambda: pullback(cot)[0]

    def torch_setup():
        import torch
        tx = torch.from_numpy(x).requires_grad_()
        tw, tb = torch.from_numpy(w).requires_grad_(), torch.from_numpy(b).requires_grad_()
        y = torch.nn.functional.layer_norm(tx, (cols,), tw, tb, 1e-5)
        tc = torch.from_numpy(cot)
        return lambda: torch.autograd.grad(y, (tx, tw, tb), tc, retain_graph=True)[0]

    def reference():
        import torch
        tx = torch.from_numpy(x).double().requires_grad_()
        y = torch.nn.functional.layer_norm(tx, (cols,), torch.from_numpy(w).double(), torch.from_numpy(b).double(),
                                           1e-5)
        return torch.autograd.grad(y, tx, torch.from_numpy(cot).double())[0].numpy()
    return Case(name="layer_norm_backward", shape=f"{rows}x{cols}",
                impls=[Impl("pypto", pypto_setup, compiled=True), Impl("torch", torch_setup)],
                reference=reference, bytes=4.0 * rows * cols * 4, bars=_peer_bars("layer_norm_backward"),
                tol=1e-4)


def memory_cases(ctx):
    p = ctx.pick
    return [vector_add_case(ctx, p(1 << 12, 1 << 24, 1 << 24)),
            column_sum_case(ctx, *p((256, 384), (4096, 4096), (4096, 4096))),
            row_max_case(ctx, *p((256, 384), (4096, 4096), (4096, 4096))),
            argmax_case(ctx, *p((64, 1000), (256, 32000), (256, 32000))),
            log_softmax_case(ctx, *p((256, 384), (4096, 4096), (4096, 4096))),
            layer_norm_backward_case(ctx, *p((64, 256), (2048, 2048), (4096, 4096)))]
