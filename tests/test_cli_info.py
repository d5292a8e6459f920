"""``torchdevice info`` through the installed console script and ``python -m torchdevice``.

These run with whatever plugins are installed in this environment (in tox:
the five accelerator plugins). On a machine without accelerators, cpu is the
one selected backend; every other installed backend is listed with why it was
not selected.
"""
from __future__ import annotations

import re
import sys
from importlib.metadata import version

import pytest
from helpers import PLUGIN_FIXTURES, run_command, run_concurrently, run_python, run_torchdevice, write_distribution

from torchdevice.cpu import CPUBackend


def _an_unavailable_backend() -> str | None:
    import torchdevice

    return next((r.name for r in torchdevice.backends() if not r.available and r.device_type), None)


@pytest.fixture(scope="module")
def runs():
    unavailable = _an_unavailable_backend()
    jobs = {
        "json": (run_torchdevice, ("info", "--json"), {}),
        "text": (run_torchdevice, ("info",), {}),
        "nope": (run_torchdevice, ("info",), {"env": {"TORCHDEVICE_BACKEND": "nope"}}),
        "module_nope_json": (run_command, ([sys.executable, "-m", "torchdevice", "info", "--json"],),
                             {"env": {"TORCHDEVICE_BACKEND": "nope"}}),
    }
    if unavailable:
        jobs["unavailable"] = (run_torchdevice, ("info",), {"env": {"TORCHDEVICE_BACKEND": unavailable}})
        jobs["module_unavailable"] = (run_command, ([sys.executable, "-m", "torchdevice", "info"],),
                                      {"env": {"TORCHDEVICE_BACKEND": unavailable}})
    return run_concurrently(jobs)


def accelerator_present() -> bool:
    import torch

    return any(
        getattr(torch, name, None) is not None and getattr(torch, name).is_available()
        for name in ("cuda", "xpu", "mps", "mtia")
    )


def test_info_json_lists_cpu_available_and_selected(runs):
    result = runs["json"]
    assert result.returncode == 0, result
    info = result.json()
    assert info["version"] == version("torchdevice")
    assert info["error"] is None
    cpu = [b for b in info["backends"] if b["name"] == "cpu"]
    assert len(cpu) == 1, info["backends"]
    cpu = cpu[0]
    assert cpu["available"] is True and cpu["automatic"] is True
    assert cpu["distribution"] == "torchdevice" and cpu["version"] == version("torchdevice")
    assert cpu["device_type"] == "cpu"
    selected = [b["name"] for b in info["backends"] if b["selected"]]
    assert selected == [info["selected"]]
    if not accelerator_present():
        assert info["selected"] == "cpu" and cpu["selected"] is True
    for backend in info["backends"]:
        assert set(backend) >= {"name", "plugin", "distribution", "version", "device_type", "priority",
                                "available", "reason", "automatic", "selected", "problems"}
        if not backend["available"]:
            assert backend["reason"], backend  # every unavailable backend says why


def test_info_table_matches_json(runs):
    result = runs["text"]
    assert result.returncode == 0, result
    info = runs["json"].json()
    table, _, descriptions = result.stdout.partition("\n\n")  # the table, then one description per backend
    lines = [line for line in table.splitlines() if line.strip() and not line.startswith("problem: ")]
    header = lines[0].split()
    assert header == ["backend", "plugin", "version", "device", "priority", "available", "selected", "notes"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {b["name"] for b in info["backends"]}
    cpu = rows["cpu"]
    assert cpu[:6] == ["cpu", "torchdevice", version("torchdevice"), "cpu", "0", "yes"]
    assert ("*" in cpu) == (info["selected"] == "cpu")
    for backend in info["backends"]:
        expected = ("yes" if backend["automatic"] else "on") if backend["available"] else "no"
        assert rows[backend["name"]][5] == expected, (backend, rows[backend["name"]])
        if backend["description"]:
            described = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in descriptions.splitlines()
                         if line.strip() and not line.startswith("problem: ")}
            assert described[backend["name"]] == backend["description"], described


def test_unknown_backend_from_env_fails_listing_cpu(runs):
    result = runs["nope"]
    assert result.returncode != 0, result
    assert "unknown torchdevice backend 'nope' (from TORCHDEVICE_BACKEND)" in result.stderr
    known = result.stderr.split("known backends:")[1].split(";")[0]
    available = result.stderr.split("available here:")[1]
    assert "cpu" in [k.strip() for k in known.split(",")]
    assert "cpu" in [a.strip() for a in available.split(",")]
    # the table is still printed, with nothing selected
    assert "cpu" in result.stdout and "*" not in result.stdout


def test_python_m_torchdevice_json_reports_the_error(runs):
    result = runs["module_nope_json"]
    assert result.returncode != 0, result
    info = result.json()
    assert info["selected"] is None
    assert "'nope'" in info["error"] and "cpu" in info["error"]
    assert not any(b["selected"] for b in info["backends"])


@pytest.mark.parametrize("key", ["nope", "module_nope_json", "unavailable", "module_unavailable"])
def test_a_selection_error_is_reported_once_listing_every_available_backend(runs, key):
    if key not in runs:
        pytest.skip("every installed backend is available here")
    result = runs[key]
    assert result.returncode == 2, result
    assert "activation failed" not in result.stderr, result  # the command does not also warn
    lines = [line for line in result.stderr.splitlines() if "(from TORCHDEVICE_BACKEND)" in line]
    text = lines[0] if lines else result.json()["error"]
    assert len(lines) <= 1, result
    available = {a.strip() for a in text.split("available here:")[1].split(",")}
    assert available == {b["name"] for b in runs["json"].json()["backends"] if b["available"]}, text


def test_info_names_a_plugin_whose_hooks_lack_the_marker(tmp_path):
    write_distribution(tmp_path, "unmarked-plugins", "0.1",
                       {"torchdevice": {"unmarked": "td_unmarked:plugin", "bare": "td_unmarked:bare"}},
                       [PLUGIN_FIXTURES / "td_unmarked.py"])
    result = run_torchdevice("info", env={"TORCHDEVICE_PLUGINS": "unmarked,bare"}, pythonpath=[tmp_path])
    assert result.returncode == 0, result
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert ("problem: plugin 'bare' (register): implements no torchdevice hook (did you forget @hookimpl?): "
            "torchdevice_backends lacks the marker") in problems, result
    assert ("problem: plugin 'unmarked' (register): defines torchdevice_backends without @hookimpl, so torchdevice "
            "never calls it (did you forget @hookimpl?)") in problems, result


def test_python_m_torchdevice_without_arguments_lists_the_commands():
    result = run_command([sys.executable, "-m", "torchdevice"])
    assert result.returncode == 0, result
    assert result.stdout == run_torchdevice("--help").stdout
    for command in ("info", "matrix", "scan", "run"):
        assert f"    {command} " in result.stdout, result


def test_a_misspelled_backend_on_the_command_line_or_in_the_env_suggests_the_known_name(tmp_path):
    import torchdevice

    if "cuda" not in {r.name for r in torchdevice.backends() if r.device_type}:
        pytest.skip("no cuda backend installed here (torchdevice-cuda)")
    program = tmp_path / "program.py"
    program.write_text("print('ran')\n")
    results = run_concurrently({
        "flag": (run_torchdevice, ("run", "--backend", "cdua", str(program)), {}),
        "env": (run_torchdevice, ("run", str(program)), {"env": {"TORCHDEVICE_BACKEND": "cdua"}}),
    })
    for source, result in (("--backend", results["flag"]), ("TORCHDEVICE_BACKEND", results["env"])):
        assert result.returncode == 2 and "ran" not in result.stdout, result
        assert f"unknown torchdevice backend 'cdua' (from {source}; did you mean 'cuda'?)" in result.stderr, result


def test_backend_mps_where_mps_does_not_run_suggests_source_mps(tmp_path):
    import torch

    if torch.backends.mps.is_available():
        pytest.skip("the mps backend runs here")
    program = tmp_path / "program.py"
    program.write_text("print('ran')\n")
    results = run_concurrently({
        "flag": (run_torchdevice, ("run", "--backend", "mps", str(program)), {}),
        "env": (run_python, ("import torch",), {"env": {"TORCHDEVICE_BACKEND": "mps"}}),
    })
    for result in results.values():
        assert "`torchdevice run --source mps`" in result.stderr, result
    assert results["flag"].returncode == 2 and "ran" not in results["flag"].stdout


def test_info_shows_each_backends_description(runs):
    # the module's info runs (every plugin installed here): a line per described backend, names padded alike
    table = runs["text"]
    assert table.returncode == 0, str(table)
    assert re.search(rf"^cpu +{re.escape(CPUBackend.description)}$", table.stdout, re.M), table.stdout
    data = runs["json"].json()
    assert {b["name"]: b["description"] for b in data["backends"]}["cpu"] == CPUBackend.description
