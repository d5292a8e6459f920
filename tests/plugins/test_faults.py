"""Fault injection: a misbehaving plugin is reported and skipped; `import torch` and the other
backends keep working (zero-code activation by name and automatic, and `torchdevice info`).

The plugin is tests/fixtures/plugins/td_faulty.py, installed as a fake distribution; the
fault it commits is chosen by ``TD_FAULT``. Each case runs in two fresh processes: the backend named
(``TORCHDEVICE_BACKEND=cpu``), and automatic selection, which then prints ``torchdevice info --json`` (the
command's own code, called in that process).
"""
from __future__ import annotations

import json
import sys

import pytest
from helpers import run_command, run_concurrently, write_plugin

PROGRAM = "import torch; print(torch.zeros(1, device='cuda').device)"
# the device, then what `torchdevice info --json` prints in the same process
PROGRAM_AND_INFO = PROGRAM + "; import sys, torchdevice.cli; sys.exit(torchdevice.cli.main(['info', '--json']))"

# fault -> text the problem report must contain
FAULTS = {
    "single_spec": "must return a list of BackendSpec",
    "int": "must return a list of BackendSpec",
    "generator_raises": "generator broke half-way",
    "priority_none": "priority None, not an int",
    "priority_str": "priority 'high', not an int",
    "bad_name": "'Faulty Chip!' is not lowercase",
    "unknown_device_type": "device_type 'warpdrive'",
    "hook_baseexception": "faulty exploded in availability",
    "import_baseexception": "faulty exploded at import",
    "import_systemexit": "SystemExit: 3",
    "count0": "returned 0, not at least 1",
    # a plugin sleeping 60 s is interrupted after TORCHDEVICE_PLUGIN_TIMEOUT=1
    "hang_import": "importing plugin 'faulty' took longer than 1 s",
    "hang_backends": "plugin 'faulty''s torchdevice_backends took longer than 1 s",
    "hang_availability": "plugin 'faulty''s torchdevice_availability took longer than 1 s",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("faulty-site")
    write_plugin(site, "faulty-plugin", "0.1", "faulty", "td_faulty")
    return site


def _runs(site, fault):
    base = {"TD_FAULT": fault, "TORCHDEVICE_PLUGINS": "faulty", "TORCHDEVICE_PLUGIN_TIMEOUT": "1"}
    py = sys.executable
    return {
        "named": (run_command, ([py, "-c", PROGRAM],), {"env": {**base, "TORCHDEVICE_BACKEND": "cpu"}, "pythonpath": [site]}),
        "auto": (run_command, ([py, "-c", PROGRAM_AND_INFO],),
                 {"env": {**base, "TORCHDEVICE_AUTO": "1"}, "pythonpath": [site]}),
    }


def _device_and_info(run) -> tuple[str, dict]:
    """The automatic run's printed device and its `info --json` document."""
    device, _, info = run.stdout.partition("\n")
    return device.strip(), json.loads(info)


@pytest.fixture(scope="module")
def results(site):
    jobs = {}
    for fault in [*FAULTS, "hijack"]:
        for key, job in _runs(site, fault).items():
            jobs[fault, key] = job
    return run_concurrently(jobs, workers=2)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_is_reported_and_cpu_still_translates(results, fault):
    for mode in ("named", "auto"):
        run = results[fault, mode]
        assert run.returncode == 0 and "Traceback" not in run.stderr, str(run)
        assert "activation failed" not in run.stderr, str(run)
    assert results[fault, "named"].stdout.strip() == "cpu", str(results[fault, "named"])
    device, data = _device_and_info(results[fault, "auto"])
    assert device == "cpu", str(results[fault, "auto"])
    assert data["selected"] == "cpu" and data["error"] is None, data
    problems = "\n".join(data["problems"]) + "\n".join(
        p for b in data["backends"] for p in b["problems"] + [b["reason"]])
    assert FAULTS[fault] in problems, problems


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_automatic_selection_warns_once_naming_the_plugin_it_passed_over(results, fault):
    auto = results[fault, "auto"].stderr
    warnings = [line for line in auto.splitlines() if "automatic selection chose 'cpu' after passing over" in line]
    assert len(warnings) == 1 and "'faulty'" in warnings[0] and FAULTS[fault] in warnings[0], auto
    assert "passing over" not in results[fault, "named"].stderr  # a backend asked for by name: nothing passed over


def test_a_plugin_cannot_answer_for_a_backend_it_did_not_declare(results):
    # td_faulty answers availability False and count 0 for every name; only its own counts
    named = results["hijack", "named"]
    assert named.returncode == 0 and named.stdout.strip() == "cpu", str(named)
    device, data = _device_and_info(results["hijack", "auto"])
    assert results["hijack", "auto"].returncode == 0 and device == "cpu", str(results["hijack", "auto"])
    backends = {b["name"]: b for b in data["backends"]}
    assert backends["cpu"]["available"] and data["selected"] == "cpu", data
    assert not backends["faulty"]["available"]


def test_subprocess_tests_ignore_a_third_party_plugin_installed_here(site, monkeypatch):
    """A vendor's automatic plugin installed in the test environment (td_faulty, healthy, priority
    500) must not change what the suite's subprocesses select: clean_env disables it."""
    import importlib

    import helpers

    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert helpers.foreign_entry_points() == ["faulty"]
    env = helpers.clean_env({"TORCHDEVICE_AUTO": "1"}, pythonpath=[site])
    assert env["TORCHDEVICE_DISABLE_PLUGINS"] == "faulty"
    run = run_command([sys.executable, "-c", "import torchdevice; print(torchdevice.current_backend())"],
                      env={"TORCHDEVICE_AUTO": "1"}, pythonpath=[site])
    assert run.returncode == 0 and run.stdout.strip() == "cpu", str(run)
    picked = run_command([sys.executable, "-c", "import torchdevice; print(torchdevice.current_backend())"],
                         env={"TORCHDEVICE_PLUGINS": "faulty"}, pythonpath=[site])
    assert picked.stdout.strip() == "faulty", str(picked)  # a test that picks plugins gets them


def test_a_named_backend_that_hangs_is_bounded_and_reported(site):
    env = {"TD_FAULT": "hang_availability", "TORCHDEVICE_PLUGINS": "faulty", "TORCHDEVICE_PLUGIN_TIMEOUT": "1",
           "TORCHDEVICE_BACKEND": "faulty"}
    run = run_command([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], env=env,
                      pythonpath=[site], timeout=40)  # the plugin sleeps 60 s
    assert run.returncode == 0, str(run)
    assert "activation failed" in run.stderr and "took longer than 1 s" in run.stderr, str(run)


def test_a_bad_timeout_value_warns_and_keeps_the_default(site):
    env = {"TORCHDEVICE_PLUGINS": "faulty", "TORCHDEVICE_PLUGIN_TIMEOUT": "soon", "TORCHDEVICE_AUTO": "1"}
    run = run_command([sys.executable, "-c", "import torch; print(torch.zeros(1, device='cuda').device)"], env=env,
                      pythonpath=[site])
    assert run.returncode == 0 and run.stdout.strip() == "cpu", str(run)
    assert "TORCHDEVICE_PLUGIN_TIMEOUT='soon' is not a number of seconds" in run.stderr, str(run)
