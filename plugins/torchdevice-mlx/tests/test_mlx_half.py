"""float16/bfloat16 on MLX give torch's numbers: computed in float32 and rounded once where torch's kernels do.

Each op runs natively on torch CPU and on MLX-backed tensors from the same half-precision data; the
results (and, for the activations, the input gradients) must agree on all but a few elements, those
within one step of the half dtype (float32 intermediates computed in another order can round the other
way): a lowering that rounds after every MLX op is a step or more off torch on a third of the elements.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchdevice
from torchdevice.testing import router_sandbox
from torchdevice_mlx.tensor import MLXTensor

OPS = {
    "gelu": F.gelu,
    "gelu tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "exp": torch.exp,
    "log_softmax": lambda x: F.log_softmax(x, -1),
    "log_softmax dim 0": lambda x: F.log_softmax(x, 0),
    "softmax": lambda x: F.softmax(x, -1),
    "var": lambda x: x.var(1),
    "mean": lambda x: x.mean(1),
    "cumsum": lambda x: x.cumsum(1),
    "cumsum dtype": lambda x: x.cumsum(1, dtype=x.dtype),
    "avg_pool2d": lambda x: F.avg_pool2d(x.view(2, 4, 16, 16), 2),
    "lerp": lambda x: torch.lerp(x, x.flip(0), 0.3),
    "addcmul": lambda x: x.addcmul(x, x.flip(1), value=0.1),
    "addcdiv": lambda x: x.addcdiv(x, x.flip(1).abs() + 1, value=0.5),
    "layer_norm": lambda x: F.layer_norm(x, (64,)),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.arange(x.shape[0]) % 64),
}
GRADS = ("gelu", "silu", "softmax", "log_softmax", "layer_norm", "cross_entropy")


def _data(dtype):
    torch.manual_seed(0)
    return (torch.randn(32, 64) * 2).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", sorted(OPS))
def test_half_op_matches_torch_cpu(name, dtype):
    def run(conv):
        x = conv(_data(dtype)).requires_grad_(name in GRADS)
        out = OPS[name](x)
        grad = None
        if name in GRADS:
            (out.float() * torch.linspace(-1, 1, out.numel()).view(out.shape).to(out.device)).sum().backward()
            grad = x.grad.cpu()
        return out.detach().cpu(), grad

    (want, want_g), (got, got_g) = run(lambda t: t), run(MLXTensor.from_torch)
    assert got.dtype == want.dtype
    _agree(got, want)
    if want_g is not None:
        _agree(got_g, want_g)


def _agree(got, want):
    """Equal but for at most 2% of the elements (or one), each within one step of ``want``'s dtype."""
    differ = (got != want).sum().item()
    assert differ <= max(1, 0.02 * want.numel()), f"{differ} of {want.numel()} elements differ"
    info = torch.finfo(want.dtype)
    # one step of the value; near zero (gelu of a large negative x, cancelled float32 terms) a tiny fraction of
    # the output's scale, or the subnormal step
    scale = want.float().abs().max().item()
    torch.testing.assert_close(got, want, rtol=info.eps, atol=max(2 * info.eps * info.tiny, info.eps * scale / 1024))


def _bf16_training(device):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32), nn.SiLU(),
                          nn.Linear(32, 4)).to(device).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(16, 8, device=device, dtype=torch.bfloat16)
    y = torch.randint(0, 4, (16,), device=device)
    losses = []
    for _ in range(4):
        loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_pure_bfloat16_training_matches_native_cpu():
    native = _bf16_training("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _bf16_training("cuda")
    assert translated == pytest.approx(native, rel=1e-3)


MIXED_MATMULS = {
    "mm": lambda a, b, c: torch.mm(a[0], b[0]),
    "matmul": lambda a, b, c: a[0] @ b[0],
    "linear": lambda a, b, c: F.linear(a[0], b[0].t()),
    "bmm": lambda a, b, c: torch.bmm(a, b),
    "addmm": lambda a, b, c: torch.addmm(c, a[0], b[0]),
    "addmm bias": lambda a, b, c: torch.addmm(c, a[0], b[0].to(a.dtype)),
    "baddbmm": lambda a, b, c: torch.baddbmm(c, a, b),
}


@pytest.mark.parametrize("name", sorted(MIXED_MATMULS))
def test_mixed_dtype_matmul_is_refused_as_torch_refuses_it(name):
    """bfloat16 x float32 without autocast: torch (CPU and CUDA) raises; MLX would promote and compute,
    hiding the program's bug. The MLX run raises torch's exception with torch's message."""
    torch.manual_seed(0)
    a, b, c = torch.randn(2, 4, 8).bfloat16(), torch.randn(2, 8, 5), torch.randn(5)

    def outcome(conv):
        try:
            MIXED_MATMULS[name](conv(a), conv(b), conv(c))
        except Exception as exc:
            return type(exc), str(exc)
        return None

    want = outcome(lambda t: t)
    assert want is not None and want[0] is RuntimeError, want  # the native refusal this test is about
    assert outcome(MLXTensor.from_torch) == want


@pytest.mark.parametrize("params", ["float32 (autocast)", "half"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_batch_norm_of_half_input_computes_and_keeps_statistics_as_torch(dtype, params):
    """A half input to batch norm is normalised in float32 and its saved statistics have the parameters' dtype
    (float32 under autocast), as torch's kernel has them: they were rounded to the half dtype, so the backward
    of an fp16 AMP step started from rounded statistics (the first op of a ResNet AMP run to part from torch's)."""
    torch.manual_seed(0)
    x = (torch.randn(8, 16, 6, 6) * 3 + 1).to(dtype)
    pdtype = torch.float32 if params.startswith("float32") else dtype
    weight, bias = (torch.rand(16) + 0.5).to(pdtype), torch.randn(16).to(pdtype)
    grad = torch.randn(8, 16, 6, 6).to(dtype)

    def run(move):
        stats = [torch.zeros(16, dtype=pdtype), torch.ones(16, dtype=pdtype)]
        args = [move(t) for t in (x, weight, bias, *stats)]
        out, mean, invstd = torch.ops.aten.native_batch_norm.default(*args, True, 0.1, 1e-5)
        grads = torch.ops.aten.native_batch_norm_backward.default(move(grad), args[0], args[1], args[3], args[4], mean,
                                                                 invstd, True, 1e-5, [True, True, True])
        return [t.cpu() for t in (out, mean, invstd, *grads, args[3], args[4])]

    native = run(lambda t: t)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = run(lambda t: t.to("cuda"))
    names = ("out", "save_mean", "save_invstd", "grad_input", "grad_weight", "grad_bias", "running_mean", "running_var")
    for name, want, got in zip(names, native, translated):
        assert got.dtype == want.dtype, name
        # one step of the dtype at the largest magnitude (2 eps: a value just past a power of two); float32: 1e-5
        eps = torch.finfo(want.dtype).eps if want.dtype != torch.float32 else 5e-6
        tolerance = 2 * eps * max(1.0, want.abs().max().item())
        assert (got.float() - want.float()).abs().max().item() <= tolerance, name
