"""The CUDA-written examples, run unmodified on the CPU, give the numbers of their hand ports.

Each example runs three ways, in subprocesses: ``torchdevice run
examples/X_cuda.py``, zero-code ``TORCHDEVICE_BACKEND=cpu python
examples/X_cuda.py``, and the hand port ``python examples/ported/X_cpu.py``.
Everything deterministic must be *equal* (same seed, same losses, same
predictions); timings and memory figures must be real (positive) numbers.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import Result, clean_env, run_concurrently, torchdevice_script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NAMES = {"train": ("train_cuda.py", "train_cpu.py"),
         "streams": ("streams_cuda.py", "streams_cpu.py"),
         "inference": ("inference_cuda.py", "inference_cpu.py")}
#: every example's own arguments, the same for its three runs: one epoch of training is 16 steps, as many
#: numbers to compare and enough to see it learn (the default two took half of this module's time)
ARGS = {"train": ["--epochs", "1"], "streams": [], "inference": []}
#: measured, so never compared for equality
MEASURED = {"train_ms", "peak_memory_bytes", "memory_bytes", "elapsed_ms", "middle_ms", "images_per_s"}


def _run(args, out: Path, env=None, timeout=300):
    import subprocess

    proc = subprocess.run([*args, "--out", str(out)], env=clean_env(env), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    result = Result(list(map(str, args)), proc.returncode, proc.stdout, proc.stderr)
    data = json.loads(out.read_text()) if proc.returncode == 0 and out.exists() else None
    return data, result


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("examples")
    td = torchdevice_script()
    jobs = {}
    for name, (cuda, cpu) in NAMES.items():
        args = ARGS[name]
        jobs[(name, "run")] = (_run, ([td, "run", str(EXAMPLES / cuda), *args], tmp / f"{name}-run.json"), {})
        jobs[(name, "zero_code")] = (_run, ([sys.executable, str(EXAMPLES / cuda), *args], tmp / f"{name}-zero.json"),
                                     {"env": {"TORCHDEVICE_BACKEND": "cpu"}})
        jobs[(name, "ported")] = (_run, ([sys.executable, str(EXAMPLES / "ported" / cpu), *args],
                                         tmp / f"{name}-ported.json"), {})
    return run_concurrently(jobs)  # a failing run fails its own example's test only


def _compare(outputs, name):
    for how in ("ported", "run", "zero_code"):
        data, result = outputs[(name, how)]
        assert data is not None, result
    ported, _ = outputs[(name, "ported")]
    for how in ("run", "zero_code"):
        translated, result = outputs[(name, how)]
        for key, value in ported.items():
            if key in MEASURED:
                assert isinstance(translated[key], (int, float)) and translated[key] > 0, (how, key)
            else:
                assert translated[key] == value, (how, key, translated[key], value)
        assert "Warning" not in result.stderr, (how, result.stderr)
    return outputs[(name, "run")][0]


def test_training(outputs):
    result = _compare(outputs, "train")
    losses = result["losses"]
    assert len(losses) == result["steps"] > 0
    assert sum(losses[-5:]) < sum(losses[:5])  # it learns
    assert result["rng_draw"] == result["rng_redraw"]  # RNG state round trip
    assert result["restored_eval_loss"] == result["eval_loss"]  # checkpoint round trip
    assert result["grad_scale"] == result["restored_grad_scale"] == 2.0**16  # GradScaler really on
    assert result["checkpoint_on"] == "cpu"


def test_streams(outputs):
    result = _compare(outputs, "streams")
    assert result["queries"] == [True, True, True, True]
    for key in ("on_side", "back_on_main", "thread_starts_on_default", "thread_uses_own",
                "main_thread_kept_side", "untimed_event_raises", "is_stream", "is_event"):
        assert result[key] is True, key
    assert 0 < result["middle_ms"] <= result["elapsed_ms"]


def test_inference(outputs):
    result = _compare(outputs, "inference")
    assert result["logits_dtype"] == "torch.float16"  # the explicit float16 is honoured on CPU
    assert len(result["predictions"]) == 256
    assert result["device_total_memory"] > 0
