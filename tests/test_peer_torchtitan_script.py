"""scripts/peer_torchtitan.py: how it reads torchtitan's log, compares the sides, edits the native copy and runs
a resuming configuration (no torchtitan needed: the peer run itself is by hand, see docs/testing.md)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peer_torchtitan.py"
# torchtitan 0.2.2's per-step line (components/metrics.py, colour printing off), as logged
LOG = """[titan] 2026-11-28 03:15:51,700 - root - INFO - step:  1  loss:  8.18325  grad_norm:  0.6715  memory:  0.00GiB(0.00%)  tps: 130  tflops: 0.00  mfu: 0.00%
[titan] 2026-11-28 03:15:51,800 - root - WARNING - Peak flops undefined for: cpu, fallback to A100
[titan] 2026-11-28 03:15:52,240 - root - INFO - step: 12  loss:  7.97504  grad_norm:  0.7360  memory:  0.00GiB(0.00%)  tps: 237  tflops: 0.01  mfu: 0.00%
"""  # noqa: E501


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("peer_torchtitan", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_each_logged_step_is_read_as_step_loss_and_gradient_norm(peer):
    assert peer.parse_losses(LOG) == [(1, "8.18325", "0.6715"), (12, "7.97504", "0.7360")]


def test_a_translated_run_passes_only_when_every_step_equals_the_native_one(peer):
    native = [(1, "8.18325", "0.6715"), (2, "7.97504", "0.7360")]
    assert peer.compare(native, list(native)) is None
    assert "step 2" in peer.compare(native, [native[0], (2, "7.97505", "0.7360")])
    assert "step 2" in peer.compare(native, [native[0], (2, "7.97504", "0.7361")])  # the gradient norm counts too
    assert "1 steps logged, native 2" in peer.compare(native, native[:1])
    assert peer.compare(native[:1], native) == "2 steps logged, native 1"
    assert "nothing to compare" in peer.compare([], [])


def test_the_table_fails_on_a_failed_side_a_missing_side_or_a_difference(peer):
    good = peer.Outcome([(1, "8.1", "0.6")], 3.0)
    table, passed = peer.table({"ddp": {"native": good, "cpu": good, "sim": good}}, ["cpu", "sim"])
    assert passed and "| ddp | 1 steps, last loss 8.1, 3 s | equal, 3 s | equal, 3 s |" in table
    failed = peer.Outcome([], 1.0, "exit -11: SIGSEGV")
    table, passed = peer.table({"ddp": {"native": good, "cpu": failed}}, ["cpu", "sim"])
    assert not passed and "failed (exit -11: SIGSEGV)" in table and "not run" in table
    table, passed = peer.table({"ddp": {"native": failed, "cpu": good}}, ["cpu"])
    assert not passed and "not compared (native failed)" in table
    other = peer.Outcome([(1, "8.2", "0.6")], 3.0)
    assert peer.table({"tp": {"native": good, "cpu": other}}, ["cpu"])[1] is False
    assert peer.table({"tp": {"native": peer.Outcome([], 2.0), "cpu": good}}, ["cpu"])[1] is False


def test_native_edits_replace_their_text_once_and_refuse_another_torchtitan(peer, tmp_path):
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "utils.py").write_text('device_type = _get_available_device_type() or "cuda"\n')
    edit = [("tools/utils.py", '_get_available_device_type() or "cuda"', '_get_available_device_type() or "cpu"')]
    peer.apply_edits(tmp_path, edit)
    assert (tmp_path / "tools" / "utils.py").read_text() == 'device_type = _get_available_device_type() or "cpu"\n'
    with pytest.raises(SystemExit, match=r"tools/utils.py: expected one occurrence .* found 0"):
        peer.apply_edits(tmp_path, edit)  # already edited, or another version's text


def test_the_native_memory_monitor_edit_is_valid_python_that_the_builder_uses(peer, tmp_path):
    (tmp_path / "components").mkdir()
    metrics = tmp_path / "components" / "metrics.py"
    metrics.write_text("import os\nimport torch\nDeviceMemStats = tuple\n\n\n"
                       "def build_device_memory_monitor():\n"
                       "    device_memory_monitor = DeviceMemoryMonitor(device_type)\n"
                       "    return device_memory_monitor\n")
    peer.apply_edits(tmp_path, [e for e in peer.NATIVE_EDITS if e[0] == "components/metrics.py"])
    namespace: dict = {"device_type": "cpu", "DeviceMemoryMonitor": None}
    exec(compile(metrics.read_text(), str(metrics), "exec"), namespace)
    monitor = namespace["build_device_memory_monitor"]()
    assert monitor.device_name == "cpu" and monitor.device_capacity > 0


def test_assets_without_c4_test_stop_the_run_unless_a_stand_in_is_asked_for(peer, tmp_path):
    assets = tmp_path / "assets"
    (assets / "tokenizer").mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (assets / "tokenizer" / name).write_text("{}")
    with pytest.raises(SystemExit, match="lacks c4_test/data.json"):
        peer.stage_assets(assets, tmp_path / "work", synthetic=False)
    staged = peer.stage_assets(assets, tmp_path / "work", synthetic=True)
    lines = (staged / "c4_test" / "data.json").read_text().splitlines()
    assert lines and all(json.loads(line)["text"] for line in lines)
    first = lines
    staged = peer.stage_assets(assets, tmp_path / "work", synthetic=True)
    assert (staged / "c4_test" / "data.json").read_text().splitlines() == first  # seeded


def test_native_runs_the_edited_copy_and_translated_runs_the_unmodified_trainer_through_torchdevice(peer, tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_BACKEND", "mlx")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    native = peer.command("py", "native", 2, ["--x"])
    assert native[-3:] == ["-m", "torchtitan.train", "--x"]
    assert "torchdevice" not in native
    assert peer.command("py", "sim", 4, ["--x"])[-6:] == ["-m", "torchdevice", "run", "-m", "torchtitan.train", "--x"]
    assert "4" in peer.command("py", "sim", 4, [])
    env = peer.environment("native", tmp_path, 2)
    assert env["PYTHONPATH"] == str(tmp_path) and not any(k.startswith("TORCHDEVICE_") for k in env)
    env = peer.environment("sim", tmp_path, 4)
    assert env["TORCHDEVICE_BACKEND"] == "sim" and "PYTHONPATH" not in env
    assert env["TORCHDEVICE_SIM_DEVICES"] == "4"  # a device per rank: LOCAL_RANK 3 is cuda:3
    assert "TORCHDEVICE_SIM_DEVICES" not in peer.environment("cpu", tmp_path, 4)


def test_a_resuming_configuration_reports_both_runs_and_a_failed_run_stops_it(peer, tmp_path, monkeypatch):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        step = 6 if "--checkpoint.load_step" in argv else 1
        return subprocess.CompletedProcess(argv, 0, f"step: {step}  loss:  1.00000  grad_norm:  0.5000\n", "")

    monkeypatch.setattr(peer.subprocess, "run", fake_run)
    outcome = peer.run("py", "cpu", "checkpoint", peer.CONFIGS["checkpoint"], tmp_path, tmp_path, tmp_path, 10)
    assert len(calls) == 2 and outcome.error is None
    assert outcome.losses == [(1, "1.00000", "0.5000"), (6, "1.00000", "0.5000")]  # the saving run's, then the resumed
    monkeypatch.setattr(peer.subprocess, "run",
                        lambda argv, **kwargs: subprocess.CompletedProcess(argv, -11, "", "Segmentation fault\n"))
    outcome = peer.run("py", "sim", "checkpoint", peer.CONFIGS["checkpoint"], tmp_path, tmp_path, tmp_path, 10)
    assert outcome.error == "exit -11: Segmentation fault" and outcome.losses == []


def test_a_failed_run_is_summed_up_by_its_last_error_or_signal(peer):
    torchrun = ("[rank0]: RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo\n"
                "  traceback : Signal 11 (SIGSEGV) received by PID 3291\n====\n")
    assert peer.failure(torchrun) == "traceback : Signal 11 (SIGSEGV) received by PID 3291"
    assert peer.failure("x\nRuntimeError: Invalid device ordinal\n====\n") == "RuntimeError: Invalid device ordinal"
    assert peer.failure("a\nb\nc\nd\n") == "b / c / d"


def test_every_run_starts_from_one_seed_checkpoint_made_natively_by_one_process(peer, tmp_path, monkeypatch):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append((argv, kwargs["env"]))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(peer.subprocess, "run", fake_run)
    start_from = peer.seed_checkpoint("py", tmp_path, tmp_path / "native", tmp_path, 10)
    (argv, env), = calls
    assert "--checkpoint.create_seed_checkpoint" in argv and argv[argv.index("--nproc-per-node") + 1] == "1"
    assert "torchdevice" not in argv and env["PYTHONPATH"] == str(tmp_path / "native")
    assert start_from[-1] == str(tmp_path / "runs" / "seed-native" / "checkpoint" / "step-0")
    peer.run("py", "sim", "ddp", peer.CONFIGS["ddp"], tmp_path, tmp_path, tmp_path, 10, start_from)
    assert calls[-1][0][-len(peer.DDP) - len(start_from):-len(peer.DDP)] == start_from
    monkeypatch.setattr(peer.subprocess, "run", lambda argv, **kwargs: subprocess.CompletedProcess(argv, 1, "", "E\n"))
    with pytest.raises(SystemExit, match="the seed checkpoint failed: exit 1"):
        peer.seed_checkpoint("py", tmp_path, tmp_path, tmp_path, 10)


def test_bitwise_digests_compare_every_steps_parameters_gradients_and_norm(peer):
    step = {"params": ["p0", "p1"], "grads": ["g0", "g1"], "norm": "n"}
    assert peer.compare_digests([step, step], [step, dict(step)], [1, 2]) is None
    other = {**step, "grads": ["g0", "G1"]}
    assert peer.compare_digests([step, step], [step, other], [6, 7]) == "step 7: 1 of 2 grads not bit-equal (the first: #1)"
    assert peer.compare_digests([step], [{**step, "grads": ["g0"]}], [1]) == "step 1: 1 grads recorded, native 2"
    assert "params not bit-equal" in peer.compare_digests([step], [{**step, "params": ["P0", "p1"]}], [1])
    assert "norm is not bit-equal" in peer.compare_digests([step], [{**step, "norm": "m"}], [1])
    assert peer.compare_digests([step, step], [step], [1, 2]) == "1 steps' tensors recorded, native 2"
    assert "nothing to compare" in peer.compare_digests([], [], [])


def test_bitwise_cells_pass_only_when_the_losses_and_the_digests_are_equal(peer):
    step = {"params": ["p"], "grads": ["g"], "norm": "n"}
    native = peer.Outcome([(1, "8.1", "0.6")], 3.0, digests=[step])
    same = peer.Outcome([(1, "8.1", "0.6")], 3.0, digests=[dict(step)])
    assert peer.cell(same, native, bitwise=True) == ("equal, bitwise (1 steps' parameters and gradients)", True)
    apart = peer.Outcome([(1, "8.1", "0.6")], 3.0, digests=[{**step, "grads": ["h"]}])
    text, ok = peer.cell(apart, native, bitwise=True)
    assert not ok and "step 1: 1 of 1 grads not bit-equal" in text
    assert peer.cell(apart, native) == ("equal", True)  # without --bitwise only the logged values count
    unrecorded = peer.Outcome([(1, "8.1", "0.6")], 3.0)
    assert peer.table({"ddp": {"native": unrecorded, "sim": unrecorded}}, ["sim"], bitwise=True)[1] is False


def test_bitwise_runs_every_side_through_the_digest_module(peer, tmp_path, monkeypatch):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append((argv, kwargs["env"]))
        Path(kwargs["env"][peer.DIGESTS_VARIABLE]).write_text('{"params": [], "grads": [], "norm": "n"}\n')
        return subprocess.CompletedProcess(argv, 0, "step: 1  loss:  1.00000  grad_norm:  0.5000\n", "")

    monkeypatch.setattr(peer.subprocess, "run", fake_run)
    for side in ("native", "sim"):
        outcome = peer.run("py", side, "checkpoint", peer.CONFIGS["checkpoint"], tmp_path, tmp_path / "native",
                           tmp_path, 10, bitwise=True)
        assert outcome.digests == [{"params": [], "grads": [], "norm": "n"}] * 2  # the saving run's, the resumed one's
    (native, native_env), _, (sim, sim_env), _ = calls
    assert native[native.index(peer.DIGESTS_MODULE) - 1] == "-m" and "torchdevice" not in native
    assert "torchtitan.train" not in native + sim
    assert sim[sim.index("run") - 2:sim.index("run") + 3] == ["-m", "torchdevice", "run", "-m", peer.DIGESTS_MODULE]
    assert native_env["PYTHONPATH"].split(":") == [str(tmp_path / "native"), str(peer.DIGESTS)]
    assert sim_env["PYTHONPATH"] == str(peer.DIGESTS)
    assert (peer.DIGESTS / f"{peer.DIGESTS_MODULE}.py").is_file()


@pytest.fixture(scope="module")
def digests_module():
    return load_file("peer_torchtitan_digests", SCRIPT.parent / "peer" / "torchtitan" / "peer_torchtitan_digests.py")


def test_a_digest_tells_apart_one_ulp_a_dtype_and_a_shape(digests_module):
    import torch

    x = torch.randn(16, generator=torch.Generator().manual_seed(0))
    digest = digests_module.digest
    assert digest(x) == digest(x.clone()) and digest(None) is None
    assert digest(x) != digest(torch.nextafter(x, x + 1))  # every element one ulp up
    assert digest(x) != digest(x.view(4, 4)) and digest(x) != digest(x.double())
    assert digest(x.bfloat16()) != digest(x.half()) and digest(x.sum()) == digest(x.sum().clone())  # 0-dim too


def test_the_observed_clip_records_each_step_on_rank_0_only_and_returns_the_norm(digests_module, tmp_path):
    import torch

    weight = torch.nn.Parameter(torch.ones(3))
    weight.grad = torch.full((3,), 2.0)
    clip = lambda parameters, max_norm: torch.nn.utils.clip_grad_norm_(parameters, max_norm)  # noqa: E731
    path = tmp_path / "digests.jsonl"
    observed = digests_module.observed(clip, str(path), 0)
    norm = observed(iter([weight]), 1.0)
    clipped = weight.grad.clone()
    observed([weight], 1.0)
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert norm.item() == pytest.approx(12 ** 0.5) and first["norm"] == digests_module.digest(norm)
    assert first["grads"] == [digests_module.digest(torch.full((3,), 2.0))]  # before clipping
    assert second["grads"] == [digests_module.digest(clipped)] != first["grads"]  # clipped by the first call
    digests_module.observed(clip, str(tmp_path / "rank1.jsonl"), 1)([weight], 1.0)
    assert not (tmp_path / "rank1.jsonl").exists()
