"""peft and transformers' safetensors loaders, translated: ``peft_lora.py`` (a CUDA-written LoRA
program: train on ``cuda``, ``save_pretrained``, ``PeftModel.from_pretrained`` onto ``cuda``, and
``from_pretrained(..., device_map="cuda")`` of a saved safetensors checkpoint) through ``torchdevice
run``, compared with its hand port (``--device cpu``) run natively.

Skipped when peft or transformers is not installed, unless ``TORCHDEVICE_FRAMEWORK_TESTS=1`` (``tox -e
frameworks``, which installs them): then a missing one fails. The program runs on cpu (against the port),
sim, and, loading only, mlx. No hub access: the model is built from a
config (``HF_HUB_OFFLINE=1`` makes any attempt fail instead of waiting on the network).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import run_command, run_concurrently

HERE = Path(__file__).parent
PROGRAM = HERE / "peft_lora.py"
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def need(module: str):
    if os.environ.get("TORCHDEVICE_FRAMEWORK_TESTS") == "1":
        return __import__(module)
    return pytest.importorskip(module)


def last_json(result) -> dict:
    assert result.returncode == 0, str(result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, str(result)
    return json.loads(lines[-1])


def translated(backend: str, *args: str):
    return run_command([sys.executable, "-m", "torchdevice", "run", "--backend", backend, PROGRAM, *args],
                       env=OFFLINE, timeout=300)


def native(*args: str):
    return run_command([sys.executable, PROGRAM, "--device", "cpu", *args], env=OFFLINE, timeout=300)


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    need("transformers")
    need("peft")
    root = tmp_path_factory.mktemp("peft")
    runs = run_concurrently({"translated": (translated, ("cpu", "--out", str(root / "translated")), {}),
                             "native": (native, ("--out", str(root / "native")), {})})
    return root, last_json(runs["translated"]), last_json(runs["native"])


def test_lora_trained_saved_and_reloaded_on_cuda_translated_matches_the_cpu_port(cpu_runs):
    _, run, port = cpu_runs
    assert run["cuda_available"] and not port["cuda_available"]  # the program took its CUDA path
    # transformers' from_pretrained(device_map="cuda") of the safetensors checkpoint: on the target, equal
    assert run["base_reload_is_cuda"] and run["base_reload_equal"]
    # PeftModel.from_pretrained onto cuda, named and inferred by peft: on the target, the trained outputs
    assert run["lora_is_cuda"] and run["reloaded_equal"] and run["inferred_equal"]
    assert run["inferred_devices"] == run["lora_devices"] == ["cpu"]  # the target's real device
    # the same numbers as the port: the CPU's kernels in float32 on both sides
    for key in ("losses", "logits", "logits_sum", "lora_sums", "adapter_files"):
        assert run[key] == port[key], key
    assert port["reloaded_equal"] and port["inferred_equal"]


def test_the_adapter_saved_translated_is_the_adapter_saved_natively(cpu_runs):
    """What the translated run wrote loads with plain safetensors, without torchdevice, and holds the
    port's tensors; the base checkpoint too."""
    from safetensors.torch import load_file

    root, _, _ = cpu_runs
    for name in ("adapter/adapter_model.safetensors", "base/model.safetensors"):
        ours, theirs = load_file(root / "translated" / name), load_file(root / "native" / name)
        assert ours.keys() == theirs.keys() and ours
        for key in ours:
            assert ours[key].device.type == "cpu"
            assert ours[key].equal(theirs[key]), (name, key)


def test_a_natively_saved_adapter_loads_onto_mlx_translated(cpu_runs):
    """``from_pretrained(device_map="cuda")`` and ``PeftModel.from_pretrained`` (device inferred by peft)
    onto MLX: the tensors are MLX's, the outputs the CPU port's within float32 kernel differences.
    (Saving from MLX is not covered here.)"""
    pytest.importorskip("torchdevice_mlx")
    pytest.importorskip("mlx.core")
    root, _, port = cpu_runs
    run = last_json(translated("mlx", "--out", str(root / "native"), "--load-only"))
    # the reference: the port's outputs from its own reload of what it saved (the same seeded ids; the reload is
    # the trained model: the port's reloaded_equal and inferred_equal, asserted above), no second native process
    assert run["base_is_cuda"] and run["lora_is_cuda"]
    assert run["logits_sum"] == pytest.approx(port["logits_sum"], abs=1e-4)
    flat = [x for row in run["logits"] for x in row]
    assert flat == pytest.approx([x for row in port["logits"] for x in row], abs=1e-5)


def native_on_sim(*args: str):
    """The port to sim: the program with ``--device sim``, sim loaded as torch's PrivateUse1 device, no translation;
    training only (safetensors, which the reloads use, knows no device named sim)."""
    code = ("import runpy, sys, torchdevice_sim; torchdevice_sim.load(); "
            f"sys.argv = [{str(PROGRAM)!r}, *sys.argv[1:]]; runpy.run_path({str(PROGRAM)!r}, run_name='__main__')")
    return run_command([sys.executable, "-c", code, "--device", "sim", "--train-only", *args], env=OFFLINE, timeout=300)


def test_lora_trained_saved_and_reloaded_on_sim_translated(cpu_runs, tmp_path):
    """The same program on sim, the simulated GPU (a device type of its own: the reloaded tensors are on
    ``sim:0``): the reloads give the trained outputs, which are the port to sim's, run natively, exactly.
    Not the CPU port's: the token ids and LoRA's Gaussian init are drawn on the device, from sim's own
    (CUDA-format) generator, as a GPU's are from CUDA's."""
    pytest.importorskip("torchdevice_sim")
    runs = run_concurrently({"translated": (translated, ("sim", "--out", str(tmp_path / "sim")), {}),
                             "native": (native_on_sim, ("--out", str(tmp_path / "native-sim")), {})})
    result = runs["translated"]
    if result.returncode != 0 and "is not available" in result.stderr:
        pytest.skip(f"sim cannot run here: {result.stderr.strip().splitlines()[-1]}")
    run, port = last_json(result), last_json(runs["native"])
    assert run["cuda_available"] and run["base_reload_is_cuda"] and run["base_reload_equal"]
    assert run["lora_is_cuda"] and run["reloaded_equal"] and run["inferred_equal"]
    assert run["lora_devices"] == run["inferred_devices"] == ["sim:0"]
    for key in ("losses", "logits", "logits_sum"):
        assert run[key] == port[key], key
