"""Peer run: transformers' own model tests, natively and through ``torchdevice run``, compared.

    python scripts/peer_transformers.py [--models bert llama gpt2] [--backends cpu,sim] [--workdir .peer/transformers]
                                        [-k EXPR] [--racecheck] [--json OUT]

Run it with the interpreter of an environment that has transformers (5.23.0 is what docs/testing.md
reports), `parameterized` (its tests import it) and torchdevice installed. It downloads the sdist of the
installed transformers version (``pip download --no-binary``; cached in the work directory), takes its
``tests/test_modeling_common.py``
(``ModelTesterMixin``: the ~300 tests every transformers model runs), stubs the two helper modules the
sdist does not ship (``tests/exporters/test_export.py``, ``tests/generation/test_utils.py``: their mixins
are not used here), and adds a tiny BERT, Llama and GPT-2 configuration (``scripts/peer/transformers/glue_*.py``:
the only code of ours). Then it runs ``pytest`` over them natively, and once per backend of ``--backends``
(default ``cpu``) as ``torchdevice run --backend BACKEND -m pytest`` (there
``transformers.testing_utils.torch_device`` is ``"cuda"``, so the tests marked GPU-only run too), and
compares each translated side's outcomes per test with the native side's, from the JUnit XML of each.

Exit status 1 when a test that passes natively does not pass on some backend, or when no test passed
natively (the comparison would prove nothing); the table has a row per side, and for each backend the
regressions are listed, and the tests that run only translated (GPU-only natively skipped) with their outcome.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUE = ROOT / "scripts" / "peer" / "transformers"
STUBS = {
    "exporters/test_export.py": "class ExportTesterMixin:  # stub: the sdist does not ship tests/exporters\n    pass\n",
    "generation/test_utils.py": "class GenerationTesterMixin:  # stub: the sdist does not ship tests/generation\n"
                                "    pass\n",
}


def _installed_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import transformers; print(transformers.__version__)"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def stage(python: str, workdir: Path, models: list[str]) -> Path:
    """Lay out ``workdir/tests`` (the sdist's common tests, the stubs, the glue); return the tests dir."""
    version = _installed_version(python)
    sdist_dir = workdir / "sdist"
    sdist = sdist_dir / f"transformers-{version}.tar.gz"
    if not sdist.exists():
        sdist_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                        f"transformers=={version}", "-d", str(sdist_dir)], check=True)
    tests = workdir / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    tests.mkdir(parents=True)
    prefix = f"transformers-{version}/tests/"
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix) and "/" not in member.name[len(prefix):]:
                (tests / member.name[len(prefix):]).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    (tests / "__init__.py").write_text("")
    for rel, text in STUBS.items():
        path = tests / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").write_text("")
        path.write_text(text)
    peer = tests / "peer"
    peer.mkdir()
    (peer / "__init__.py").write_text("")
    for model in models:
        shutil.copy(GLUE / f"glue_{model}.py", peer / f"test_peer_{model}.py")
    return tests


def _clean_env(racecheck: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if racecheck:
        env["TORCHDEVICE_SIM_RACECHECK"] = "1"  # sim's stream race checker (read by sim only)
    return env


def run_side(python: str, workdir: Path, translated: bool, backend: str, extra: list[str],
             racecheck: bool = False) -> dict[str, str]:
    """Run the staged tests; return ``{test id: passed|failed|skipped}``."""
    xml = workdir / (f"translated-{backend}.xml" if translated else "native.xml")
    pytest = ["-m", "pytest", "tests/peer", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
              "-W", "ignore::pytest.PytestUnknownMarkWarning", "--rootdir", str(workdir), f"--junitxml={xml}", *extra]
    command = [python, "-m", "torchdevice", "run", "--backend", backend, *pytest] if translated else [python, *pytest]
    print("$", " ".join(command), flush=True)
    if xml.exists():
        xml.unlink()  # a side that crashes before pytest writes its report must not be read from the last run
    subprocess.run(command, cwd=workdir, env=_clean_env(racecheck and translated))
    if not xml.exists():
        side = f"translated ({backend})" if translated else "native"
        raise SystemExit(f"peer_transformers: the {side} run wrote no report ({xml}): pytest did not start "
                         f"or crashed; its output is above")
    return outcomes(xml)


def outcomes(xml: Path) -> dict[str, str]:
    """``{test id: passed|failed|skipped}`` from pytest's JUnit XML; a test reported twice (a failing
    teardown after a pass) keeps its worst outcome."""
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    found: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        if rank[outcome] >= rank[found.get(name, "passed")]:
            found[name] = outcome
    return found


def compare(native: dict[str, str], translated: dict[str, str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(regressions: native passes that do not pass translated, tests run only translated with their outcome)."""
    regressions = sorted(t for t, o in native.items() if o == "passed" and translated.get(t) != "passed")
    only_translated = sorted((t, o) for t, o in translated.items() if native.get(t) == "skipped" and o != "skipped")
    return regressions, only_translated


def table(sides: dict[str, dict[str, str]], seconds: dict[str, float]) -> str:
    """The summary: a row per side (``native``, ``translated (BACKEND)``), its outcome counts and wall time."""
    rows = ["| side | passed | failed | skipped | wall |", "|---|---:|---:|---:|---:|"]
    for side, found in sides.items():
        counts = {k: sum(1 for o in found.values() if o == k) for k in ("passed", "failed", "skipped")}
        minutes, rest = divmod(round(seconds[side]), 60)
        rows.append(f"| {side} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | {minutes} min {rest} s |")
    return "\n".join(rows)


def proves_nothing(native: dict[str, str]) -> str | None:
    """Why a comparison would prove nothing, or None: a native side where no test passed (a collection
    error, a missing test dependency such as ``parameterized``) makes every translated outcome vacuous."""
    if any(o == "passed" for o in native.values()):
        return None
    return (f"no test passed natively ({len(native)} collected): the comparison proves nothing; check the native "
            f"output above (is `parameterized`, which transformers' tests import, installed?)")


def report(backend: str, native: dict[str, str], translated: dict[str, str]) -> list[str]:
    """Print what ran only on ``backend`` and its regressions; return the regressions."""
    regressions, only_translated = compare(native, translated)
    if only_translated:
        print(f"\n{backend}: {len(only_translated)} test(s) skipped natively ran translated (GPU-only):")
        for test, outcome in only_translated:
            print(f"  {outcome:7} {test}")
    if regressions:
        print(f"\n{backend}: {len(regressions)} test(s) pass natively but not translated:")
        for test in regressions:
            print(f"  {translated.get(test, 'missing'):7} {test}")
    else:
        print(f"\n{backend}: every test that passes natively passes translated")
    return regressions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert", "llama", "gpt2"], choices=["bert", "llama", "gpt2"])
    parser.add_argument("--backends", "--backend", default="cpu", help="comma-separated: each runs the tests translated")
    parser.add_argument("--workdir", default=str(ROOT / ".peer" / "transformers"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("-k", dest="keyword")
    parser.add_argument("--racecheck", action="store_true",
                        help="translated sides: sim's stream race checker on (TORCHDEVICE_SIM_RACECHECK=1)")
    parser.add_argument("--json", help="write each side's outcome per test and wall seconds as JSON here")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    stage(args.python, workdir, args.models)
    extra = ["-k", args.keyword] if args.keyword else []
    sides: dict[str, dict[str, str]] = {}
    seconds: dict[str, float] = {}
    for backend in [None, *args.backends.split(",")]:
        side = "native" if backend is None else f"translated ({backend})"
        started = time.perf_counter()
        sides[side] = run_side(args.python, workdir, backend is not None, backend or "", extra, args.racecheck)
        seconds[side] = time.perf_counter() - started
    print(table(sides, seconds))
    if args.json:
        Path(args.json).write_text(json.dumps({"sides": sides, "seconds": seconds}, indent=1) + "\n")
    native = sides.pop("native")
    vacuous = proves_nothing(native)
    if vacuous:
        print(f"\n{vacuous}")
        return 1
    regressions = [t for backend in args.backends.split(",") for t in report(backend, native, sides[f"translated ({backend})"])]
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
