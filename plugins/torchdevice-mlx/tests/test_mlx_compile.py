"""torch.compile(backend="mlx"): captured graphs lowered to one MLX function each (mx.compile), against eager."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchdevice_mlx import compile as mlx_compile
from torchdevice_mlx.conversion import fallback_counts, reset_fallback_counts
from torchdevice_mlx.tensor import MLXTensor
from torchdevice_mlx.translation import module_to_mlx

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "programs"))


def _models():
    import importlib

    saved = sys.argv
    sys.argv = [saved[0], "--device", "cpu"]  # the workload module reads its device at import
    try:
        return importlib.import_module("workload")
    finally:
        sys.argv = saved


def _train(make, data, compiled: bool, steps: int = 3):
    torch.manual_seed(0)
    model = module_to_mlx(make())
    run = mlx_compile.compile_module(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = MLXTensor.from_torch(data)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        if x.dtype == torch.int64:  # the GPT: (inputs, targets) -> (logits, loss)
            _, loss = run(x[:, :-1].contiguous(), x[:, 1:].contiguous())
        else:
            loss = F.cross_entropy(run(x), MLXTensor.from_torch(torch.arange(x.shape[0]) % 10))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    run.eval()
    with torch.no_grad():
        evaluated = run(x[:, :-1].contiguous())[0] if x.dtype == torch.int64 else run(x)
    return losses, evaluated.cpu(), [b.cpu() for b in model.buffers()]


@pytest.mark.parametrize("name", ["MLP", "CNN", "GPT"])
def test_compiled_training_matches_eager_and_runs_as_mlx_functions(name):
    workload = _models()
    make = getattr(workload, name)
    data = {"MLP": torch.randn(8, 32), "CNN": torch.randn(4, 3, 16, 16), "GPT": torch.randint(0, 64, (2, 17))}[name]
    torch.manual_seed(1)
    eager = _train(make, data, compiled=False)
    with mlx_compile._lock:
        mlx_compile._stats.clear()
    reset_fallback_counts()
    compiled = _train(make, data, compiled=True)
    assert compiled[0] == pytest.approx(eager[0], rel=1e-5)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-4, atol=1e-5)  # eval mode, no grad
    for a, b in zip(eager[2], compiled[2]):  # BatchNorm's running statistics, written back
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    stats = mlx_compile.compile_stats()
    assert not any(k.startswith("eager") for k in stats), stats
    assert stats.get("backward graphs mx.compile-d", 0) >= 1, stats
    assert fallback_counts() == {}


def test_a_graph_that_cannot_be_captured_runs_eagerly():
    class ItemInForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) * float(x.sum().item() > 0)  # data-dependent Python value

    torch.manual_seed(0)
    model = module_to_mlx(ItemInForward())
    x = MLXTensor.from_torch(torch.ones(2, 4))
    want = model(x).cpu()
    with mlx_compile._lock:
        mlx_compile._stats.clear()
    got = mlx_compile.compile_module(model)(x).cpu()
    torch.testing.assert_close(got, want)
    assert any(k.startswith("eager") for k in mlx_compile.compile_stats())


def test_dynamo_backend_for_torch_tensors():
    """backend="mlx" on a program whose tensors are torch's own: the captured graphs run in MLX."""
    mlx_compile.register_dynamo_backend()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 6, requires_grad=True)
    want = model(x)
    want.sum().backward()
    want_grad = x.grad.clone()
    x.grad = None
    with mlx_compile._lock:
        mlx_compile._stats.clear()
    got = torch.compile(model, backend="mlx")(x)
    got.sum().backward()
    assert type(got) is torch.Tensor
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x.grad, want_grad)
    assert mlx_compile.compile_stats().get("forward graphs mx.compile-d", 0) >= 1


PROGRAM = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)).cuda()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(5, 8, device="cuda"), torch.randint(0, 4, (5,), device="cuda")
for _ in range(3):
    opt.zero_grad(); loss = F.cross_entropy(compiled(x), y); loss.backward(); opt.step(); print(repr(loss.item()))
print(list(compiled.state_dict())[0])
"""


def test_torch_compile_in_a_cuda_program_under_torchdevice_run(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    mlx = subprocess.run([sys.executable, "-m", "torchdevice", "run", "--backend", "mlx", str(script)],
                         capture_output=True, text=True, timeout=600, check=True).stdout.split()
    native = subprocess.run([sys.executable, "-c", PROGRAM.replace(".cuda()", "").replace(', device="cuda"', "")],
                            capture_output=True, text=True, timeout=600, check=True).stdout.split()
    assert [float(v) for v in mlx[:3]] == pytest.approx([float(v) for v in native[:3]], rel=1e-4)
    assert mlx[3] == native[3] == "_orig_mod.0.weight"  # state_dict keys as torch's compiled modules have them
