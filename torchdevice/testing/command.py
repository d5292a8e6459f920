"""``python -m torchdevice.testing``: the vendor kit's conformance checks on a plugin object (``--check``),
and the hook reference of ``docs/plugins.md`` (``--write-docs``, ``--check-docs``)."""
from __future__ import annotations

import importlib
import sys
from typing import Any

from .conformance import CheckResult, ConformanceReport, check_backend
from .hook_reference import hook_reference_is_current, write_hook_reference

DESCRIPTION = "The vendor kit: test a torchdevice backend plugin without its hardware, and check it conforms."


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m torchdevice.testing", description=DESCRIPTION)
    parser.add_argument("--write-docs", metavar="PATH", help="regenerate the hook reference block of PATH")
    parser.add_argument("--check-docs", metavar="PATH", help="exit 1 if the hook reference of PATH is stale")
    parser.add_argument("--check", metavar="MODULE:ATTR", help="run the conformance checks on a plugin object (or on the "
                        "installed entry point of that name); one that fails to load is a failed check")
    args = parser.parse_args(argv)
    if args.write_docs:
        print(("updated " if write_hook_reference(args.write_docs) else "unchanged ") + args.write_docs)
    if args.check_docs and not hook_reference_is_current(args.check_docs):
        print(f"{args.check_docs}: hook reference is stale; run python -m torchdevice.testing --write-docs "
              f"{args.check_docs}", file=sys.stderr)
        return 1
    if args.check:
        try:
            plugin = load_plugin(args.check)
        except Exception as exc:  # a plugin that cannot be loaded is a failed check, not a traceback
            report = ConformanceReport(args.check, [CheckResult("import", False, f"{type(exc).__name__}: {exc}")])
        else:
            report = check_backend(plugin, raise_on_failure=False)
        print(report)
        return 0 if report.ok else 1
    return 0


def load_plugin(spec: str) -> Any:
    """The object ``MODULE:ATTR`` names, as an entry point's value is loaded; a name without ``:`` is an installed
    entry point of group ``torchdevice`` (``sim``) if there is one, else a module whose ``plugin`` is taken."""
    if ":" not in spec:
        from ..plugins import GROUP, entry_points

        found = [ep for ep in entry_points(group=GROUP) if ep.name == spec]
        if found:
            return found[0].load()
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr or "plugin")

