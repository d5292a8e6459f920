"""scripts/sim_truth.py and sim_truth_peers.py: what makes a row fall short (no program run: the truth run
itself is by hand, see docs/testing.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_file

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str):
    return load_file(name, SCRIPTS / f"{name}.py")


@pytest.fixture(scope="module")
def truth():
    return _load("sim_truth")


@pytest.fixture(scope="module")
def peers():
    return _load("sim_truth_peers")


TRAINER = "tests/frameworks/trainer_dataparallel.py"


def test_the_trainer_oracle_runs_it_over_one_device_and_wants_the_same_numbers(truth, monkeypatch):
    seen = []

    def one_device(cmd, env, cwd):
        seen.append(env)
        return 0, 1.0, "", '{"losses": [3.9084, 3.9040], "param_sum": 159.29121}\n'

    monkeypatch.setattr(truth, "_run", one_device)
    text, ok = truth._oracle(TRAINER, [], {}, truth.ROOT, '{"losses": [3.9084, 3.9040], "param_sum": 159.29121}\n')
    assert ok and text.startswith("2 devices against 1: within") and seen == [{"CUDA_VISIBLE_DEVICES": "0"}]
    text, ok = truth._oracle(TRAINER, [], {}, truth.ROOT, '{"losses": [3.9084, 3.9041], "param_sum": 159.29121}\n')
    assert not ok and "NOT within" in text
    monkeypatch.setattr(truth, "_run", lambda cmd, env, cwd: (1, 1.0, "RuntimeError: boom", ""))
    assert truth._oracle(TRAINER, [], {}, truth.ROOT, "") == ("2 devices against 1: failed: RuntimeError: boom", False)
    assert truth._oracle("examples/train_cuda.py", [], {}, truth.ROOT, "") == ("-", True)


def test_the_transformers_row_counts_each_side_and_names_the_native_passes_lost(peers, monkeypatch):
    sides = {"native": {"a": "passed", "b": "passed", "g": "skipped"},
             "translated (cpu)": {"a": "passed", "b": "passed", "g": "passed"},
             "translated (sim)": {"a": "passed", "b": "failed", "g": "failed"}}

    def peer_run(args, cwd=None):
        Path(args[args.index("--json") + 1]).write_text(json.dumps({"sides": sides}))
        return 1, 3.0, ""

    monkeypatch.setattr(peers, "_script", peer_run)
    row = peers.transformers_tests()
    assert not row["ok"]
    assert "translated (cpu) 3 passed, 0 failed, 0 skipped;" in row["result"]
    assert row["result"].endswith("translated (sim) 1 passed, 2 failed, 0 skipped, 1 native passes lost: b")


def test_a_transformers_run_that_wrote_nothing_is_a_failed_row(peers, monkeypatch):
    monkeypatch.setattr(peers, "_script", lambda args, cwd=None: (2, 1.0, "no module named transformers"))
    row = peers.transformers_tests()
    assert not row["ok"] and row["result"] == "failed (2): no module named transformers"


def test_a_library_that_does_not_load_is_named_with_its_error_and_one_that_loads_runs_under_its_python(peers,
                                                                                                     monkeypatch):
    def probe(args, cwd=None, python=None):
        return (1, 0.5, "Traceback\nOSError: libc10_cuda.so\n") if "torchvision" in args[-1] else (0, 0.5, "2.14.1\n")

    checked = []
    monkeypatch.setattr(peers, "_script", probe)
    programs, rows = peers.vision(lambda program, python: checked.append((program, python)) or {"ok": True},
                                  "/envs/newest/bin/python")
    assert [r["peer"] for r in rows] == ["torchvision program (`tests/frameworks/torchvision_detection_amp.py`)"]
    assert rows[0]["result"] == "not run: torchvision does not load beside this torch (OSError: libc10_cuda.so)"
    assert checked == [("tests/frameworks/timm_train.py", "/envs/newest/bin/python")]
    assert programs == [{"ok": True, "environment": "torch 2.14.1, /envs/newest/bin/python"}]


def test_the_peer_programs_exist_and_are_written_for_cuda(peers, truth):
    for program in peers.PROGRAMS + list(peers.VISION) + list(truth.ORACLES):
        text = (truth.ROOT / program).read_text()
        assert "torch.cuda.is_available()" in text and "sim" not in text.replace("sim's", "")


def test_a_difference_only_in_the_machines_own_answers_is_named_and_any_other_is_not(truth):
    program = "tests/programs/accelerator_mnist.py"
    line = {"losses": [2.3, 2.1], "evaluated": 16.0, "device_count": 1, "allocated": 4096}

    def whole(backend_line: dict, lines: int = 1) -> dict:
        return {"lines": [lines, lines], "first_difference": {
            "line": 1, "reference": json.dumps(line), "backend": json.dumps(backend_line)}}

    sim = {**line, "device_count": 2, "allocated": 5120}
    assert truth.machine_facts(program, whole(sim)) == "machine facts (allocated, device_count)"
    assert truth.machine_facts(program, whole({**sim, "losses": [2.3, 2.2]})) == ""  # a number of the computation
    assert truth.machine_facts(program, whole(sim, lines=2)) == ""  # a later line was not compared
    assert truth.machine_facts("examples/train_cuda.py", whole(sim)) == ""  # a program with no such facts
    assert truth.machine_facts(program, {"lines": [1, 1], "first_difference": {
        "line": 1, "reference": "loss 2.3", "backend": "loss 2.4"}}) == ""
