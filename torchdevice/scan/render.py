"""``torchdevice scan`` on the terminal: the text and plain renderings of a :class:`ScanReport`,
colours, the progress bar, and the command line."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

from .results import SEVERITY, UNKNOWN, ScanReport, Use, parse_fail_on
from .tree import scan_paths

# -- terminal output --------------------------------------------------------------------


_COLOURS = {
    "native": "32",  # green
    "translated": "36",  # cyan
    "no-op": "34",  # blue
    "emulated": "33",  # yellow
    "unsupported": "1;31",  # bold red
    UNKNOWN: "35",  # magenta
    "error": "31",
}


class _Paint:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled and code else text

    def status(self, status: str, width: int = 0) -> str:
        return self(status.ljust(width), _COLOURS.get(status, ""))


def use_colour(stream: TextIO, mode: str = "auto") -> bool:
    """Colour when ``mode`` is always, or auto and ``stream`` is a TTY and NO_COLOR is unset/empty."""
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def render_text(report: ScanReport, colour: bool = False, api_limit: int = 25, uses: bool = True) -> str:
    """The terminal report: uses grouped by file (unless ``uses`` is false), unscannable files, the summary.
    A use's note is printed whole: it says what to do instead, which a cut would lose."""
    paint = _Paint(colour)
    out: list[str] = []
    by_file: dict[str, list[Use]] = {}
    for u in report.uses if uses else ():
        by_file.setdefault(u.path, []).append(u)
    status_w = max((len(u.status) for u in report.uses), default=7)
    for path, found in by_file.items():
        out.append(paint(path, "1"))
        api_w = min(48, max(len(u.api) for u in found))
        loc_w = max(len(f"{path}:{u.line}:{u.col}") for u in found)
        for u in found:
            where = f"{path}:{u.line}:{u.col}"
            extra = []
            if u.context and u.context not in ("call", "attribute", "reference"):
                extra.append(u.context)
            if u.note:
                extra.append(u.note)
            tail = f"  {paint('  '.join(extra), '2')}" if extra else ""
            out.append(f"  {paint(where.ljust(loc_w), '2')}  {u.api.ljust(api_w)}  "
                       f"{paint.status(u.status, status_w)}{tail}")
        out.append("")
    if report.errors:
        out.append(paint(f"{len(report.errors)} file(s) could not be scanned:", "1"))
        for e in report.errors:
            loc = f"{e.path}:{e.line}" if e.line else e.path
            out.append(f"  {loc}: {paint(e.message, _COLOURS['error'])}")
        out.append("")
    summary = report.summary()
    backend = report.backend or "none"
    out.append(paint(
        f"{summary['uses']} use(s) of {len(summary['by_api'])} API(s) in {summary['files_with_uses']} of "
        f"{summary['files_scanned']} file(s), statuses on backend '{backend}' ({report.elapsed_s:.2f}s)", "1"))
    if report.backend_note:
        out.append(f"  {paint(report.backend_note, '2')}")
    for status, n in summary["by_status"].items():
        if n or status in SEVERITY:
            out.append(f"  {paint.status(status, 12)} {n:>6}")
    if summary["by_api"]:
        out.append(paint("By API:", "1"))
        rows = summary["by_api"]
        api_w = min(56, max(len(r["api"]) for r in rows[:api_limit]))
        for r in rows[:api_limit]:
            out.append(f"  {r['api'].ljust(api_w)} {r['count']:>6}  {paint.status(r['status'])}")
        if len(rows) > api_limit:
            out.append(f"  ... {len(rows) - api_limit} more (--format json lists all)")
    return "\n".join(out)


def render_plain(report: ScanReport) -> str:
    """One line per use, ``path:line:col: api [status] note``, for editors and logs."""
    lines = [
        f"{u.path}:{u.line}:{u.col}: {u.api} [{u.status}]" + (f" {u.note}" if u.note else "")
        for u in report.uses
    ]
    lines += [f"{e.path}:{e.line or 0}: error: {e.message}" for e in report.errors]
    return "\n".join(lines)


class ProgressBar:
    """A one-line bar on ``stream`` (stderr), redrawn at most every 0.1 s; cleared by :meth:`close`."""

    def __init__(self, stream: TextIO | None = None, min_total: int = 200) -> None:
        self.stream = stream or sys.stderr
        self.min_total = min_total
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = int(width * done / total) if total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r\033[Kscanning [{bar}] {done}/{total} files")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False


# -- command line -----------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``scan`` options to an argparse (sub)parser."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to scan")
    parser.add_argument("--backend", metavar="NAME",
                        help="report statuses on this backend (default: the one torchdevice would select)")
    parser.add_argument("--format", choices=("text", "json", "plain"), default="text",
                        help="text (grouped by file), json (uses + summary) or plain (path:line:col: api [status])")
    parser.add_argument("--fail-on", metavar="STATUS[,STATUS]",
                        help="exit 1 if any use has one of these statuses or a worse one "
                             f"({' < '.join(SEVERITY)}; 'unknown' and 'error' match only themselves)")
    parser.add_argument("--summary", action="store_true",
                        help="text format: print only the files that could not be scanned and the summary")
    parser.add_argument("--color", "--colour", dest="color", choices=("auto", "always", "never"), default="auto",
                        help="colour the text output (auto: when stdout is a TTY and NO_COLOR is unset)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: CPU count)")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="skip files and directories whose name or path matches (repeatable)")
    parser.add_argument("--no-default-excludes", action="store_true",
                        help="also scan hidden directories, __pycache__, site-packages and environments")


def _resolve_backend(requested: str | None) -> tuple[str | None, str, str | None]:
    """(backend, note, error) for ``--backend``; the default is the backend torchdevice selects."""
    import torchdevice

    from ..errors import TorchDeviceError

    if requested is None:
        try:
            return torchdevice.current_backend(), "", None
        except TorchDeviceError as exc:
            return None, f"no backend is selected here ({exc})", None
    known = [r.name for r in torchdevice.backends()]
    if requested not in known:
        return None, "", f"unknown backend {requested!r} (known: {', '.join(known) or 'none'})"
    return requested, "", None


def run(args: argparse.Namespace) -> int:
    """The ``torchdevice scan`` command; returns the exit status."""
    fail_on: set[str] = set()
    if args.fail_on:
        try:
            fail_on = parse_fail_on(args.fail_on)
        except ValueError as exc:
            print(f"torchdevice scan: error: --fail-on: {exc}", file=sys.stderr)
            return 2
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"torchdevice scan: error: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.jobs is not None and args.jobs < 1:
        print("torchdevice scan: error: --jobs must be at least 1", file=sys.stderr)
        return 2
    backend, note, error = _resolve_backend(args.backend)
    if error:
        print(f"torchdevice scan: error: {error}", file=sys.stderr)
        return 2
    bar = None
    if not args.no_progress and sys.stderr.isatty():
        bar = ProgressBar(sys.stderr)
    from .. import scan as package  # status_lookup as torchdevice.scan holds it (a test may replace it there)

    lookup, lookup_note = package.status_lookup(backend)
    try:
        report = scan_paths(args.paths, backend, jobs=args.jobs, exclude=args.exclude,
                            default_excludes=not args.no_default_excludes, progress=bar, lookup=lookup)
    finally:
        if bar is not None:
            bar.close()
    report.backend_note = lookup_note
    if note:
        report.backend_note = "; ".join(filter(None, (note, report.backend_note)))
    if args.format == "json":
        import json

        text = json.dumps(report.as_dict(), indent=2)
    elif args.format == "plain":
        text = render_plain(report)
    else:
        text = render_text(report, colour=use_colour(sys.stdout, args.color), uses=not args.summary)
    try:
        if text:
            print(text, flush=True)
    except BrokenPipeError:  # `torchdevice scan . | head`: the reader left; the exit status still counts
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    failing = report.failing(fail_on)
    if "error" in fail_on and report.errors:
        return 1
    if failing:
        if args.format == "text":
            print(f"torchdevice scan: {len(failing)} use(s) with status {', '.join(sorted(fail_on))}",
                  file=sys.stderr)
        return 1
    return 0
