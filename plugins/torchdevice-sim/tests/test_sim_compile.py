"""torch.compile on sim: inductor's CPU C++ kernels on sim memory, ordered with sim's queues, against eager."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

# inductor's vectorized C++ kernels (gelu's erf, fused reductions) round differently from the eager CPU kernels
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.b(F.gelu(self.a(x))).softmax(-1)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _grads(device, compiled):
    torch.manual_seed(0)
    model = Net().to(device)
    fn = torch.compile(model) if compiled else model
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).to(device)
    out = fn(x)
    out.pow(2).sum().backward()
    return out.detach().cpu(), [p.grad.cpu() for p in model.parameters()]


@pytest.mark.parametrize("index", [0, 1])
def test_compiled_model_matches_eager(sim, index):
    device = f"sim:{index}"
    out, grads = _grads(device, compiled=True)
    eager_out, eager_grads = _grads(device, compiled=False)
    torch.testing.assert_close(out, eager_out, **TOLERANCE)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got, want, **TOLERANCE)


def test_generated_kernels_run_after_queued_work(sim):
    """A kernel reads sim memory directly: it must see work still queued on the stream when the graph is called
    (without the wrapper's synchronize it reads the zeros: 1.0 instead of 3.0)."""
    from torch._inductor.utils import run_and_get_code

    fn = torch.compile(lambda t: t * 2 + 1)
    _, (code,) = run_and_get_code(fn, torch.zeros(4096, device="sim:0"))  # compiled now, not while work is queued
    assert "cpp_fused" in code and "torch.sim.synchronize(0)" in code
    x = torch.zeros(4096, device="sim:0")
    sim._sleep(int(0.2 * sim.get_device_properties(0).clock_rate * 1000))  # 0.2 s of queued work ahead of the add
    x.add_(1)
    result = fn(x)
    assert result.device == torch.device("sim:0")
    assert torch.equal(result.cpu(), torch.full((4096,), 3.0))


def test_translated_cuda_compile_program_matches_cpu(runner):
    """A CUDA-written compiled training loop, translated onto sim and onto the CPU backend: the same losses."""
    program = str(runner.programs / "compile_cuda.py")
    on_sim = json.loads(runner.run(["-m", "torchdevice", "run", program], backend="sim").stdout.strip().splitlines()[-1])
    on_cpu = json.loads(runner.run(["-m", "torchdevice", "run", program], backend="cpu").stdout.strip().splitlines()[-1])
    assert on_sim["device"] == "sim:0" and on_cpu["device"] == "cpu"
    torch.testing.assert_close(torch.tensor(on_sim["losses"]), torch.tensor(on_cpu["losses"]), **TOLERANCE)
    assert on_sim["losses"][-1] < on_sim["losses"][0]


def test_compiled_flex_attention_runs_the_cpus_kernel_on_sim(sim):
    """torch accepts FlexAttention on CUDA, CPU, XPU, HPU and MPS tensors only: sim, whose kernels are the CPU's,
    runs the CPU's compiled C++ kernel on its memory, with the CPU's numbers bit for bit (and its score_mod);
    what the CPU refuses, the backward, sim refuses, naming itself."""
    from torch.nn.attention.flex_attention import flex_attention

    def bias(score, b, h, q, k):
        return score + (q - k) * 0.1

    q, k, v = (torch.randn(1, 2, 16, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    on_cpu = torch.compile(flex_attention)(q, k, v, score_mod=bias)
    torch._dynamo.reset()
    on_sim = torch.compile(flex_attention)(q.to("sim"), k.to("sim"), v.to("sim"), score_mod=bias)
    assert on_sim.device.type == "sim"
    assert torch.equal(on_sim.cpu(), on_cpu)
    torch.testing.assert_close(on_cpu, F.scaled_dot_product_attention(q, k, v, attn_mask=_bias_mask(bias)))
    with pytest.raises(NotImplementedError, match="backward on sim"):
        flex_attention(q.to("sim").requires_grad_(), k.to("sim"), v.to("sim"))


def _bias_mask(bias) -> torch.Tensor:
    idx = torch.arange(16)
    return bias(torch.zeros(16, 16), 0, 0, idx[:, None], idx[None, :])
