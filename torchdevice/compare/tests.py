"""``torchdevice compare -m pytest ARGS...``: the tests whose outcome differs between the two backends.

pytest runs once per backend, each translated in a process of its own (``torchdevice run --backend X -m pytest
-p no:cacheprovider -q -rA --junitxml=FILE ARGS...``); the outcomes in the two JUnit XML files (passed, failed,
error, skipped) are compared test by test. No op is shadowed at this level.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET


def outcomes(junit_xml: str) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, first line of its message)}`` from a JUnit XML file pytest wrote."""
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "").strip().splitlines()[0][:200] if child.get("message") else ""
                break
        found[test] = (outcome, message)
    return found


def compare_outcomes(ref: dict[str, tuple[str, str]], out: dict[str, tuple[str, str]],
                     backends: tuple[str, str]) -> list[dict]:
    """The tests whose outcome differs (one missing on one side counts as ``not run``), in B's order."""
    differ = []
    for test in [*out, *(t for t in ref if t not in out)]:
        a, b = ref.get(test, ("not run", "")), out.get(test, ("not run", ""))
        if a[0] != b[0]:
            differ.append({"test": test, backends[0]: a[0], backends[1]: b[0], "message": b[1] or a[1]})
    return differ


def _rootdir(args: list[str]) -> list[str]:
    """``--rootdir`` at the tests named (their common folder), unless given: test ids, which name the
    tests in both runs, are relative to it, whatever ini file lies above."""
    if any(a.startswith("--rootdir") for a in args):
        return []
    paths = [os.path.abspath(a.split("::")[0]) for a in args if not a.startswith("-") and os.path.exists(a.split("::")[0])]
    if not paths:
        return []
    common = os.path.commonpath(paths)
    return [f"--rootdir={common if os.path.isdir(common) else os.path.dirname(common)}"]


def run_tests(backends: tuple[str, str], args: list[str]) -> dict:
    """Run pytest on both backends and compare: ``{"compared", "differ", "exit_status"}``."""
    results = []
    statuses = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            xml = os.path.join(tmp, f"{backend}.xml")
            cmd = [sys.executable, "-m", "torchdevice", "run", "--backend", backend, "-m", "pytest",
                   "-p", "no:cacheprovider", "-q", "-rA", f"--junitxml={xml}", *_rootdir(args), *args]
            # not the calling pytest's variables (a compare run from inside a test session, xdist's workers)
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "TORCHDEVICE_BACKEND"}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            statuses[backend] = proc.returncode
            if not os.path.exists(xml):
                raise RuntimeError(f"pytest on {backend} wrote no results (exit status {proc.returncode}): "
                                   f"{(proc.stdout + proc.stderr).strip()[-500:]}")
            results.append(outcomes(xml))
    differ = compare_outcomes(results[0], results[1], backends)
    return {"compared": len(set(results[0]) | set(results[1])), "differ": differ, "exit_status": statuses}
