"""The oracle of ``torchdevice port``: each CUDA- and MPS-written program of the project, ported, runs
natively on sim (``torchdevice_sim.load()``, then the program: no torchdevice, no translation) and prints
exactly the numbers the unported program prints when translated onto sim (``torchdevice run --backend sim``).

Every number of a program's output is compared (losses, accuracy, memory, RNG draws, sums), except the
measured timings, which must be present and positive.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from torchdevice.port import port_source

ROOT = Path(__file__).resolve().parents[3]
#: program -> (source family, arguments, where it writes its JSON: "out" (--out FILE) or "stdout")
PROGRAMS = {
    "examples/train_cuda.py": ("cuda", ["--quiet"], "out"),
    "examples/inference_cuda.py": ("cuda", [], "out"),
    "examples/streams_cuda.py": ("cuda", [], "out"),
    "tests/programs/compare_mlp.py": ("cuda", [], "text"),
    "tests/programs/profile_cuda.py": ("cuda", [], "stdout"),
    "tests/programs/train_mps.py": ("mps", [], "stdout"),
}
#: measured, so present and positive but never equal between two runs
MEASURED = {"train_ms", "elapsed_ms", "middle_ms", "images_per_s"}
#: sites the port leaves, reported (exit status 1), per program
UNPORTED = {"tests/programs/profile_cuda.py": ["torch.profiler.ProfilerActivity.CUDA"]}
# Natively: sim loaded as torch's accelerator, then the ported program as __main__, nothing else.
NATIVE = ("import runpy, sys, torchdevice_sim; torchdevice_sim.load(); sys.argv = sys.argv[1:]; "
          "runpy.run_path(sys.argv[0], run_name='__main__')")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}


def _output(args: list[str], out: Path | None, cwd: Path) -> str:
    done = subprocess.run(args + (["--out", str(out)] if out else []), capture_output=True, text=True,
                          timeout=600, env=_env(), cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return out.read_text() if out else done.stdout


def _numbers(text: str, how: str) -> dict[str, object]:
    """The numbers a program printed, by name (JSON) or by position (text lines)."""
    if how == "text":
        return {str(i): float(n) for i, n in enumerate(re.findall(r"-?\d+\.\d+", text))}
    data = json.loads(text)
    return {k: v for k, v in data.items() if not isinstance(v, str)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[dict, dict, list[str]]]:
    """Each program ported once, then run both ways (two processes at a time)."""
    tmp = tmp_path_factory.mktemp("port")
    ported: dict[str, tuple[Path, list[str]]] = {}
    for rel, (family, _, _) in PROGRAMS.items():
        target = tmp / Path(rel).name
        result = port_source((ROOT / rel).read_text(), rel, (family,))
        target.write_text(result.code)
        ported[rel] = (target, [u.api for u in result.unported])
    shutil.copytree(ROOT / "examples" / "ported", tmp / "ported")  # what the examples import, if anything

    def both(rel: str) -> tuple[dict, dict, list[str]]:
        family, args, how = PROGRAMS[rel]
        target, unported = ported[rel]
        stem = Path(rel).stem
        out = (lambda name: tmp / f"{stem}-{name}.json") if how == "out" else (lambda name: None)
        translated = _output([sys.executable, "-m", "torchdevice", "run", "--backend", "sim", "--source", family,
                              str(ROOT / rel), *args], out("translated"), ROOT)
        native = _output([sys.executable, "-c", NATIVE, str(target), *args], out("native"), tmp)
        return _numbers(translated, how), _numbers(native, how), unported

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(PROGRAMS, pool.map(both, PROGRAMS)))


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_the_ported_program_prints_the_translated_programs_numbers(runs, program):
    translated, native, unported = runs[program]
    assert unported == UNPORTED.get(program, [])
    assert translated.keys() == native.keys() and translated
    for key, value in translated.items():
        if key in MEASURED:
            assert isinstance(native[key], (int, float)) and native[key] > 0, key
        else:
            assert native[key] == value, (key, native[key], value)


def _leftovers(code: str) -> list[str]:
    """Device-family code left in a source: names outside strings and comments, and device literals."""
    found, tokens = [], list(tokenize.generate_tokens(io.StringIO(code).readline))
    bare = " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
    found += [s for s in ("torch . cuda .", "torch . mps .", ". cuda (") if s in bare]
    found += [t.string for t in tokens if t.type == tokenize.STRING and t.string.strip("'\"") in ("cuda", "mps")]
    return found


def test_the_ported_programs_import_torch_alone_and_name_no_device_family():
    for rel, (family, _, _) in PROGRAMS.items():
        code = port_source((ROOT / rel).read_text(), rel, (family,)).code
        assert not re.search(r"^\s*(import|from)\s+torchdevice", code, re.M), rel
        assert _leftovers(code) == [], rel
        assert _leftovers((ROOT / rel).read_text()), rel  # the check sees what the port removed
