"""The issue's check, end to end: a CUDA-written program (programs/workload.py: an MLP, a CNN with
BatchNorm and pooling, a tiny GPT with SDPA and tied weights, AdamW, gradient clipping, eval-mode
inference, sampling) run with ``torchdevice run --backend mlx`` gives native CPU torch's losses within
1e-3 relative, and a 64 MiB tensor on "cuda" moves ``torch.cuda.memory_allocated()`` by 64 MiB."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

PROGRAM = pathlib.Path(__file__).parent / "programs" / "workload.py"
MIB = 1 << 20


def _run(*argv: str, report: pathlib.Path | None = None) -> dict:
    cmd = [sys.executable, *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    report = tmp_path_factory.mktemp("mlx") / "report.json"
    native = _run(str(PROGRAM), "--device", "cpu")
    mlx = _run("-m", "torchdevice", "run", "--backend", "mlx", "--report", str(report), str(PROGRAM))
    return native, mlx, json.loads(report.read_text())


@pytest.mark.parametrize("model", ["mlp", "cnn", "gpt"])
def test_losses_match_native_cpu(results, model):
    native, mlx, _ = results
    assert mlx[model] == pytest.approx(native[model], rel=1e-3)
    assert native[model][-1] < native[model][0]  # it trained


def test_eval_mode_and_sampling_match_native_cpu(results):
    native, mlx, _ = results
    for key in ("mlp_acc", "cnn_acc", "gpt_next", "gpt_top"):
        assert mlx[key] == native[key], key
    assert mlx["bn_running_mean"] == pytest.approx(native["bn_running_mean"], rel=1e-3, abs=1e-6)


def test_the_data_lives_in_mlx(results):
    _, mlx, report = results
    assert mlx["tensor_type"] == "MLXTensor"
    assert mlx["mem_growth"] >= 64 * MIB
    assert mlx["max_mem"] >= 64 * MIB
    fallbacks = next(iter(report["sections"].values()), {}) if report.get("sections") else {}
    assert "<view write-back>" not in fallbacks, fallbacks  # every view write runs in MLX
