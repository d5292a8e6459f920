"""CUDA-written framework programs run unmodified through ``python -m torchdevice run`` on the CPU
backend, compared with native CPU runs of the same scripts where one exists.

Each framework's tests skip when it is not installed; the ``py311`` env (CI) and ``tox -e frameworks``
install lightning==2.6.6, accelerate==1.15.0, transformers==5.23.0, peft==0.21.2 and diffusers==0.42.1
(torch 2.13.0) and run this file with ``TORCHDEVICE_FRAMEWORK_TESTS=1``, where a framework that does not
import fails instead.
The scripts are in this directory; each writes what it saw as JSON. Every run is a subprocess
(about 4-5 s each on the reference machine, 8-10 s for two DDP ranks).

Where no native run with the same precision exists on a CPU (float16 mixed precision: Lightning's
CPU accelerator runs ``16-mixed`` as bfloat16, accelerate and Trainer drop fp16 on a CPU), the
reference is the script's ``--oracle`` mode: the same loop hand-ported to plain torch with
``autocast("cpu", float16)`` and ``GradScaler("cpu")``, no framework, no torchdevice.

CI (the ``py311`` env's pytest, beside the rest of the suite) runs a subset that covers every claim once;
``tox -e frameworks -- --all`` also runs the tests marked ``frameworks_full`` (more accelerator x
devices combinations, the other DDP launch paths, Fabric DDP): about twice as long.

Two logical devices for ``devices=2`` come from ``TORCHDEVICE_DEVICE_COUNT=2`` (or ``torchdevice run
--devices 2``, which exports it); one case keeps a launcher's ``LOCAL_WORLD_SIZE=2``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import run_command, run_concurrently

HERE = Path(__file__).parent
ENV_FLAG = "TORCHDEVICE_FRAMEWORK_TESTS"  # "1" in py311 and frameworks: a framework missing there fails, never skips


def need(module: str):
    """Import ``module``; skip the test when it is not installed, unless ``TORCHDEVICE_FRAMEWORK_TESTS=1``
    says the frameworks must be there (the ``py311`` and ``frameworks`` envs): then a missing one is a failure."""
    if os.environ.get(ENV_FLAG) == "1":
        return __import__(module)
    return pytest.importorskip(module)


BACKEND = {"TORCHDEVICE_BACKEND": "cpu"}  # `run --backend cpu`: the CPU machine's expectations, even on a GPU runner
TWO_DEVICES = {"TORCHDEVICE_DEVICE_COUNT": "2"}
#: In the full set only (``tox -e frameworks -- --all``): more combinations of what the CI subset covers
#: once each (see conftest.py here).
FULL = pytest.mark.frameworks_full


def translated(script: str, *args: str, env=None, run_args=(), timeout: float = 240):
    return run_command([sys.executable, "-m", "torchdevice", "run", "--backend", "cpu", *run_args, str(HERE / script),
                        *args], env=env, timeout=timeout)


def native(script: str, *args: str, env=None, timeout: float = 240):
    return run_command([sys.executable, str(HERE / script), *args], env=env, timeout=timeout)


def last_json(result) -> dict:
    assert result.returncode == 0, str(result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, str(result)
    return json.loads(lines[-1])


def all_dtypes(seen) -> set[str]:
    return {s["dtype"] for s in seen}


def assert_loads_natively(checkpoint: str, param_sum: float, step: int = 3) -> None:
    """``checkpoint`` names nothing of torchdevice in its pickles and loads with plain ``torch.load``
    (weights only, torchdevice not imported) into CPU tensors holding the trained weights."""
    with zipfile.ZipFile(checkpoint) as archive:
        pickles = [name for name in archive.namelist() if name.endswith(".pkl")]
        assert pickles
        for name in pickles:
            assert b"torchdevice" not in archive.read(name) and b"Translated" not in archive.read(name)
    code = ("import json, sys, torch\n"
            "ck = torch.load(sys.argv[1], weights_only=True)\n"
            "sd = ck['state_dict']\n"
            "print(json.dumps({'devices': sorted({str(t.device) for t in sd.values()}),"
            " 'sum': sum(float(t.double().sum()) for t in sd.values()), 'step': ck['global_step'],"
            " 'torchdevice': 'torchdevice' in sys.modules}))\n")
    loaded = last_json(run_command([sys.executable, "-c", code, checkpoint]))
    assert loaded == {"devices": ["cpu"], "sum": pytest.approx(param_sum, abs=1e-9), "step": step, "torchdevice": False}


# -- Lightning Trainer -----------------------------------------------------------------------


def lightning_run(tmp_path, accelerator, devices, precision, *, strategy="auto", run=translated, env=None, run_args=(),
                  oracle=False) -> tuple[list[dict], object]:
    out = tmp_path / f"{accelerator}-{devices}-{precision}-{strategy}-{run.__name__}"
    out.mkdir()
    args = ["--accelerator", accelerator, "--devices", str(devices), "--precision", precision, "--strategy", strategy,
            "--out", str(out), *(["--oracle"] if oracle else [])]
    result = run("lightning_train.py", *args, env=env, **({"run_args": run_args} if run_args else {}))
    assert result.returncode == 0, str(result)
    ranks = sorted(out.glob("rank*.json"))
    assert ranks, str(result)
    runs = [json.loads(p.read_text()) for p in ranks]
    if (out / "checkpoint.json").exists():
        runs[0]["saved"] = json.loads((out / "checkpoint.json").read_text())
    return runs, result


@pytest.fixture(scope="module")
def lightning_native_bf16(tmp_path_factory):
    need("lightning")
    runs, _ = lightning_run(tmp_path_factory.mktemp("native"), "cpu", 1, "bf16-mixed", run=native)
    return runs[0]


@pytest.fixture(scope="module")
def lightning_oracle_fp16(tmp_path_factory):
    """The 16-mixed loop in plain torch: float16 autocast and GradScaler on the CPU (no Lightning)."""
    need("lightning")
    runs, _ = lightning_run(tmp_path_factory.mktemp("oracle"), "cpu", 1, "16-mixed", run=native, oracle=True)
    return runs[0]


@pytest.mark.parametrize("accelerator, devices", [
    # accelerator="cuda" is in the CI subset through test_lightning_16_mixed_is_float16_with_a_real_scaler[cuda]
    ("gpu", "1"), pytest.param("cuda", "1", marks=FULL), ("auto", "auto"),
    pytest.param("gpu", "auto", marks=FULL), pytest.param("cuda", "auto", marks=FULL), pytest.param("auto", "1", marks=FULL),
])
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
    assert all_dtypes(lightning_native_bf16["seen"]) == {"torch.bfloat16"}  # the reference ran bf16 too


@pytest.mark.parametrize("accelerator", [pytest.param("gpu", marks=FULL), "cuda"])  # "gpu": single_device[gpu-1]
def test_lightning_16_mixed_is_float16_with_a_real_scaler(tmp_path, accelerator, lightning_oracle_fp16):
    """16-mixed: CUDA's float16 autocast and GradScaler, on the target (Lightning's own CPU path would
    have switched to bf16), equal to the plain-torch float16 loop; the checkpoint, scaler state
    included, loads natively."""
    (run,), _ = lightning_run(tmp_path, accelerator, 1, "16-mixed")
    assert run["accelerator"] == "TranslatedCUDAAccelerator" and run["precision_plugin"] == "MixedPrecision"
    assert all_dtypes(run["seen"]) == {"torch.float16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["scaler_device"] == "cpu" and run["scaler_scale"] == 65536.0
    assert all_dtypes(lightning_oracle_fp16["seen"]) == {"torch.float16"}
    assert run["losses"] == lightning_oracle_fp16["losses"]
    assert run["param_sum"] == lightning_oracle_fp16["param_sum"]
    assert_loads_natively(run["saved"]["checkpoint"], run["saved"]["param_sum"])


@pytest.mark.subprocess  # by hand: lightning_run's default run= (translated) starts it, which tests/spawning.py does not follow
@pytest.mark.parametrize("capability, hint", [("8.0", True), ("7.5", False)])
def test_lightning_matmul_precision_hint_follows_translated_capability(tmp_path, capability, hint):
    """CUDA's accelerator suggests torch.set_float32_matmul_precision on an Ampere-class GPU: asked of
    the translated capability (TORCHDEVICE_CAPABILITY)."""
    need("lightning")
    _, result = lightning_run(tmp_path, "gpu", 1, "32-true", env={"TORCHDEVICE_CAPABILITY": capability})
    assert ("torch.set_float32_matmul_precision" in result.stdout + result.stderr) is hint
    assert "GPU available but not used" not in result.stderr
    assert "used: True (translated by torchdevice" in result.stdout + result.stderr


@pytest.fixture(scope="module")
def lightning_native_ddp(tmp_path_factory):
    """Lightning's own CPU DDP (accelerator="cpu", devices=2, gloo): the native reference."""
    need("lightning")
    runs, _ = lightning_run(tmp_path_factory.mktemp("native-ddp"), "cpu", 2, "bf16-mixed", run=native)
    assert [r["strategy"] for r in runs] == ["DDPStrategy"] * 2
    return runs


DDP_CASES = {
    # id: (accelerator, devices, strategy, environment, torchdevice run's arguments)
    "gpu-2-ddp-DEVICE_COUNT": ("gpu", "2", "ddp", TWO_DEVICES, ()),
    "cuda-2-run--devices": ("cuda", "2", "auto", None, ("--devices", "2")),
    "auto-auto-LOCAL_WORLD_SIZE": ("auto", "auto", "auto", {"LOCAL_WORLD_SIZE": "2"}, ()),
    "cuda-2-ddp_spawn-DEVICE_COUNT": ("cuda", "2", "ddp_spawn", TWO_DEVICES, ()),
}


@pytest.mark.parametrize("case", [c if c == "gpu-2-ddp-DEVICE_COUNT" else pytest.param(c, marks=FULL) for c in DDP_CASES])
def test_lightning_ddp_two_devices(tmp_path, case, lightning_native_ddp):
    """Two logical devices: DDP on the backend's engine, two ranks each seeing two CUDA devices, equal
    to Lightning's native CPU DDP rank by rank; the checkpoint loads natively."""
    accelerator, devices, strategy, env, run_args = DDP_CASES[case]
    runs, _ = lightning_run(tmp_path, accelerator, devices, "bf16-mixed", strategy=strategy, env=env, run_args=run_args)
    assert [r["rank"] for r in runs] == [0, 1]
    for run, reference in zip(runs, lightning_native_ddp):
        assert run["strategy"] == "DDPStrategy" and run["world_size"] == 2 and run["num_devices"] == 2
        assert run["accelerator"] == "TranslatedCUDAAccelerator" and run["device_count"] == 2
        assert run["process_group_backend"] == "gloo"  # torchdevice.dist_backend() on the cpu backend
        assert all_dtypes(run["seen"]) == {"torch.bfloat16"} and all(s["autocast_cuda"] for s in run["seen"])
        assert run["losses"] == reference["losses"] and run["param_sum"] == reference["param_sum"]
    assert runs[0]["losses"] != runs[1]["losses"]  # each rank trained on its own half of the data
    assert runs[0]["param_sum"] == runs[1]["param_sum"]  # DDP kept the replicas equal
    saved = runs[0]["saved"]
    assert saved["param_sum"] == runs[0]["param_sum"]  # with ddp_spawn: the weights the main process got back
    # ddp_spawn hands the weights back to the main process, not the loop's step count (Lightning's own behaviour)
    assert saved["global_step"] == (0 if strategy == "ddp_spawn" else 3)
    assert_loads_natively(saved["checkpoint"], saved["param_sum"], saved["global_step"])


def test_lightning_ddp_zero_code(tmp_path, lightning_native_ddp):
    """The README's zero-code line: `TORCHDEVICE_BACKEND=cpu TORCHDEVICE_DEVICE_COUNT=2 python script.py`
    (translation on at `import torch` in the script and in the rank Lightning starts)."""
    runs, _ = lightning_run(tmp_path, "gpu", "2", "bf16-mixed", run=native, env={**BACKEND, **TWO_DEVICES})
    assert [r["rank"] for r in runs] == [0, 1]
    for run, reference in zip(runs, lightning_native_ddp):
        assert run["strategy"] == "DDPStrategy" and run["accelerator"] == "TranslatedCUDAAccelerator"
        assert run["cuda_available"] and run["device_count"] == 2 and run["process_group_backend"] == "gloo"
        assert run["losses"] == reference["losses"] and run["param_sum"] == reference["param_sum"]


def test_lightning_accelerator_pickles_by_reference(on_cpu):
    """A Trainer holding the translated accelerator pickles (ddp_spawn sends it to its processes): the
    class is found by name in torchdevice.integrations.lightning while translation is on."""
    need("lightning")
    import pickle

    import torchdevice
    from torchdevice.integrations import lightning as integration

    name = "TranslatedCUDAAccelerator_lightning_pytorch"
    with torchdevice.patched() as target:
        cls = integration.accelerator_class("lightning.pytorch", target)
        data = pickle.dumps(cls())
        assert name.encode() in data and cls.__name__ == "TranslatedCUDAAccelerator"
        assert type(pickle.loads(data)) is cls is getattr(integration, name)
    with pytest.raises(AttributeError, match="cannot be unpickled while translation is off"):
        getattr(integration, name)
    with pytest.raises(AttributeError, match=name):
        pickle.loads(data)


def test_lightning_more_devices_than_the_target_has_is_lightnings_error(tmp_path):
    need("lightning")
    out = tmp_path / "o"
    out.mkdir()
    result = translated("lightning_train.py", "--accelerator", "gpu", "--devices", "2", "--out", str(out))
    assert result.returncode != 0
    assert "You requested gpu: [0, 1]" in result.stderr and "only has: [0]" in result.stderr


def test_lightning_fails_without_the_integration(tmp_path):
    """The tests above exercise the integration: with it disabled, Lightning rejects the device again."""
    need("lightning")
    out = tmp_path / "o"
    out.mkdir()
    result = translated("lightning_train.py", "--out", str(out), env={"TORCHDEVICE_DISABLE_INTEGRATIONS": "lightning"})
    assert result.returncode != 0 and "Device should be GPU, got cpu instead" in result.stderr


# -- Fabric -------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision, dtype", [("bf16-mixed", "torch.bfloat16"),
                                              pytest.param("16-mixed", "torch.float16", marks=FULL)])
def test_fabric(precision, dtype):
    need("lightning")
    run = last_json(translated("fabric_train.py", "--accelerator", "cuda", "--precision", precision))
    assert run["accelerator"] == "TranslatedCUDAAccelerator" and run["device"] == "cpu"
    assert all_dtypes(run["seen"]) == {dtype} and all(s["autocast_cuda"] for s in run["seen"])
    if precision == "bf16-mixed":
        reference = last_json(native("fabric_train.py", "--accelerator", "cpu", "--precision", precision))
        assert all_dtypes(reference["seen"]) == {dtype}
        assert run["losses"] == reference["losses"]


@FULL
def test_fabric_ddp_two_devices(tmp_path):
    """Fabric(devices=2) with TORCHDEVICE_DEVICE_COUNT=2: two ranks on the backend's engine, equal to
    Fabric's native CPU DDP."""
    need("lightning")

    def ranks(run, accelerator, out, env=None):
        out.mkdir()
        result = run("fabric_train.py", "--accelerator", accelerator, "--devices", "2", "--precision", "bf16-mixed",
                     "--out", str(out), env=env)
        assert result.returncode == 0, str(result)
        return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]

    runs = ranks(translated, "gpu", tmp_path / "translated", TWO_DEVICES)
    reference = ranks(native, "cpu", tmp_path / "native")
    assert [r["rank"] for r in runs] == [0, 1] == [r["rank"] for r in reference]
    for run, ref in zip(runs, reference):
        assert run["accelerator"] == "TranslatedCUDAAccelerator" and run["strategy"] == ref["strategy"] == "DDPStrategy"
        assert run["world_size"] == 2 and all_dtypes(run["seen"]) == {"torch.bfloat16"}
        assert run["losses"] == ref["losses"]


# -- accelerate -----------------------------------------------------------------------------------


def test_accelerate_bf16_equals_native_cpu():
    need("accelerate")
    run = last_json(translated("accelerate_train.py", "bf16"))
    reference = last_json(native("accelerate_train.py", "bf16", "--cpu"))
    assert all_dtypes(run["seen"]) == {"torch.bfloat16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["native_amp"] and run["losses"] == reference["losses"]


def test_accelerate_fp16_runs_float16_autocast_and_scaling():
    """fp16: accelerate's CUDA path (autocast float16, GradScaler) on the target, equal to the plain-torch
    CPU hand port of the loop (accelerate itself has no fp16 on the CPU: it would train in float32)."""
    need("accelerate")
    run = last_json(translated("accelerate_train.py", "fp16"))
    assert all_dtypes(run["seen"]) == {"torch.float16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["native_amp"] and run["scaler_device"] == "cpu" and run["scaler_scale"] == 65536.0
    oracle = last_json(native("accelerate_train.py", "fp16", "--oracle"))
    assert run["losses"] == oracle["losses"]
    untranslated_cpu = last_json(native("accelerate_train.py", "fp16", "--cpu"))
    assert all_dtypes(untranslated_cpu["seen"]) == {"torch.float32"}  # what the integration fixes


@FULL
def test_accelerate_fp16_zero_code_with_accelerate_imported_before_torch():
    """TORCHDEVICE_BACKEND=cpu, the program's first import `from accelerate import Accelerator`: translation
    turns on at the `import torch` inside accelerate.accelerator, before Accelerator exists; the integration
    adapts it when that import ends (it failed, and fp16 trained in float32, before)."""
    need("accelerate")
    script = HERE / "accelerate_train.py"
    code = ("import sys, runpy; from accelerate import Accelerator; "
            f"sys.argv = [{str(script)!r}, 'fp16']; runpy.run_path(sys.argv[0], run_name='__main__')")
    result = run_command([sys.executable, "-c", code], env=BACKEND)
    run = last_json(result)
    assert "integration 'accelerate' failed" not in result.stderr
    assert all_dtypes(run["seen"]) == {"torch.float16"} and run["native_amp"] and run["scaler_device"] == "cpu"
    oracle = last_json(native("accelerate_train.py", "fp16", "--oracle"))
    assert run["losses"] == oracle["losses"]


# -- transformers.Trainer ---------------------------------------------------------------------------


def test_trainer_bf16_equals_native_cpu():
    need("transformers")
    need("accelerate")
    run = last_json(translated("hf_trainer.py", "bf16"))
    reference = last_json(native("hf_trainer.py", "bf16", "--cpu"))
    assert run["n_gpu"] == 1 and run["device"] == "cpu"  # the CUDA path: cuda:0, translated
    assert all_dtypes(run["seen"]) == {"torch.bfloat16"} and all(s["autocast_cuda"] for s in run["seen"])
    assert run["losses"] == reference["losses"]


def test_trainer_fp16_runs_float16_autocast_and_scaling_on_its_cuda_path(tmp_path):
    """TrainingArguments(fp16=True) on a real transformers model (a tiny GPT-2 from its config): the
    Trainer's CUDA path (cuda:0, one GPU, accelerate's native AMP), float16 autocast and a real GradScaler
    on the target; the report names no torch.xpu function (the model's masking code asks
    torch.xpu.is_current_stream_capturing() on every forward: a probe, counted apart)."""
    need("transformers")
    need("accelerate")
    report = tmp_path / "calls.json"
    run = last_json(translated("hf_trainer.py", "fp16", "--gpt2", run_args=("--report", str(report))))
    assert run["n_gpu"] == 1 and run["device"] == "cpu" and run["native_amp"] and run["scaler_device"] == "cpu"
    assert all_dtypes(run["seen"]) == {"torch.float16"} and all(s["autocast_cuda"] for s in run["seen"])
    data = json.loads(report.read_text())
    apis = {a["api"]: a for a in data["apis"]}
    other_families = ("torch.xpu.", "torch.mps.", "torch.mtia.", "torch.backends.mps.")
    assert not [api for api in apis if api.startswith(other_families)], apis  # not its XPU branch (torch.xpu.set_device)
    assert "torch.xpu.set_device" not in report.read_text()
    # no other family is named anywhere: torch.manual_seed seeding every family itself is counted per family
    assert not re.search(r"torch\.(backends\.)?(xpu|mps|mtia)\.", report.read_text())
    assert data["other_family_probes"].get("xpu", 0) >= 1  # transformers asked whether an XPU exists and was told: no
    cuda_sites = {s["site"].split("site-packages/")[-1] for s in apis["torch.cuda.is_available"]["sites"]}
    assert any(site.startswith("transformers/") for site in cuda_sites), cuda_sites
    # transformers' is_tracing() ran, asking CUDA (listed) and XPU (counted above) about graph capture
    assert apis["torch.cuda.is_current_stream_capturing"]["calls"] >= 1
    assert apis["torch.amp.GradScaler"]["handled"] == "translated"


@pytest.mark.parametrize("precision", ["fp16", pytest.param("bf16", marks=FULL)])
def test_trainer_mixed_precision_equals_the_plain_torch_loop(precision):
    """SGD, constant learning rate, no clipping, batches in order: the translated Trainer's numbers equal
    the plain-torch CPU loop with autocast("cpu", dtype) (and GradScaler for fp16) exactly."""
    need("transformers")
    need("accelerate")
    run = last_json(translated("hf_trainer.py", precision, "--plain"))
    oracle = last_json(native("hf_trainer.py", precision, "--plain", "--oracle"))
    dtype = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}[precision]
    assert all_dtypes(run["seen"]) == all_dtypes(oracle["seen"]) == {dtype}
    assert run["losses"] == oracle["losses"] and run["param_sum"] == oracle["param_sum"]
    assert run["scaler_scale"] == oracle["scaler_scale"] == (65536.0 if precision == "fp16" else None)


@pytest.mark.parametrize("capability", ["8.0", pytest.param("7.0", marks=FULL)])
def test_trainer_tf32_is_answered_from_the_translated_capability(capability):
    """TrainingArguments(tf32=True) asks for an Ampere-class GPU: the translated capability answers
    (without the integration it fails on every translated run, the CUDA build being absent)."""
    need("transformers")
    need("accelerate")
    result = translated("hf_trainer.py", "no", "--tf32", env={"TORCHDEVICE_CAPABILITY": capability})
    if capability == "8.0":
        run = last_json(result)
        assert run["fp32_precision"] == "tf32" and all_dtypes(run["seen"]) == {"torch.float32"}
    else:
        assert result.returncode != 0 and "--tf32 requires Ampere" in result.stderr


@FULL
def test_trainer_over_two_sim_devices_trains_as_over_one():
    """Trainer wraps the model in ``nn.DataParallel`` when ``device_count() > 1``: on 2 sim devices (the batch
    split in two, scattered, replicated, gathered) it gives the losses and weights of 1 (``CUDA_VISIBLE_DEVICES=0``),
    the global batch the same, up to the order of float sums. sim's truth run (scripts/sim_truth.py --peers) runs
    it too; in-process DataParallel on sim is the sim suite's."""
    need("transformers")
    need("accelerate")
    jobs = {gpus: (run_command, ([sys.executable, "-m", "torchdevice", "run", "--backend", "sim",
                                  str(HERE / "trainer_dataparallel.py")],),
                   {"env": {"CUDA_VISIBLE_DEVICES": visible}, "timeout": 240})
            for gpus, visible in ((2, "0,1"), (1, "0"))}
    done = run_concurrently(jobs)
    two, one = last_json(done[2]), last_json(done[1])
    assert "n_gpu 2, cuda.device_count() 2, model wrapped in DataParallel" in done[2].stderr
    assert "n_gpu 1, cuda.device_count() 1, model wrapped in GPT2LMHeadModel" in done[1].stderr
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-6, abs=0)
    assert two["param_sum"] == pytest.approx(one["param_sum"], rel=1e-6, abs=0)
    assert len(two["losses"]) == 3 and two["losses"][0] != two["losses"][-1]


@pytest.mark.skipif(os.name != "posix", reason="POSIX subprocess environment")
def test_integrations_listed_by_info():
    result = run_command([sys.executable, "-m", "torchdevice", "info", "--json"], env=BACKEND)
    assert result.returncode == 0, str(result)
    names = {i["name"]: i for i in json.loads(result.stdout)["integrations"]}
    assert {"lightning", "accelerate", "transformers"} <= set(names)


def test_diffusers_model_cpu_offload_finds_the_translated_accelerator():
    """``enable_model_cpu_offload()`` asks ``torch.accelerator`` for the accelerator (natively on a CPU it
    raises "requires accelerator, but not found"); translated it offloads, runs the unet on the target and
    gives the image of the native CPU pipeline without offloading."""
    need("diffusers")
    need("accelerate")
    run = last_json(translated("diffusers_offload.py"))
    reference = last_json(native("diffusers_offload.py", "--no-offload"))
    assert run["offload"] and run["accelerator"] == "cuda" and reference["accelerator"] is None
    assert run["unet_ran_on"] == ["cpu"] and run["unet_after"] == "cpu"
    assert run["image"] == reference["image"] and run["image_sum"] == reference["image_sum"]



@pytest.fixture(scope="module")
def diffusers_load_port() -> dict:
    """``diffusers_load.py``'s hand port (``--device cpu``) run natively: the reference of every backend's run."""
    need("diffusers")
    need("accelerate")  # diffusers' device_map loading goes through it
    return last_json(native("diffusers_load.py", "--device", "cpu"))


@pytest.mark.parametrize("backend", ["cpu", "sim", pytest.param("mlx", marks=pytest.mark.frameworks_full)])
def test_diffusers_from_pretrained_onto_cuda_translated_matches_its_port(backend, diffusers_load_port):
    """diffusers' loader reads a safetensors checkpoint straight onto ``device_map="cuda"``: translated,
    the weights land on the target, equal to the saved ones, and the forward pass gives the port's output
    (bit for bit on cpu, the CPU's kernels on both sides; within 1e-5 on mlx and sim, whose kernels differ)."""
    if backend == "mlx":
        need("mlx.core")
    result = run_command([sys.executable, "-m", "torchdevice", "run", "--backend", backend,
                          str(HERE / "diffusers_load.py")], timeout=300)
    run = last_json(result)
    port = diffusers_load_port
    assert run["on_device"] and not port["on_device"] and run["equal"] and port["equal"]
    if backend == "cpu":
        assert run["out"] == port["out"] and run["out_sum"] == port["out_sum"]
    else:
        assert run["out"] == pytest.approx(port["out"], rel=1e-5, abs=1e-5)
