"""docs/tutorial.md, fast: the plugin and the tests it writes work in-process with this checkout.

The whole tutorial (venvs, wheels, the kit on the installed wheel) runs in tests/test_packaging.py,
under ``tox -e packaging``; this catches drift between the tutorial's code and the API on every run.
"""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchdevice.testing import check_backend

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
_FILE = re.compile(r"<!-- tutorial: file (\S+) -->\n```\w*\n(.*?)\n```", re.DOTALL)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("torchdevice-toychip")
    files = dict(_FILE.findall(TUTORIAL.read_text()))
    assert set(files) == {"pyproject.toml", "README.md", "torchdevice_toychip/__init__.py", "tests/test_toychip.py"}
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text + "\n")
    return root


def test_the_tutorial_plugin_passes_every_check(project, monkeypatch):
    monkeypatch.syspath_prepend(str(project))
    try:
        module = importlib.import_module("torchdevice_toychip")
        report = check_backend(module.ToyChipBackend(), raise_on_failure=False)
    finally:
        sys.modules.pop("torchdevice_toychip", None)
    # every check runs and passes but queues: a host-synchronous backend has no sleep to make pending work with
    assert report.ok and all(r.ok for r in report.results if r.name != "queues"), str(report)
    assert {r.name: r.ok for r in report.results}["queues"] is None, str(report)


def test_the_tutorial_tests_pass(project):
    env_path = [str(project), *sys.path]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project,
                          capture_output=True, text=True, timeout=600,
                          env={**_environ(), "PYTHONPATH": ":".join(p for p in env_path if p)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b\d+ passed, 1 skipped\b", proc.stdout), proc.stdout  # the queues check, as the tutorial says


def _environ() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
