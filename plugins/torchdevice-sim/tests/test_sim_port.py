"""The oracle of ``torchdevice port``: each CUDA- and MPS-written program of the project, ported, runs
natively on sim (``torchdevice_sim.load()``, then the program: no torchdevice, no translation) and prints
exactly the numbers the unported program prints when translated onto sim (``torchdevice run --backend sim``).

Every number of a program's output is compared (losses, accuracy, memory, RNG draws, sums), except the
measured timings, which must be present and positive. ``examples/ddp_train.py`` runs on two sim
processes under torchrun, both ways: its losses and every rank's parameters are compared.
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
    "examples/ddp_train.py": ("cuda", [], "torchrun"),  # checked by its own test, under torchrun
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
    for rel, (family, _, how) in PROGRAMS.items():
        if how == "torchrun":
            continue
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

    single = [rel for rel in PROGRAMS if rel in ported]
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(single, pool.map(both, single)))


@pytest.mark.parametrize("program", [rel for rel, (_, _, how) in PROGRAMS.items() if how != "torchrun"])
def test_the_ported_program_prints_the_translated_programs_numbers(runs, program):
    translated, native, unported = runs[program]
    assert unported == UNPORTED.get(program, [])
    assert translated.keys() == native.keys() and translated
    for key, value in translated.items():
        if key in MEASURED:
            assert isinstance(native[key], (int, float)) and native[key] > 0, key
        else:
            assert native[key] == value, (key, native[key], value)


def _torchrun(args: list[str], cwd: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env(), cwd=cwd)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_the_ported_ddp_example_trains_as_the_translated_one_on_two_sim_processes(tmp_path):
    """examples/ddp_train.py (NCCL, one GPU per rank) ported, under torchrun on two sim devices: the
    losses and every rank's final parameters equal those of the unported program translated onto sim."""
    import torch

    rel = "examples/ddp_train.py"
    result = port_source((ROOT / rel).read_text(), rel, ("cuda",))
    assert result.unported == []
    (tmp_path / "ddp_train.py").write_text(result.code)
    (tmp_path / "native.py").write_text(NATIVE.replace("; ", "\n"))
    _torchrun(["native.py", "ddp_train.py", "--out", str(tmp_path / "native")], tmp_path)
    _torchrun(["-m", "torchdevice", "run", "--backend", "sim", str(ROOT / rel), "--out", str(tmp_path / "translated")],
              ROOT)
    for name in ("losses.pt", "rank0.pt", "rank1.pt"):
        native, translated = (torch.load(tmp_path / how / name) for how in ("native", "translated"))
        if isinstance(native, dict):
            assert native.keys() == translated.keys() and all(torch.equal(native[k], translated[k]) for k in native)
        else:
            assert torch.equal(native, translated) and len(native) > 0


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
