"""Logging: quiet by default; TORCHDEVICE_LOG=debug logs each translated call site once, with file:line."""
from __future__ import annotations

import sys

import pytest
import torch
from helpers import Result, clean_env, run_concurrently, torchdevice_script

from torchdevice import trace, translate

PROGRAM = """\
import torch
for _ in range(5):
    a = torch.zeros(2, device="cuda")                # line 3: five calls, one site
b = torch.ones(2, device="cuda")                     # line 4
for _ in range(3):
    with torch.autocast("cuda"):                     # line 6
        pass
scaler = torch.amp.GradScaler("cuda")                # line 8
c = torch.zeros(2, device="cpu")                     # line 9: native, not translated
print("program output", a.device.type, b.device.type)
"""


def _run(args, env=None, timeout=180) -> Result:
    import subprocess

    proc = subprocess.run(args, env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    return Result(list(map(str, args)), proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    script = tmp_path_factory.mktemp("logging") / "prog.py"
    script.write_text(PROGRAM)
    td = torchdevice_script()
    jobs = {
        "quiet": (_run, ([td, "run", str(script)],), {}),
        "debug": (_run, ([td, "run", str(script)],), {"env": {"TORCHDEVICE_LOG": "debug"}}),
        "info": (_run, ([td, "run", str(script)],), {"env": {"TORCHDEVICE_LOG": "info"}}),
        "zero_code": (_run, ([sys.executable, str(script)],),
                      {"env": {"TORCHDEVICE_BACKEND": "cpu", "TORCHDEVICE_LOG": "debug"}}),
        "zero_code_quiet": (_run, ([sys.executable, str(script)],), {"env": {"TORCHDEVICE_BACKEND": "cpu"}}),
    }
    return str(script), run_concurrently(jobs)


def test_nothing_printed_by_default(runs):
    _, results = runs
    for key in ("quiet", "zero_code_quiet"):
        r = results[key]
        assert r.returncode == 0, r
        assert r.stdout == "program output cpu cpu\n"
        assert r.stderr == "", r


@pytest.mark.parametrize("key", ["debug", "zero_code"])
def test_debug_logs_each_call_site_once(runs, key):
    script, results = runs
    r = results[key]
    assert r.returncode == 0, r
    assert r.stdout == "program output cpu cpu\n"
    debug = [line for line in r.stderr.splitlines() if line.startswith("torchdevice DEBUG")]
    for lineno, api in ((3, "torch.zeros"), (4, "torch.ones"), (6, "torch.autocast"), (8, "torch.amp.GradScaler")):
        site = [line for line in debug if f"{script}:{lineno}:" in line]
        assert len(site) == 1, (lineno, r.stderr)  # once per site, however many calls
        assert api in site[0]
    assert not [line for line in debug if f"{script}:9:" in line]  # device="cpu" is not translated
    assert all(script in line for line in debug), "every record names the program's line, not torch's"


def test_info_level(runs):
    _, results = runs
    r = results["info"]
    assert r.returncode == 0, r
    assert "torchdevice INFO" in r.stderr and "backend 'cpu'" in r.stderr
    assert "DEBUG" not in r.stderr


def test_off_means_no_trace_calls(on_cpu, monkeypatch):
    """With logging and reports off the wrappers never call trace.note (one bool test per call)."""
    was = translate.is_patched()
    translate.patch()
    try:
        assert trace.active is False

        def fail(*args):
            raise AssertionError("trace.note called while tracing is off")

        monkeypatch.setattr(trace, "note", fail)
        torch.zeros(1, device="cuda")
        with torch.autocast("cuda"):
            pass
        torch.amp.GradScaler("cuda")
        torch.is_autocast_enabled("cuda")
    finally:
        if not was:
            translate.unpatch()
