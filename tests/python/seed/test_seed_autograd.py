"""The seed document's §5.1 (PyTorch autograd bridge), run as written.

The two tests below are copied verbatim from ../shared/seed/integration/test_seed_integration.py
(`test_autograd_bridge_as_written`, `test_kernel_call_takes_part_in_autograd`, with the
PyPTOFunction class they use); that file's §6 tests belong to the tooling work and do not pass
yet, so the whole file is not copied here. The §5.1 class is the seed's (000_196fa83d7406f362.txt);
`compiled_kernel` is the seed's own fused_linear."""
import torch

from pypto import pto_autograd, to_pto_tensor, to_torch_tensor
from test_seed_kernels import RTOL, fused_linear, rel_err

compiled_kernel = fused_linear


# --- 5.1 与PyTorch的深度集成 (as written) -------------------------------------------------------

class PyPTOFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *args):
        # 转换输入为PyPTO张量
        pto_args = [to_pto_tensor(arg) for arg in args]

        # 调用预编译内核
        pto_output = compiled_kernel(*pto_args)

        # 保留反向计算所需信息
        ctx.save_for_backward(*args)
        ctx.pto_ctx = pto_output.metadata

        return to_torch_tensor(pto_output)

    @staticmethod
    def backward(ctx, grad_output):
        # 构建梯度计算图
        pto_grad = to_pto_tensor(grad_output)
        grads = pto_autograd(ctx.pto_ctx, pto_grad)

        return tuple(to_torch_tensor(g) for g in grads)


def test_autograd_bridge_as_written():
    x = torch.randn(64, 96, requires_grad=True)
    w = torch.randn(96, 48, requires_grad=True)
    b = torch.randn(48, requires_grad=True)
    out = PyPTOFunction.apply(x, w, b)
    out.square().sum().backward()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    ref = torch.relu(x2 @ w2 + b2)
    ref.square().sum().backward()
    assert rel_err(out.detach().numpy(), ref.detach().numpy()) < RTOL
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        assert rel_err(got.numpy(), want.numpy()) < RTOL


def test_kernel_call_takes_part_in_autograd():
    # the bridge is the seed's manual route; calling the kernel directly must not drop the graph
    x = torch.randn(32, 16, requires_grad=True)
    w = torch.randn(16, 8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    out = fused_linear(x, w, b)
    assert out.requires_grad
    out.sum().backward()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    torch.relu(x2 @ w2 + b2).sum().backward()
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        assert rel_err(got.numpy(), want.numpy()) < RTOL
