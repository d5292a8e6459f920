"""Mutation testing of the core, one module at a time (``tox -e mutation``; docs/testing.md).

    python scripts/mutation.py                    # the five core modules, one after the other
    python scripts/mutation.py devices streams    # some of them
    python scripts/mutation.py cpu --max-children 1 --survivors
    python scripts/mutation.py devices --resume   # go on where a stopped run of the module left off

Each module runs in its own scratch copy of the checkout (``.mutation/<module>/``, ignored by
git) whose ``[tool.mutmut]`` names that module and the fast in-process tests that reach it
(:data:`MODULES`): mutmut maps each mutated function to the tests that execute it and runs only
those, so a module's mutants never wait on the whole suite. Subprocess tests import the unmutated
tree, so they cannot kill a mutant and are not selected. The summary (killed, survived, timeout,
no tests, score) is printed per module; ``--survivors`` also prints each surviving mutant's diff.
A module's run can take longer than a session allows (devices.py: 536 mutants, about 10 a minute
on a busy 2-core VM); ``--resume`` keeps the scratch copy and mutmut's recorded results, so a run
stopped by a time limit goes on with the mutants not yet checked.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation"

#: module -> the in-process test files that reach it (subprocess-only tests are deselected below)
MODULES: dict[str, list[str]] = {
    "devices": ["tests/devices/test_devices.py", "tests/devices/test_arguments.py", "tests/devices/test_edges.py",
                "tests/test_default_generators.py", "tests/test_unpatch.py", "tests/test_source_family.py",
                "tests/devices/test_native_parity.py"],
    "router": ["tests/router/test_selection.py", "tests/router/test_reports.py",
               "tests/router/test_records.py"],
    "cpu": ["tests/test_api.py", "tests/test_memory.py", "tests/honesty/test_oracle.py",
            "tests/test_default_generators.py", "tests/test_source_family.py", "tests/cpu/test_memory_counters.py",
            "tests/cpu/test_host_figures.py"],
    "host": ["tests/test_api.py", "tests/test_memory.py", "tests/cpu/test_memory_counters.py",
             "tests/cpu/test_host_figures.py", "tests/test_device_properties.py", "tests/host/test_sensors.py",
             "tests/host/test_macos_readers.py", "tests/host/test_linux_readers.py"],
    "streams": ["tests/test_host_streams.py", "tests/test_api.py", "tests/test_namespaces.py",
                "tests/honesty/test_oracle.py", "tests/test_source_family.py", "tests/test_logical_device_streams.py"],
    "_patching": ["tests/test_unpatch.py", "tests/devices/test_devices.py", "tests/test_namespaces.py",
                  "tests/test_source_family.py"],
}
#: tests in those files that only run subprocesses (the unmutated tree): they cannot kill a mutant, and
#: mutmut's stats pass would still pay for them
SUBPROCESS_ONLY = [
    # tests/router/test_selection.py (the `runs` fixture: installed entry-point plugins, the CLI)
    "entry_point_plugin_outranks_cpu_in_info_json", "entry_point_plugin_in_info_table_of_console_script",
    "entry_point_plugin_is_selected_by_the_api", "env_backend_beats_entry_point_priority",
    "priority_env_demotes_entry_point_plugin", "entry_point_backend_not_automatic_is_taken_only_by_use",
    "use_unavailable_entry_point_backend_raises_with_reason", "env_asking_for_unavailable_entry_point_backend_fails",
    "broken_plugins_are_reported_and_isolated_in_info_json", "broken_plugins_in_info_table",
    "broken_plugins_in_backends_and_problems", "disable_plugins_blocks_the_named_entry_points",
    "plugins_env_loads_only_the_named_entry_points",
    # tests/test_source_family.py (`torchdevice run` and zero-code activation in children)
    "run_default_source_is_cuda_in_the_program_and_its_children", "run_source_from_flag_or_env_reaches_the_children",
    "run_infers_the_source_family_from_the_script", "run_bad_source", "zero_code_activation_reads_the_source_family",
    "mp_spawn_over_device_count_on_two_logical_devices", "run_bad_device_count",
    # tests/test_api.py, tests/test_unpatch.py
    "info_shows_each_backends_description", "first_unpatch_restores_what_was_there_before_any_patch",
    # tests/router/test_records.py (entry points, read once per process)
    "unavailable_entry_point_backend_by_name_lists_every_available_backend",
    "named_backend_failing_at_resolution_lists_every_available_backend",
]
TIMEOUT_MULTIPLIER, TIMEOUT_CONSTANT = 4.0, 30.0
#: imported once by mutmut's fork server (importing starts no threads; running ops does)
PRELOAD = ["numpy", "torch", "torch.nn", "torch.utils.data", "pluggy", "pytest"]
PRELOAD_FILE = "mutmut-preload.txt"
COPY = ["torchdevice", "plugins", "tests", "_torchdevice_autoload.py", "examples", "docs", "README.md",
        "pyproject.toml"]


def _tests(module: str) -> list[str]:
    """The module's test files that exist in this checkout."""
    return [path for path in MODULES[module] if (ROOT / path).exists()]


def _config(module: str) -> str:
    deselect = " and ".join(f"not {name}" for name in SUBPROCESS_ONLY)
    return "\n".join([
        "[tool.mutmut]",
        f"source_paths = {json.dumps([f'torchdevice/{module}.py'])}",
        f"also_copy = {json.dumps(COPY)}",
        f"pytest_add_cli_args_test_selection = {json.dumps(_tests(module))}",
        f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-x', '-q', '-k', deselect])}",
        # mutmut's time limit is (call-phase seconds of the mutant's tests + constant) * multiplier; the
        # fixtures (a backend resolution per test) are not in its estimate, and a function reached by
        # 200 tests would be cut off while passing, and counted as detected
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}",
        # forked from a process that has run tests, a mutant's run would inherit OpenMP's and MLX's
        # worker threads as dead state and hang on its first parallel op (a false "timeout"): fork each
        # mutant from a server that has only imported what is safe to fork (PRELOAD)
        'process_isolation = "forkserver"',
        'forkserver_warmup = "import"',
        f"preload_modules_file = {json.dumps(PRELOAD_FILE)}",
        f"timeout_constant = {TIMEOUT_CONSTANT}",
        "",
    ])


def _prepare(module: str) -> Path:
    work = SCRATCH / module
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".mutation"))
        elif src.exists():
            shutil.copy2(src, work / name)
    pyproject = (work / "pyproject.toml").read_text(encoding="utf-8")
    pyproject = re.sub(r"\n\[tool\.mutmut\]\n(?:(?!\n\[).)*", "\n", pyproject, flags=re.S)
    (work / "pyproject.toml").write_text(pyproject.rstrip("\n") + "\n\n" + _config(module), encoding="utf-8")
    (work / PRELOAD_FILE).write_text("\n".join(PRELOAD) + "\n", encoding="utf-8")
    return work


def _mutmut_env() -> dict[str, str]:
    """mutmut forks a child per mutant from a process that has already run torch: a child entering an
    OpenMP parallel region the parent started hangs until mutmut's timeout, and would be counted as a
    "timeout" (detected) whatever the mutant does. One intra-op thread keeps torch out of OpenMP."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _results(work: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work,
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            found[name] = status.strip()
    return found


#: outcomes in which the tests did not pass with the mutant in place
DETECTED = ("killed", "timeout", "segfault", "caught by type check")


def _score(counts: Counter) -> str:
    """Detected mutants (killed, timed out, crashed) over those the selected tests reach."""
    reached = sum(n for s, n in counts.items() if s not in ("no tests", "skipped", "not checked"))
    detected = sum(counts[s] for s in DETECTED)
    return f"{100 * detected / reached:.1f}% ({detected}/{reached})" if reached else "n/a"


def run(module: str, max_children: int, survivors: bool, resume: bool = False) -> Counter:
    work = SCRATCH / module
    if not (resume and (work / "mutants").is_dir()):
        work = _prepare(module)
    print(f"== mutmut over torchdevice/{module}.py ({', '.join(_tests(module))})", flush=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)], cwd=work,
                   check=False, env=_mutmut_env())
    results = _results(work)
    counts = Counter(results.values())
    print(f"== {module}: {len(results)} mutants, " + ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
          + f"; score {_score(counts)}; {time.monotonic() - started:.0f} s", flush=True)
    if survivors:
        for name, status in sorted(results.items()):
            if status == "survived":
                shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=work,
                                       capture_output=True, text=True).stdout
                print(shown, flush=True)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"modules to mutate (default: all of {', '.join(MODULES)})")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--survivors", action="store_true", help="print the diff of every surviving mutant")
    parser.add_argument("--resume", action="store_true",
                        help="keep the module's scratch copy and results from a stopped run (the tests as copied then)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    total: Counter = Counter()
    for module in args.modules or list(MODULES):
        total += run(module, args.max_children, args.survivors, args.resume)
    if len(args.modules or MODULES) > 1:
        print(f"== all: {sum(total.values())} mutants, " + ", ".join(f"{s} {n}" for s, n in sorted(total.items()))
              + f"; score {_score(total)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
