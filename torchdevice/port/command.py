"""``torchdevice port PATH... [--diff | --write] [--source FAMILY]``: the command line of the codemod."""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import TYPE_CHECKING

from ..scan.tree import iter_files
from ..vocabulary import SOURCE_FAMILIES

if TYPE_CHECKING:
    from .transform import PortResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``port`` options to an argparse (sub)parser."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (walked recursively)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", dest="write", action="store_false",
                      help="print a unified diff and change nothing (the default)")
    mode.add_argument("--write", dest="write", action="store_true", help="rewrite the files in place")
    parser.add_argument("--source", choices=SOURCE_FAMILIES, metavar="FAMILY",
                        help=f"port only what is specific to this family ({', '.join(SOURCE_FAMILIES)}); "
                             "default: all of them")
    parser.set_defaults(write=False)


def _port_file(path: str, families: tuple[str, ...] | None) -> tuple[str, PortResult]:
    from .transform import port_source

    with open(path, encoding="utf-8", newline="") as f:
        source = f.read()
    return source, port_source(source, path, families)


def _diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=path, tofile=path)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def run(args: argparse.Namespace) -> int:
    """Port every file; exit 2 on bad input, 1 when a use could not be ported, else 0."""
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        for path in missing:
            print(f"torchdevice port: error: no such file or directory: {path}", file=sys.stderr)
        return 2
    from .transform import PortError

    families = (args.source,) if args.source else None
    failed = unported = changed = 0
    for path in iter_files(args.paths):
        try:
            before, result = _port_file(path, families)
        except (PortError, OSError, UnicodeDecodeError) as exc:
            print(f"torchdevice port: error: {exc}", file=sys.stderr)
            failed += 1
            continue
        for site in result.unported:
            print(f"{path}:{site.line}:{site.col}: not ported: {site.api}: {site.why}", file=sys.stderr)
        unported += len(result.unported)
        if result.code != before:
            changed += 1
            if args.write:
                _write(path, result.code)
            else:
                sys.stdout.write(_diff(path, before, result.code))
    done = "rewrote" if args.write else "would rewrite"
    print(f"torchdevice port: {done} {changed} file(s); {unported} site(s) not ported", file=sys.stderr)
    return 2 if failed else 1 if unported else 0
