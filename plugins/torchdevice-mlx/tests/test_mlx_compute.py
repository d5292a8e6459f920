"""MLX as a compute backend: CUDA-written training runs with MLX-backed tensors (real mlx[cpu]).

Every workload is run twice from the same seed -- natively on torch CPU and
translated (``device="cuda"``) with the mlx backend -- and the losses compared.
"""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchdevice
from torchdevice.testing import router_sandbox
from torchdevice_mlx.conversion import fallback_counts, reset_fallback_counts
from torchdevice_mlx.tensor import MLXTensor

MIB = 1 << 20


@pytest.fixture
def mlx_cuda():
    """Translation on with the mlx backend: code written for ``cuda`` runs on MLX."""
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        yield


class _Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(0.1))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = [z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, heads: int = 4, ctx: int = 16):
        super().__init__()
        self.vocab = vocab
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(_Block(d, heads), _Block(d, heads))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.wte(idx) + self.wpe(pos))))


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Dropout(0.1), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(8 * 2 * 2, 10))


def _train(make, inputs, classes, device: str, steps: int = 4, sgd: bool = False) -> list[float]:
    torch.manual_seed(0)
    model = make().to(device)
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if sgd
           else torch.optim.AdamW(model.parameters(), lr=1e-2))
    x = (torch.randn(*inputs, device=device) if isinstance(inputs, tuple)
         else torch.randint(0, 50, inputs[0], device=device))
    y = torch.randint(0, classes, (x.shape[0],) if isinstance(inputs, tuple) else inputs[0], device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


WORKLOADS = {
    "mlp": (_mlp, (8, 16), 4),
    "cnn": (_cnn, (4, 3, 8, 8), 10),
    "gpt": (TinyGPT, [(4, 16)], 50),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_training_matches_native_cpu(name):
    make, inputs, classes = WORKLOADS[name]
    native = _train(make, inputs, classes, "cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _train(make, inputs, classes, "cuda")
    assert translated == pytest.approx(native, rel=1e-3)
    assert native[-1] < native[0]  # it trained


def test_sgd_momentum_matches_native_cpu():
    native = _train(_mlp, (8, 16), 4, "cpu", sgd=True)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _train(_mlp, (8, 16), 4, "cuda", sgd=True)
    assert translated == pytest.approx(native, rel=1e-3)


def test_source_devices_give_mlx_tensors(mlx_cuda):
    assert isinstance(torch.zeros(3, device="cuda"), MLXTensor)
    assert isinstance(torch.ones(3, device=torch.device("cuda:0")), MLXTensor)
    assert isinstance(torch.arange(3).cuda(), MLXTensor)
    assert isinstance(torch.arange(3).to("cuda"), MLXTensor)
    model = nn.BatchNorm1d(3).cuda()
    assert all(isinstance(t, MLXTensor) for t in [*model.parameters(), *model.buffers()])
    assert isinstance(next(model.parameters()), nn.Parameter)
    # the program's own host tensors stay torch's
    assert type(torch.zeros(3, device="cpu")) is torch.Tensor
    assert type(torch.zeros(3, device=torch.device("cpu"))) is torch.Tensor


def test_data_comes_back(mlx_cuda):
    x = torch.arange(6, dtype=torch.float32, device="cuda").view(2, 3) * 2
    host = x.cpu()
    assert type(host) is torch.Tensor and host.tolist() == [[0, 2, 4], [6, 8, 10]]
    assert x.tolist() == [[0, 2, 4], [6, 8, 10]]
    assert x.sum().item() == 30
    assert x.numpy().tolist() == [[0, 2, 4], [6, 8, 10]]
    assert "8." in repr(x)
    buffer = io.BytesIO()
    torch.save({"x": x}, buffer)
    buffer.seek(0)
    assert torch.load(buffer)["x"].tolist() == x.tolist()


def _printed(device):
    torch.manual_seed(0)
    m = nn.Linear(3, 2).to(device)
    x = torch.randn(4, 3, device=device)
    loss = m(x).pow(2).mean()
    return [str(loss), repr(m.bias), str(m.weight * 2), str(x.half()), str(x.long()), str(x > 0),
            str(torch.randn(200, 300, device=device).requires_grad_()), str(torch.zeros(0, 3, device=device)),
            f"{loss:.4f}", f"{x.sum():e}", f"{loss.detach():>10.3f}", f"{x}"]


def test_printing_and_formatting_match_native_cpu():
    # a training loop's print(loss) / f"{loss:.4f}" print what the program's CPU run prints
    native = _printed("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _printed("cuda")
    assert translated == native


def test_cpu_leaves_mlx_outside_translation_too():
    x = MLXTensor.from_torch(torch.arange(3.0))
    assert type(x.cpu()) is torch.Tensor and type(x.to("cpu")) is torch.Tensor
    assert isinstance(x.to(torch.float16), MLXTensor) and x.to(torch.float16).dtype == torch.float16


def test_same_seed_same_numbers_as_torch_cpu(mlx_cuda):
    torch.manual_seed(7)
    translated = torch.randn(5, device="cuda").tolist()
    dropped = F.dropout(torch.ones(20, device="cuda"), 0.5).tolist()
    torch.manual_seed(7)
    assert translated == torch.randn(5).tolist()
    assert dropped == F.dropout(torch.ones(20), 0.5).tolist()


def test_views_alias_their_base(mlx_cuda):
    base = torch.zeros(3, 4, device="cuda")
    row = base[1]
    col = base.t()[2]
    row.add_(1)  # write through a select view
    base[:, 0] = 5  # index assignment on the base
    col.fill_(7)  # write through transpose + select
    expected = torch.zeros(3, 4)
    expected[1] += 1
    expected[:, 0] = 5
    expected.t()[2].fill_(7)
    assert base.tolist() == expected.tolist()
    assert row.tolist() == expected[1].tolist()  # views see writes to the base
    flat = base.view(-1)
    flat.mul_(2)
    assert base.tolist() == (expected * 2).tolist()
    base.copy_(torch.ones(3, 4))
    assert flat.tolist() == [1.0] * 12


def test_allocation_moves_memory_allocated(mlx_cuda):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    x = torch.zeros(64 * MIB // 4, device="cuda")
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before >= 64 * MIB
    del x


def test_fallbacks_are_counted(mlx_cuda):
    reset_fallback_counts()
    x = torch.randn(4, 4, device="cuda")
    torch.linalg.qr(x)  # no MLX lowering
    counts = fallback_counts()
    assert any("linalg_qr" in name for name in counts), counts
    reset_fallback_counts()
    (x + x * 2).sum().item()
    assert fallback_counts() == {}  # lowered ops do not fall back


def _train_autocast(device: str, dtype: torch.dtype = torch.bfloat16) -> tuple[list[float], torch.dtype]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16, device=device), torch.randint(0, 4, (8,), device=device)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        with torch.autocast(device, dtype=dtype):
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, out.dtype


def test_bf16_autocast_computes_in_bf16_and_matches_native():
    native, native_dtype = _train_autocast("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated, dtype = _train_autocast("cuda")
    assert dtype == native_dtype == torch.bfloat16
    # bf16 has 8 bits of mantissa: MLX and torch accumulate in different orders (measured 3e-4)
    assert translated == pytest.approx(native, rel=2e-3)


def test_fp16_autocast_computes_in_fp16_and_matches_native():
    native, native_dtype = _train_autocast("cpu", torch.float16)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated, dtype = _train_autocast("cuda", torch.float16)
    assert dtype == native_dtype == torch.float16
    # float16 keeps 11 bits of mantissa: a tighter match than bf16's
    assert translated == pytest.approx(native, rel=1e-3)


CUDA_PROGRAM = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(4, 3, 8, 8).cuda(), torch.randint(0, 10, (4,)).cuda()
for _ in range(3):
    opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()
    print(repr(loss.item()))
before = torch.cuda.memory_allocated()
big = torch.empty(16 * 1024 * 1024, device="cuda")
torch.cuda.synchronize()
print(torch.cuda.memory_allocated() - before, type(x).__name__)
"""


def test_torchdevice_run_backend_mlx_on_a_cuda_program(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(CUDA_PROGRAM)
    done = subprocess.run([sys.executable, "-m", "torchdevice", "run", "--backend", "mlx", str(script)],
                          capture_output=True, text=True, timeout=300, check=True)
    *losses, last = done.stdout.split("\n")[:-1]
    grew, kind = last.split()
    assert kind == "MLXTensor" and int(grew) >= 64 * MIB
    native = subprocess.run([sys.executable, "-c", CUDA_PROGRAM.replace(".cuda()", "").replace(
        'device="cuda"', 'device="cpu"').split("before =")[0]], capture_output=True, text=True, timeout=300,
        check=True)
    assert [float(v) for v in losses] == pytest.approx([float(v) for v in native.stdout.split()], rel=1e-3)


def _train_opt(device: str, make_opt, steps: int = 4) -> list[float]:
    torch.manual_seed(0)
    model = _mlp().to(device)
    opt = make_opt(model.parameters())
    x, y = torch.randn(8, 16, device=device), torch.randint(0, 4, (8,), device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


OPTIMIZERS = {
    "adamw-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
    "adamw-fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True),
    "adam-fused": lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True),
    "sgd-foreach": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, foreach=True),
    "sgd-fused": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, fused=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_foreach_and_fused_optimizers_match_native_cpu(name):
    """foreach=True / fused=True run torch's multi-tensor host kernels on MLX tensors: every mutated
    tensor list is written back, and strided MLX arrays reach the kernels in torch's layout (both were
    silently wrong: 30% off after four steps)."""
    native = _train_opt("cpu", OPTIMIZERS[name])
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _train_opt("cuda", OPTIMIZERS[name])
    assert translated == pytest.approx(native, rel=1e-5)


def _view_writes(device: str) -> dict:
    x = torch.arange(20.0, device=device).reshape(4, 5)
    out = {}
    a = x.clone()
    a.diagonal().zero_()
    out["diagonal"] = a
    b = x.clone()
    b.as_strided((2, 2), (5, 1), 1).fill_(-1.0)
    out["as_strided"] = b
    c = x.clone()
    c.t()[1].add_(5)
    out["t-select"] = c
    d = x.clone()
    d.unfold(1, 2, 2)[..., 0].mul_(10)
    out["unfold"] = d
    e = x.clone()
    torch.nn.init.zeros_(e.narrow(0, 1, 2))
    out["narrow"] = e
    return {k: v.cpu() for k, v in out.items()}


def test_writes_through_every_view_op_reach_the_base():
    """An in-place write through any view op (diagonal, as_strided, unfold, narrow ...) lands in the
    base tensor, as in torch; diagonal().zero_() used to write into a silent copy."""
    native = _view_writes("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _view_writes("cuda")
    for name in native:
        assert torch.equal(native[name], translated[name]), name


def test_fallbacks_are_listed_by_the_run_report(tmp_path):
    """`torchdevice run --backend mlx --report` lists the ATen ops that ran on the host, with counts."""
    import json
    import subprocess
    import sys

    script = tmp_path / "qr.py"  # QR decomposition has no MLX lowering: it runs on the host
    script.write_text("import torch\n"
                      "x = torch.randn(4, 4, device='cuda')\n"
                      "for _ in range(3):\n"
                      "    q, r = torch.linalg.qr(x)\n"
                      "print(float(r.sum()))\n")
    report = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "torchdevice", "run", "--backend", "mlx", "--report", str(report),
                    str(script)], capture_output=True, text=True, timeout=300, check=True)
    sections = json.loads(report.read_text())["sections"]
    (name, counts), = sections.items()
    assert name.startswith("mlx") and counts.get("aten.linalg_qr.default", 0) >= 3, sections
    md = tmp_path / "r.md"
    subprocess.run([sys.executable, "-m", "torchdevice", "run", "--backend", "mlx", "--report", str(md),
                    str(script)], capture_output=True, text=True, timeout=300, check=True)
    assert "`aten.linalg_qr.default` | 3 |" in md.read_text()


def test_module_move_keeps_tied_weights_and_parameter_attributes(mlx_cuda):
    """nanoGPT ties wte.weight to lm_head.weight: the move must keep one parameter (it made two, and the
    GPT's losses drifted from native after the first step)."""
    emb, head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    emb.weight = head.weight
    head.weight.no_decay = True
    model = nn.ModuleDict({"emb": emb, "head": head}).cuda()
    assert model["emb"].weight is model["head"].weight
    assert isinstance(model["emb"].weight, MLXTensor) and model["emb"].weight.no_decay
    assert len(list(model.parameters())) == 1


def test_to_with_copy_returns_a_copy(mlx_cuda):
    x = torch.ones(3, device="cuda")
    for y in (x.to(torch.float32, copy=True), x.to(dtype=torch.float32, copy=True), x.to(torch.float32, False, True)):
        assert y is not x and isinstance(y, MLXTensor)
        y.add_(1)
    assert x.tolist() == [1.0, 1.0, 1.0]


def test_lazy_writes_are_counted_by_memory_allocated(mlx_cuda):
    """MLX computes lazily; torch.cuda.memory_allocated() evaluates pending tensors, as CUDA counts a
    tensor once its kernel is launched (the fill used to be unevaluated: the figure moved by 4 bytes)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    x = torch.empty(64 * MIB // 4, device="cuda")
    x.fill_(2.0)
    y = x * 3
    assert torch.cuda.memory_allocated() - before >= 2 * 64 * MIB
    del x, y


def _float64_run(device):
    torch.manual_seed(0)
    drawn = torch.empty(5, device=device, dtype=torch.float64).uniform_(-1, 1)
    after = torch.randn(4, device=device)  # the generator advanced as natively
    third = torch.tensor([1 / 3], device=device, dtype=torch.float64)
    return drawn.dtype, third.dtype, drawn.tolist(), after.tolist(), third.item(), (third * 3 - 1).item()


def test_float64_stays_float64_and_draws_as_natively():
    native = _float64_run("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _float64_run("cuda")
    assert translated == native


def _converted_module(device):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 2)).to(device)
    model.to(torch.bfloat16)  # Module._apply assigns param.data
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    half = nn.Linear(3, 3).to(device).half()
    back = nn.Linear(3, 3).to(device).double().float()
    return ([p.dtype for p in model.parameters()], model(x).float().tolist(), half.weight.dtype,
            half(torch.ones(1, 3, device=device, dtype=torch.float16)).dtype, back.weight.dtype, back.weight.tolist())


def test_module_dtype_conversion_converts_the_mlx_data():
    # Module.to(dtype)/.half() assign param.data: the MLX array must follow the tensor's new dtype
    native = _converted_module("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _converted_module("cuda")
    assert translated == native
