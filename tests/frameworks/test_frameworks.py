"""CUDA-written framework programs run unmodified through ``python -m torchdevice run`` on the CPU
backend, compared with native CPU runs of the same scripts where one exists.

Each framework's tests skip when it is not installed; ``tox -e frameworks`` installs
lightning==2.6.6, accelerate==1.15.0 and transformers==5.23.0 (torch 2.13.0) and runs this file.
The scripts are in this directory; each writes what it saw as JSON. Every run is a subprocess
(about 4-5 s each on the reference machine, 8-10 s for two DDP ranks).

Two logical devices for ``devices=2`` come from ``TORCHDEVICE_DEVICE_COUNT=2`` (what
``torchdevice run --devices 2`` exports); one case keeps ``LOCAL_WORLD_SIZE=2``, which launchers set.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import run_command

HERE = Path(__file__).parent
BACKEND = {"TORCHDEVICE_BACKEND": "cpu"}  # `run --backend cpu`: the CPU machine's expectations, even on a GPU runner


def translated(script: str, *args: str, env=None, timeout: float = 240):
    return run_command([sys.executable, "-m", "torchdevice", "run", "--backend", "cpu", str(HERE / script), *args],
                       env=env, timeout=timeout)


def native(script: str, *args: str, env=None, timeout: float = 240):
    return run_command([sys.executable, str(HERE / script), *args], env=env, timeout=timeout)


def last_json(result) -> dict:
    assert result.returncode == 0, str(result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, str(result)
    return json.loads(lines[-1])


def all_dtypes(seen) -> set[str]:
    return {s["dtype"] for s in seen}


# -- Lightning Trainer -----------------------------------------------------------------------


def lightning_run(tmp_path, accelerator, devices, precision, *, run=translated, env=None) -> tuple[list[dict], object]:
    out = tmp_path / f"{accelerator}-{devices}-{precision}-{run.__name__}"
    out.mkdir()
    result = run("lightning_train.py", "--accelerator", accelerator, "--devices", str(devices),
                 "--precision", precision, "--out", str(out), env=env)
    assert result.returncode == 0, str(result)
    ranks = sorted(out.glob("rank*.json"))
    assert ranks, str(result)
    return [json.loads(p.read_text()) for p in ranks], result


@pytest.fixture(scope="module")
def lightning_native_bf16(tmp_path_factory):
    pytest.importorskip("lightning")
    runs, _ = lightning_run(tmp_path_factory.mktemp("native"), "cpu", 1, "bf16-mixed", run=native)
    return runs[0]


@pytest.mark.parametrize("accelerator", ["gpu", "cuda", "auto"])
@pytest.mark.parametrize("devices", ["1", "auto"])
def test_lightning_single_device(tmp_path, accelerator, devices, lightning_native_bf16):
    """accelerator gpu/cuda/auto x devices 1/auto train on the target, with bf16-mixed really applied,
    and give exactly the native CPU run's losses and parameters."""
    (run,), _ = lightning_run(tmp_path, accelerator, devices, "bf16-mixed")
    assert run["accelerator"] == "TranslatedCUDAAccelerator" and run["strategy"] == "SingleDeviceStrategy"
    assert run["cuda_available"] and run["root_device"] == "cpu" and run["num_devices"] == 1
    assert run["precision_plugin"] == "MixedPrecision" and run["autocast_device"] == "cuda"
    assert all_dtypes(run["seen"]) == {"torch.bfloat16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["losses"] == lightning_native_bf16["losses"]
    assert run["param_sum"] == lightning_native_bf16["param_sum"]


def test_lightning_16_mixed_is_float16_with_a_real_scaler(tmp_path):
    """16-mixed: CUDA's float16 autocast and GradScaler, on the target (Lightning's own CPU path would
    have switched to bf16)."""
    pytest.importorskip("lightning")
    (run,), _ = lightning_run(tmp_path, "gpu", 1, "16-mixed")
    assert all_dtypes(run["seen"]) == {"torch.float16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["scaler_device"] == "cpu" and run["scaler_scale"] == 65536.0
    (full,), _ = lightning_run(tmp_path, "gpu", 1, "32-true")
    assert all_dtypes(full["seen"]) == {"torch.float32"} and full["losses"] != run["losses"]


def test_lightning_checkpoint_loads_natively(tmp_path):
    """The checkpoint a translated run saves loads with plain torch.load (no torchdevice, weights_only)."""
    pytest.importorskip("lightning")
    (run,), _ = lightning_run(tmp_path, "cuda", 1, "32-true")
    code = ("import json, sys, torch\n"
            "ck = torch.load(sys.argv[1])\n"
            "sd = ck['state_dict']\n"
            "print(json.dumps({'devices': sorted({str(t.device) for t in sd.values()}),"
            " 'sum': sum(float(t.double().sum()) for t in sd.values()), 'step': ck['global_step'],"
            " 'torchdevice': 'torchdevice' in sys.modules}))\n")
    result = run_command([sys.executable, "-c", code, run["checkpoint"]])
    loaded = last_json(result)
    assert loaded == {"devices": ["cpu"], "sum": pytest.approx(run["param_sum"], abs=1e-9), "step": 3,
                      "torchdevice": False}


@pytest.mark.parametrize("capability, hint", [("8.0", True), ("7.5", False)])
def test_lightning_matmul_precision_hint_follows_translated_capability(tmp_path, capability, hint):
    pytest.importorskip("lightning")
    _, result = lightning_run(tmp_path, "gpu", 1, "32-true", env={"TORCHDEVICE_CAPABILITY": capability})
    assert ("torch.set_float32_matmul_precision" in result.stdout + result.stderr) is hint
    assert "GPU available but not used" not in result.stderr
    assert "used: True (translated by torchdevice" in result.stdout + result.stderr


@pytest.mark.parametrize("accelerator, devices, env", [
    ("gpu", "2", {"TORCHDEVICE_DEVICE_COUNT": "2"}),
    ("cuda", "2", {"TORCHDEVICE_DEVICE_COUNT": "2"}),
    ("auto", "auto", {"TORCHDEVICE_DEVICE_COUNT": "2"}),
    ("gpu", "2", {"LOCAL_WORLD_SIZE": "2"}),
], ids=["gpu-2", "cuda-2", "auto-auto", "gpu-2-local-world-size"])
def test_lightning_ddp_two_devices(tmp_path, accelerator, devices, env, lightning_native_bf16):
    """devices=2 (or auto, with two logical devices): DDP on the backend's engine, two ranks."""
    runs, _ = lightning_run(tmp_path, accelerator, devices, "bf16-mixed", env=env)
    assert [r["rank"] for r in runs] == [0, 1]
    for run in runs:
        assert run["strategy"] == "DDPStrategy" and run["world_size"] == 2
        assert run["accelerator"] == "TranslatedCUDAAccelerator"
        assert run["process_group_backend"] == "gloo"  # torchdevice.dist_backend() on the cpu backend
        assert all_dtypes(run["seen"]) == {"torch.bfloat16"}
    assert runs[0]["param_sum"] == runs[1]["param_sum"]  # DDP kept the replicas equal


def test_lightning_ddp_zero_code(tmp_path):
    """The README's zero-code line: `TORCHDEVICE_BACKEND=cpu TORCHDEVICE_DEVICE_COUNT=2 python script.py`."""
    pytest.importorskip("lightning")
    runs, _ = lightning_run(tmp_path, "gpu", "2", "32-true", run=native,
                            env={"TORCHDEVICE_BACKEND": "cpu", "TORCHDEVICE_DEVICE_COUNT": "2"})
    assert [r["rank"] for r in runs] == [0, 1]
    assert all(r["strategy"] == "DDPStrategy" and r["accelerator"] == "TranslatedCUDAAccelerator" for r in runs)
    assert runs[0]["param_sum"] == runs[1]["param_sum"]


def test_lightning_more_devices_than_the_target_has_is_lightnings_error(tmp_path):
    pytest.importorskip("lightning")
    out = tmp_path / "o"
    out.mkdir()
    result = translated("lightning_train.py", "--accelerator", "gpu", "--devices", "2", "--out", str(out))
    assert result.returncode != 0
    assert "You requested gpu: [0, 1]" in result.stderr and "only has: [0]" in result.stderr


def test_lightning_fails_without_the_integration(tmp_path):
    """The tests above exercise the integration: with it disabled, Lightning rejects the device again."""
    pytest.importorskip("lightning")
    out = tmp_path / "o"
    out.mkdir()
    result = translated("lightning_train.py", "--out", str(out), env={"TORCHDEVICE_DISABLE_INTEGRATIONS": "lightning"})
    assert result.returncode != 0 and "Device should be GPU, got cpu instead" in result.stderr


# -- Fabric -------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision, dtype", [("bf16-mixed", "torch.bfloat16"), ("16-mixed", "torch.float16")])
def test_fabric(precision, dtype):
    pytest.importorskip("lightning")
    run = last_json(translated("fabric_train.py", "--accelerator", "cuda", "--precision", precision))
    assert run["accelerator"] == "TranslatedCUDAAccelerator" and run["device"] == "cpu"
    assert all_dtypes(run["seen"]) == {dtype} and all(s["autocast_cuda"] for s in run["seen"])
    if precision == "bf16-mixed":
        reference = last_json(native("fabric_train.py", "--accelerator", "cpu", "--precision", precision))
        assert run["losses"] == reference["losses"]


# -- accelerate -----------------------------------------------------------------------------------


def test_accelerate_bf16_equals_native_cpu():
    pytest.importorskip("accelerate")
    run = last_json(translated("accelerate_train.py", "bf16"))
    reference = last_json(native("accelerate_train.py", "bf16", "--cpu"))
    assert all_dtypes(run["seen"]) == {"torch.bfloat16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["native_amp"] and run["losses"] == reference["losses"]


def test_accelerate_fp16_runs_float16_autocast_and_scaling():
    """fp16: accelerate's CUDA path (autocast float16, GradScaler) on the target, equal to the plain-torch
    CPU hand port of the loop (accelerate itself has no fp16 on the CPU: it would train in float32)."""
    pytest.importorskip("accelerate")
    run = last_json(translated("accelerate_train.py", "fp16"))
    assert all_dtypes(run["seen"]) == {"torch.float16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["native_amp"] and run["scaler_device"] == "cpu" and run["scaler_scale"] == 65536.0
    oracle = last_json(native("accelerate_train.py", "fp16", "--oracle"))
    assert run["losses"] == oracle["losses"]
    untranslated_cpu = last_json(native("accelerate_train.py", "fp16", "--cpu"))
    assert all_dtypes(untranslated_cpu["seen"]) == {"torch.float32"}  # what the integration fixes


# -- transformers.Trainer ---------------------------------------------------------------------------


def test_trainer_bf16_equals_native_cpu():
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    run = last_json(translated("hf_trainer.py", "bf16"))
    reference = last_json(native("hf_trainer.py", "bf16", "--cpu"))
    assert run["n_gpu"] == 1 and run["device"] == "cpu"  # the CUDA path: cuda:0, translated
    assert all_dtypes(run["seen"]) == {"torch.bfloat16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["losses"] == reference["losses"]


def test_trainer_fp16_runs_float16_autocast_and_scaling(tmp_path):
    """fp16=True: Trainer's CUDA path (no torch.xpu / torch.mps call in the report), float16 autocast
    and a GradScaler on the target."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    report = tmp_path / "report.json"
    result = run_command([sys.executable, "-m", "torchdevice", "run", "--backend", "cpu", "--report", str(report),
                          str(HERE / "hf_trainer.py"), "fp16"], timeout=240)
    run = last_json(result)
    assert run["n_gpu"] == 1 and run["native_amp"] and run["scaler_device"] == "cpu"
    assert all_dtypes(run["seen"]) == {"torch.float16"} and all(s["autocast_cuda"] for s in run["seen"])
    called = json.loads(report.read_text())
    text = json.dumps(called)
    assert "torch.cuda." in text  # the report did record the program's CUDA calls
    assert "torch.xpu." not in text and "torch.mps." not in text, text


def test_trainer_tf32_is_answered_from_the_translated_capability():
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    run = last_json(translated("hf_trainer.py", "no", "--tf32", env={"TORCHDEVICE_CAPABILITY": "8.0"}))
    assert run["fp32_precision"] == "tf32" and all_dtypes(run["seen"]) == {"torch.float32"}
    old = translated("hf_trainer.py", "no", "--tf32", env={"TORCHDEVICE_CAPABILITY": "7.0"})
    assert old.returncode != 0 and "--tf32 requires Ampere" in old.stderr


@pytest.mark.skipif(os.name != "posix", reason="POSIX subprocess environment")
def test_integrations_listed_by_info():
    result = run_command([sys.executable, "-m", "torchdevice", "info", "--json"], env=BACKEND)
    assert result.returncode == 0, str(result)
    names = {i["name"]: i for i in json.loads(result.stdout)["integrations"]}
    assert {"lightning", "accelerate", "transformers"} <= set(names)
