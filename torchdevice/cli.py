"""The ``torchdevice`` command line (also ``python -m torchdevice``)."""
from __future__ import annotations

import argparse
import json
import sys

from . import __version__


def _info(args: argparse.Namespace) -> int:
    import torchdevice

    from .errors import TorchDeviceError

    records = torchdevice.backends()
    problems = [str(p) for p in torchdevice.problems()]
    error = None
    try:
        torchdevice.current_backend()
    except TorchDeviceError as exc:
        error = str(exc)
    from . import integrations

    try:
        frameworks = integrations.states()
    except Exception as exc:  # reported, never fatal for `info`
        frameworks = []
        problems.append(f"framework integrations: {type(exc).__name__}: {exc}")
    if args.json:
        print(json.dumps({
            "version": __version__,
            "selected": next((r.name for r in records if r.selected), None),
            "error": error,
            "backends": [r.as_dict() for r in records],
            "problems": problems,
            "integrations": [{"name": n, "plugin": p, "framework": f, "status": st} for n, p, f, st in frameworks],
        }, indent=2))
    else:
        rows = [("backend", "plugin", "version", "device", "priority", "available", "selected", "notes")]
        for r in records:
            rows.append((
                r.name, r.distribution or r.plugin, r.version or "?", r.device_type or "-",
                "-" if r.priority is None else str(r.priority),
                ("yes" if r.automatic else "on request") if r.available else "no",
                "*" if r.selected else "", r.reason,
            ))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
        described = [r for r in records if r.description]
        if described:
            print()
            width = max(len(r.name) for r in described)
            for r in described:
                print(f"{r.name.ljust(width)}  {r.description}")
        if frameworks:
            print()
            lines = [("integration", "plugin", "status", "framework")] + [(n, p, st, f) for n, p, f, st in frameworks]
            widths = [max(len(line[i]) for line in lines) for i in range(3)]
            for line in lines:
                print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1])
        for problem in problems:
            print(f"problem: {problem}")
    if error:
        print(f"torchdevice: error: {error}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchdevice", description="Run accelerator-specific PyTorch code anywhere.")
    parser.add_argument("--version", action="version", version=f"torchdevice {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="list backends, their plugins, availability and selection")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(func=_info)
    from . import matrix as _matrix  # torchdevice matrix [--backend NAME] [--format md|json] [--write FILE]

    matrix = sub.add_parser("matrix", help="how every catalog device function behaves on each installed backend",
                            description="The compatibility matrix, derived from the backends' operations.")
    _matrix.add_arguments(matrix)
    matrix.set_defaults(func=_matrix.run)
    from . import scan as _scan  # torchdevice scan PATH...

    scan = sub.add_parser("scan", help="statically find accelerator-specific API uses in Python sources",
                          description="Statically (AST) find accelerator-specific PyTorch uses and their status.")
    _scan.add_arguments(scan)
    scan.set_defaults(func=_scan.run)
    from . import port as _port  # torchdevice port PATH... [--diff | --write] [--source FAMILY]

    port = sub.add_parser("port", help="rewrite accelerator-specific code as device-agnostic torch code",
                          description="Turn CUDA/MPS/XPU/MTIA-written code into device-agnostic torch code "
                                      "(torch.accelerator, torch.amp, torch.Event/Stream), keeping comments.")
    _port.add_arguments(port)
    port.set_defaults(func=_port.run)
    from . import run as _run  # torchdevice run [--backend NAME] [--report FILE] SCRIPT|-m MODULE [ARGS...]

    run = sub.add_parser("run", help="run a CUDA-written program unmodified on the active backend",
                         description="Run a program like `python SCRIPT ARGS` (or `python -m MODULE ARGS`) "
                                     "with translation on.")
    _run.add_arguments(run)
    run.set_defaults(func=_run.main)
    from . import compare as _compare  # torchdevice compare [--backends A,B] [--level op|module] [--out F] SCRIPT

    compare = sub.add_parser("compare", help="find where a program's numbers diverge between two backends, op by op",
                             description="Run a program on backend B with every op also run on reference A.")
    _compare.add_arguments(compare)
    compare.set_defaults(func=_compare.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; with no arguments at all, list the commands (``--help``) instead of an argparse error."""
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    from .errors import TorchDeviceError

    try:
        return args.func(args)
    except TorchDeviceError as exc:  # a bad TORCHDEVICE_* value or backend: one line, no traceback
        print(f"torchdevice: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
