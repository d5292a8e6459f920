"""``torchdevice compare``: where a program's numbers diverge between two backends, op by op, in one command.

::

    torchdevice compare [--backends A,B] [--rtol R] [--atol A] [--level op|module] [--out FILE]
                        [--no-whole-run] SCRIPT [ARGS...]
    torchdevice compare [...] -m MODULE [ARGS...]

B (default: the backend torchdevice selects) runs the program translated, as ``torchdevice run`` does; A
(default: cpu) is the reference.

``--level op`` (default; :mod:`.shadow`): lockstep. Every ATen op the program runs on B also runs on A with
the same inputs, copied from B's tensors, so each op's error is its own. The first op over tolerance is
named with its aten name, the module path that called it and the program's ``file:line``.

``-m pytest ARGS`` (:mod:`.tests`): pytest runs on each backend; the tests whose outcome differs are listed.

``--level module`` (:mod:`.modules`): two independent runs, every module's outputs compared by module path
(accumulated errors; for programs whose control flow lockstep would change).

Unless ``--no-whole-run``, the program also runs once on each backend in a process of its own, and every
number it prints is compared line by line (:mod:`.wholerun`): the drift a whole run accumulates, stated
beside the first op divergence.

Tolerances: ``--rtol``/``--atol``, else per dtype (:data:`.metrics.DEFAULT_TOLERANCES`; printed numbers of
the whole run: :data:`.wholerun.WHOLE_RUN_TOLERANCE`). ``--out`` writes the report (:mod:`.report`) as JSON,
HTML (``.html``: a sortable table and an SVG plot of error per module) or Markdown (anything else).

Exit status: 0 when nothing went beyond tolerance, 1 when something did (an op, a module, or a printed
line of the whole run), 2 for a usage error; the program's own non-zero status when it failed without a
divergence (1 when only a whole run failed). A failed run is reported first, with its exception.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import report

EXIT_DIVERGED = 1
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = ("torchdevice compare [-h] [--backends A,B] [--rtol R] [--atol A] [--level op|module] "
                    "[--out FILE] [--no-whole-run] SCRIPT|-m MODULE [ARGS...]")
    parser.add_argument("--backends", metavar="A,B",
                        help="reference backend A and backend B under test (default: cpu and the selected backend)")
    parser.add_argument("--rtol", type=float, help="relative tolerance (default: per dtype)")
    parser.add_argument("--atol", type=float, help="absolute tolerance (default: per dtype)")
    parser.add_argument("--level", choices=("op", "module"), default="op",
                        help="op: lockstep, each op on the same inputs (default); module: two independent runs, "
                             "module outputs compared")
    parser.add_argument("--out", metavar="FILE", help="write the report: .json, .html, else Markdown")
    parser.add_argument("--no-whole-run", dest="whole_run", action="store_false",
                        help="skip the two whole runs whose printed numbers are compared line by line")
    parser.add_argument("-m", dest="module", action="store_true", help="run library module MODULE, like python -m")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="SCRIPT|MODULE [ARGS...]",
                        help="the program and its arguments, passed through unchanged")


def _backends(value: str | None) -> tuple[str, str]:
    from .. import router

    if value:
        names = [n.strip() for n in value.split(",")]
        if len(names) != 2 or not all(names):
            raise ValueError(f"--backends takes two names, A,B (got {value!r})")
        for name in names:
            router.check(name, "--backends")
        return names[0], names[1]
    return "cpu", router.active().name


def _device_type(name: str) -> str:
    import torchdevice

    for record in torchdevice.backends():
        if record.name == name and record.device_type:
            return record.device_type
    raise ValueError(f"backend {name!r} declares no device type")


def main(args: argparse.Namespace) -> int:
    """Entry of the ``compare`` subcommand (see the module docstring)."""
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        print("torchdevice compare: error: missing SCRIPT or -m MODULE", file=sys.stderr)
        return EXIT_USAGE
    try:
        backends = _backends(args.backends)
        ref_type = _device_type(backends[0])
    except ValueError as exc:
        print(f"torchdevice compare: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return compare(program, backends=backends, ref_device_type=ref_type, module=args.module, level=args.level,
                   rtol=args.rtol, atol=args.atol, out=args.out, whole=args.whole_run)


def compare(program: list[str], *, backends: tuple[str, str], ref_device_type: str, module: bool = False,
            level: str = "op", rtol: float | None = None, atol: float | None = None, out: str | None = None,
            whole: bool = True) -> int:
    """Run the comparison, print its summary (stderr), write ``out``; return the exit status."""
    from . import render, report

    command = ["torchdevice", "compare", "--backends", ",".join(backends), "--level", level,
               *(["-m"] if module else []), *program]
    started = time.time()
    collector = None
    module_rows = module_first = None
    out_abs = os.path.abspath(out) if out else None  # the program may chdir
    if module and program[0] == "pytest":
        command = ["torchdevice", "compare", "--backends", ",".join(backends), "-m", *program]
        return _compare_tests(command, backends, program[1:], out_abs, started)
    error = None
    if level == "op":
        collector = report.Collector()
        status, error = _lockstep(program, module, backends[1], ref_device_type, collector, rtol, atol)
    else:
        from . import modules

        try:
            module_rows, module_first, statuses = modules.run_both(backends, program, module, rtol, atol)
        except RuntimeError as exc:
            print(f"torchdevice compare: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        status = statuses[backends[1]]
    whole_result = None
    if whole:
        from . import wholerun

        whole_result = wholerun.whole_run(backends, program, module, rtol, atol)
    tolerance = {"rtol": rtol if rtol is not None else "per dtype", "atol": atol if atol is not None else "per dtype"}
    data = report.report_dict(command=command, backends=backends, level=level, collector=collector,
                              whole_run=whole_result, program_status=status, tolerance=tolerance,
                              modules=module_rows, module_first=module_first, duration=time.time() - started,
                              device_type=_device_type(backends[1]), program_error=error)
    sys.stdout.flush()
    print(render.format_text(data), end="", file=sys.stderr)
    if out_abs:
        render.write(out_abs, data)
    if report.diverged(data):
        return EXIT_DIVERGED
    if data["failed"]:  # the program's own status, else 1 (a whole run failed)
        return status if isinstance(status, int) and status else EXIT_DIVERGED
    return status if isinstance(status, int) else 1


def _compare_tests(command: list[str], backends: tuple[str, str], args: list[str], out: str | None,
                   started: float) -> int:
    from . import render, report, tests

    try:
        result = tests.run_tests(backends, args)
    except RuntimeError as exc:
        print(f"torchdevice compare: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    first = result["differ"][0] if result["differ"] else None
    data = report.report_dict(command=command, backends=backends, level="tests", collector=None, whole_run=None,
                              program_status=result["exit_status"][backends[1]], tolerance={}, modules=[],
                              module_first=first, duration=time.time() - started)
    data["summary"] = {"tests_compared": result["compared"], "tests_differing": len(result["differ"])}
    data["tests"] = result
    print(render.format_text(data), end="", file=sys.stderr)
    if out:
        render.write(out, data)
    return EXIT_DIVERGED if first is not None else 0


def _lockstep(program: list[str], module: bool, backend: str, ref_device_type: str, collector: report.Collector,
              rtol: float | None, atol: float | None) -> tuple[int, str | None]:
    """Run the program on ``backend`` under the shadow mode: (exit status, its uncaught exception's line)."""
    import torch

    import torchdevice

    from .. import run as run_mod
    from .autocast import AutocastProbe
    from .shadow import ModuleTracker, ShadowMode

    tracker = ModuleTracker()
    device_type = _device_type(backend)
    mode = ShadowMode(torch.device(ref_device_type), collector.record, tracker, rtol, atol, device_type)
    # one autocast policy where B's device type is the reference's: no probe (it is a mode torch.compile sees)
    probe = AutocastProbe(mode, device_type) if device_type != ref_device_type else contextlib.nullcontext()
    uncaught: list[str] = []
    hook = sys.excepthook

    def note(kind: type[BaseException], exc: BaseException, tb: object) -> None:  # run prints through it
        uncaught.append("".join(traceback.format_exception_only(kind, exc)).strip().splitlines()[-1])
        hook(kind, exc, tb)  # type: ignore[arg-type]

    sys.excepthook = note
    try:
        with torchdevice.use(backend), tracker, mode, probe:  # use(): B even where the process chose another
            status = run_mod.run(program[0], program[1:], module=module, backend=backend)
    except SystemExit as exc:
        status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.excepthook = hook
    return status, uncaught[-1] if uncaught else None
