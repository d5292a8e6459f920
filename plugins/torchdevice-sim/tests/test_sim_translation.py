"""CUDA-written code translated onto sim: the program sees CUDA, its tensors are sim tensors.

Each translated result is compared with the same computation written for sim natively (or for
the CPU where sim's numbers must be the CPU's), never with a value recorded from this code.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice.testing import router_sandbox

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
MIB = 1 << 20


# -- devices ----------------------------------------------------------------------------------------


def test_cuda_devices_are_sim_devices(on_sim):
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    x = torch.ones(3, device="cuda:1")
    assert x.device == torch.device("sim", 1) and x.is_cuda
    assert torch.zeros(2).cuda().device.type == "sim"
    assert torch.nn.Linear(2, 2).cuda(1).weight.device == torch.device("sim", 1)
    assert torch.device("cuda", 1).type == "sim"


def test_an_index_beyond_the_sim_devices_raises(on_sim):
    with pytest.raises(torch.AcceleratorError):
        torch.ones(1, device="cuda:2")


def test_a_host_tensor_mixed_in_is_caught_as_on_a_gpu(on_sim):
    weight = torch.ones(4, 4, device="cuda")
    with pytest.raises(RuntimeError, match="same device"):
        weight @ torch.ones(4, 4)
    with pytest.raises(TypeError, match="numpy"):
        weight.numpy()


def test_properties_are_sims(on_sim, sim):
    props = torch.cuda.get_device_properties(1)
    assert props.total_memory == sim.get_device_properties(1).total_memory
    assert torch.cuda.get_device_capability(0) == sim.get_device_capability(0)


# -- memory -----------------------------------------------------------------------------------------


def test_memory_figures_move_exactly_per_device(on_sim, sim):
    before = torch.cuda.memory_allocated(0), torch.cuda.memory_allocated(1)
    x = torch.empty(MIB, device="cuda:1")
    assert torch.cuda.memory_allocated(1) - before[1] == 4 * MIB
    assert torch.cuda.memory_allocated(0) == before[0]
    assert torch.cuda.memory_allocated(1) == sim.memory_allocated(1)
    assert torch.cuda.max_memory_allocated(1) >= torch.cuda.memory_allocated(1)
    del x
    assert torch.cuda.memory_allocated(1) == before[1]


def test_out_of_memory_is_cudas_error_and_the_program_continues(on_sim):
    before = torch.cuda.memory_allocated()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        torch.empty(9 * 1024**3, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() == before
    assert torch.ones(2, device="cuda").sum().item() == 2


# -- streams, events, RNG ---------------------------------------------------------------------------


def test_events_time_queued_work(on_sim, sim):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    sim._sleep(int(sim.get_device_properties(0).clock_rate * 150))
    t0 = time.perf_counter()
    end.record()
    assert time.perf_counter() - t0 < 0.1 and not end.query()
    torch.cuda.synchronize()
    assert end.query() and 140 <= start.elapsed_time(end) < 2000


def test_cuda_sleep_makes_pending_work_as_on_a_gpu(on_sim, sim):
    cycles = int(sim.get_device_properties(0).clock_rate * 200)  # 200 ms at sim's clock
    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    assert time.perf_counter() - t0 < 0.1 and not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert torch.cuda.current_stream().query() and time.perf_counter() - t0 >= 0.19


def test_streams_are_sims(on_sim):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.ones(5, device="cuda") * 2
        assert torch.cuda.current_stream() == side
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(y.cpu(), torch.full((5,), 2.0)) and side.device_index == 0


def test_per_device_rng_is_independent_and_reproducible(on_sim):
    torch.cuda.manual_seed_all(1234)
    first = torch.randn(3, device="cuda:1")
    with torch.cuda.device(0):
        torch.cuda.manual_seed(99)
    second = torch.randn(3, device="cuda:1")
    torch.cuda.manual_seed_all(1234)
    assert torch.equal(torch.randn(3, device="cuda:1").cpu(), first.cpu())
    assert torch.equal(torch.randn(3, device="cuda:1").cpu(), second.cpu())
    state = torch.cuda.get_rng_state(1)
    assert state.dtype == torch.uint8 and state.shape == (16,)  # CUDA's Philox (seed, offset)
    assert int(state[:8].view(torch.int64)) == 1234 and int(state[8:].view(torch.int64)) == 8
    draw = torch.rand(4, device="cuda:1")
    torch.cuda.set_rng_state(state, 1)
    assert torch.equal(torch.rand(4, device="cuda:1").cpu(), draw.cpu())


def test_group_norm_on_a_channels_last_cuda_tensor_gives_the_cpus_numbers(on_sim):
    """diffusers' UNet: group_norm of a channels_last activation (the op's decomposition refused it on sim)."""
    x = torch.randn(2, 8, 4, 4, generator=torch.Generator().manual_seed(0))
    out = torch.nn.functional.group_norm(x.cuda().to(memory_format=torch.channels_last), 4)
    assert out.is_cuda and out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out.cpu(), torch.nn.functional.group_norm(x.to(memory_format=torch.channels_last), 4))


# -- AMP and checkpoints --------------------------------------------------------------------------------


def test_autocast_cuda_gives_half_precision_matmuls_on_sim(on_sim):
    a, b = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        half = a @ b
    with torch.autocast("cuda", dtype=torch.bfloat16):
        brain = a @ b
    assert half.device.type == "sim" and half.dtype == torch.float16 and brain.dtype == torch.bfloat16
    assert torch.equal(half.cpu(), a.cpu().half() @ b.cpu().half())


def test_a_checkpoint_loads_onto_cuda_1(on_sim, tmp_path):
    path = tmp_path / "ck.pt"
    torch.save({"w": torch.arange(4.0, device="cuda")}, path)
    assert torch.load(path, map_location="cuda:1")["w"].device == torch.device("sim", 1)
    code = f"import torch; print(torch.load({str(path)!r}, map_location='cpu')['w'].sum().item())"
    native = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_plain_env())
    assert native.returncode == 0, native.stderr
    assert float(native.stdout) == 6.0  # loads with plain torch: no torchdevice or sim inside


def _plain_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}


# -- whole programs --------------------------------------------------------------------------------


def _run(args: list[str], out: Path, env: dict | None = None) -> dict:
    done = subprocess.run(args + ["--out", str(out)], capture_output=True, text=True, timeout=600,
                          env={**_plain_env(), **(env or {})}, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def test_train_cuda_translated_onto_sim_equals_the_native_sim_port(tmp_path):
    translated = _run([sys.executable, "-m", "torchdevice", "run", "--backend", "sim", str(EXAMPLES / "train_cuda.py")],
                      tmp_path / "translated.json")
    native = _run([sys.executable, str(EXAMPLES / "ported" / "train_sim.py")], tmp_path / "native.json")
    translated.pop("train_ms")
    native.pop("train_ms")
    assert translated == native
    assert translated["checkpoint_on"] == "sim"


def test_train_cuda_in_full_precision_gives_the_cpu_backends_numbers(tmp_path):
    """Without autocast and device draws (where sim, as a GPU, differs from the CPU by design:
    CUDA's autocast lists and float16, its own generator) every number equals the CPU backend's."""
    source = (EXAMPLES / "train_cuda.py").read_text()
    program = tmp_path / "train_fp32.py"
    program.write_text(source.replace('torch.autocast(device_type="cuda")', 'torch.autocast(device_type="cuda", enabled=False)')
                       .replace("nn.Dropout(0.1)", "nn.Dropout(0.0)"))
    results = {}
    for backend in ("sim", "cpu"):
        results[backend] = _run([sys.executable, "-m", "torchdevice", "run", "--backend", backend, str(program)],
                                tmp_path / f"{backend}.json")
    for key in ("losses", "eval_loss", "accuracy", "restored_eval_loss", "param_sum", "grad_scale"):
        assert results["sim"][key] == results["cpu"][key], key


def _without_device_draws(source: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    return source


@pytest.mark.parametrize("name, edits", [
    ("inference_cuda.py", [  # the batch-norm statistics drawn on the host instead of the device
        ("bn.running_mean.uniform_(-0.1, 0.1)", "bn.running_mean.copy_(torch.empty(bn.running_mean.shape).uniform_(-0.1, 0.1))"),
        ("bn.running_var.uniform_(0.5, 1.5)", "bn.running_var.copy_(torch.empty(bn.running_var.shape).uniform_(0.5, 1.5))"),
    ]),
    ("streams_cuda.py", [
        ('torch.randn(n, n, device="cuda")', "torch.randn(n, n).cuda()"),
        ('torch.randn(args.chunks, 64, n, device="cuda")', "torch.randn(args.chunks, 64, n).cuda()"),
    ]),
])
def test_examples_give_the_cpu_backends_numbers_on_sim(tmp_path, name, edits):
    """The examples translated onto sim and onto the CPU backend, with their device draws made on the
    host (sim's generator is its own, as a GPU's): every number equal, float16 autocast included."""
    program = tmp_path / name
    program.write_text(_without_device_draws((EXAMPLES / name).read_text(), edits))
    results = {backend: _run([sys.executable, "-m", "torchdevice", "run", "--backend", backend, str(program)],
                             tmp_path / f"{backend}.json") for backend in ("sim", "cpu")}
    skip = {"elapsed_ms", "middle_ms", "images_per_s", "device_name", "device_total_memory", "peak_memory_bytes"}
    for key, value in results["cpu"].items():
        if key not in skip:
            assert results["sim"][key] == value, key


# -- device arguments: the core suite's table of inputs, on an indexed device type ------------------


def _sim_outcome(call, value) -> str:
    if isinstance(value, type) and issubclass(value, Exception):
        return value.__name__
    try:
        result = call(value)
    except Exception as error:
        return next((c.__name__ for c in (TypeError, ValueError, RuntimeError) if isinstance(error, c)), type(error).__name__)
    return str(result) if isinstance(result, torch.device) else repr(result)


@pytest.mark.filterwarnings("ignore:Complex modules")
def test_device_arguments_behave_as_native_sim_code_with_indices_kept(synced):
    """The core suite's table (tests/devices/test_arguments.py: strings, ordinals, numpy and enum
    values, real devices, junk) through every device-taking call, translated onto sim and compared
    with native sim code, device index included."""
    from devices.test_arguments import CALLS, _as_native, _inputs

    inputs = _inputs()
    native = {(i, name): _sim_outcome(call, _as_native(value, 2, "sim", indexed=True))
              for i, value in enumerate(inputs) for name, call in CALLS.items()}
    with router_sandbox(), torchdevice.use("sim"), torchdevice.patched():
        translated = {(i, name): _sim_outcome(call, value) for i, value in enumerate(inputs) for name, call in CALLS.items()}
    differ = {(repr(inputs[i]), name): (native[i, name], translated[i, name]) for i, name in native
              if native[i, name] != translated[i, name]}
    assert not differ
    assert any(v == "sim:1" for v in translated.values())


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied, as language models tie input and output embeddings


def test_natively_moving_a_module_to_a_privateuse1_device_unties_shared_parameters(synced):
    """torch's own behaviour, which translation must not pass on (next test): onto a PrivateUse1 device
    a parameter is replaced by a new one per module, since torch moves in place only between device
    types it deems shallow-copy compatible (CPU, CUDA, MPS, HIP, XPU, HPU, MTIA)."""
    model = _Tied().to("sim")
    assert model.head.weight is not model.embed.weight


@pytest.mark.parametrize("move", ["cuda", "to"])
def test_translated_module_moves_keep_shared_parameters_shared(on_sim, move):
    torch.manual_seed(0)
    model = _Tied()
    model = model.cuda() if move == "cuda" else model.to("cuda:1")
    assert model.head.weight is model.embed.weight and model.head.weight.device.type == "sim"
    model.head(model.embed(torch.arange(3, device=model.head.weight.device))).sum().backward()
    torch.manual_seed(0)
    reference = _Tied()
    reference.head(reference.embed(torch.arange(3))).sum().backward()
    assert torch.equal(model.embed.weight.grad.cpu(), reference.embed.weight.grad)


# -- visible devices ------------------------------------------------------------------------------------


def _sees(env: dict[str, str], native: bool = False) -> dict:
    """What a program sees on sim under ``env``: translated (CUDA's view) or natively (sim's)."""
    program = ("import json, torch, torchdevice_sim; torchdevice_sim.load(); n = torch.sim.device_count(); "
               "print(json.dumps({'count': n, 'uuids': [torch.sim.get_device_properties(i).uuid for i in range(n)]}))"
               if native else str(ROOT / "plugins/torchdevice-sim/tests/programs/visible_cuda.py"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHDEVICE_BACKEND", "CUDA_VISIBLE", "TORCHDEVICE_SIM_"))}
    args = ["-c", program] if native else [program]
    translated = {} if native else {"TORCHDEVICE_BACKEND": "sim"}
    done = subprocess.run([sys.executable, *args], env={**base, **translated, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cuda_visible_devices_selects_and_reorders_sims_devices_as_cudas_driver(sim):
    every = _sees({})
    assert every["count"] == 2 and every["available"]
    first, second = every["uuids"]
    swapped = _sees({"CUDA_VISIBLE_DEVICES": "1,0"})
    assert swapped["uuids"] == [second, first] and swapped["devices"] == ["sim:0", "sim:1"]
    assert swapped["total"] == every["total"]
    assert _sees({"CUDA_VISIBLE_DEVICES": ""}) == {"available": False, "count": 0, "uuids": [], "total": [], "devices": []}
    three = _sees({"CUDA_VISIBLE_DEVICES": "2,0", "TORCHDEVICE_SIM_DEVICES": "3"})
    assert three["count"] == 2 and three["uuids"][1] == first and three["uuids"][0] not in every["uuids"]
    # natively sim reads its own variable: CUDA_VISIBLE_DEVICES hides the host's GPUs, not sim's
    native = _sees({"CUDA_VISIBLE_DEVICES": "", "TORCHDEVICE_SIM_VISIBLE_DEVICES": "1"}, native=True)
    assert native == {"count": 1, "uuids": [second]}


def test_a_bad_visible_devices_value_is_an_error_naming_it(sim):
    program = str(ROOT / "plugins/torchdevice-sim/tests/programs/visible_cuda.py")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHDEVICE_BACKEND", "CUDA_VISIBLE", "TORCHDEVICE_SIM_"))}
    done = subprocess.run([sys.executable, program], env={**base, "TORCHDEVICE_BACKEND": "sim", "CUDA_VISIBLE_DEVICES": "0,5"},
                          capture_output=True, text=True, timeout=240)
    # zero-code activation reports the unavailable backend it was asked for, and the program runs untranslated
    assert "CUDA_VISIBLE_DEVICES='0,5' is not valid" in done.stderr
    assert "0 to 1, TORCHDEVICE_SIM_DEVICES" in done.stderr


def test_cuda_data_parallel_runs_over_both_sim_devices(on_sim, data_parallel_check):
    """HF Trainer wraps the model in nn.DataParallel when device_count() > 1: scatter, replicate, gather."""
    data_parallel_check("cuda")


def test_sims_own_bookkeeping_does_not_reenter_translation(on_sim, monkeypatch):
    """sim computes an op's outputs on the meta device, allocates them and stages host buffers itself: none of that
    goes through the translated factories (torch.empty, torch.empty_strided), which are the program's, not sim's.
    With the C++ fast path off, so that every op takes the Python fallback, which does this work."""
    from torchdevice_sim import _extension

    calls = []
    for name in ("empty", "empty_strided"):
        translated = getattr(torch, name)

        def spy(*args, _name=name, _fn=translated, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if "torchdevice_sim" in caller:  # sim's code (torch's own meta kernels may make meta tensors this way)
                calls.append((_name, kwargs.get("device"), caller))
            return _fn(*args, **kwargs)

        monkeypatch.setattr(torch, name, spy)
    was = _extension.load().set_fast(False)
    try:
        x = torch.arange(6.0).reshape(2, 3).to("cuda")  # a copy from the host, then device ops
        y = (x * 2 + 1).t().contiguous()
        calls.clear()
        z = (y + y).sum(0)
    finally:
        _extension.load().set_fast(was)
    assert z.device.type == "sim" and torch.equal(z.cpu(), ((x * 2 + 1).t() * 2).sum(0).cpu())
    assert calls == []
