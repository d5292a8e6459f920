"""The seed catalog's device sections, shipped with the package.

The migration plan ``004_*.txt`` (a copy in ``tests/fixtures/seeds``) catalogs the device APIs in
five sections: ``torch.cuda`` (76 functions), ``torch.mps`` (13), ``torch.xpu``
(35), ``torch.mtia`` (21) and ``torch.distributed`` (56), each with argument
names and a return type. Those rows are extracted into
``torchdevice/data/catalog.json`` so the installed package does not need the
seed; :mod:`torchdevice.matrix` answers the catalog's empty CPU/CUDA/MPS/MLX
columns from the code, and ``tests/honesty/test_published_status.py`` calls every function with
the examples kept beside it in :mod:`torchdevice.data.catalog_examples`.

Regenerate or check the JSON when the seed is at hand::

    python -m torchdevice.catalog            # rewrite data/catalog.json (and data/catalog_names.py) from the seed
    python -m torchdevice.catalog --check    # exit 1 if either differs from the seed

``data/catalog_names.py`` holds each namespace's function names (:data:`NAMES
<torchdevice.data.catalog_names.NAMES>`), written with the JSON: activation needs only the
names, and importing that module (bytecode-cached) costs a small part of parsing the JSON.
"""
from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

#: The catalog sections torchdevice answers for, in the seed's spelling.
SECTIONS = ("CUDA_OPERATIONS", "MPS_OPERATIONS", "XPU_OPERATIONS", "MTIA_OPERATIONS", "DISTRIBUTED_COMPUTING")

#: The namespace each section's functions live in.
SECTION_NAMESPACE = {
    "CUDA_OPERATIONS": "torch.cuda",
    "MPS_OPERATIONS": "torch.mps",
    "XPU_OPERATIONS": "torch.xpu",
    "MTIA_OPERATIONS": "torch.mtia",
    "DISTRIBUTED_COMPUTING": "torch.distributed",
}

DATA = Path(__file__).with_name("data") / "catalog.json"
NAMES_MODULE = DATA.with_name("catalog_names.py")
SEED_GLOB = "004_*.txt"


class Entry(NamedTuple):
    """One catalog function.

    ``arguments`` are the names the seed lists; ``more_arguments`` is True
    where the seed cut the list short with ``...``. ``returns`` is the seed's
    return type string, verbatim (``"<class 'int'>"``, ``"tuple[int, int]"``,
    ``"Any"`` ...).
    """

    api: str
    section: str
    arguments: tuple[str, ...]
    more_arguments: bool
    returns: str
    description: str

    @property
    def namespace(self) -> str:
        """``"torch.cuda"`` for ``torch.cuda.memory_allocated``."""
        return self.api.rpartition(".")[0]

    @property
    def name(self) -> str:
        """``"memory_allocated"`` for ``torch.cuda.memory_allocated``."""
        return self.api.rpartition(".")[2]


# -- parsing the seed ---------------------------------------------------------------

# patterns, compiled at the first parse (re's cache): activation imports this module, and never parses
_HEADER = r"^\|\s*\S*\s*([A-Z_]+)\s*\|\s*CPU\s*\|"
_ROW = r"^\| `(?P<api>[\w.]+)` \|(?:[^|]*\|){5} `(?P<args>[^`]*)` \| `(?P<returns>[^`]*)` \| ?(?P<notes>.*?) ?\|\s*$"


def parse_seed(text: str) -> dict:
    """Extract the device sections from the seed's text; return the JSON-ready dict."""
    sections: dict[str, list[dict]] = {name: [] for name in SECTIONS}
    current = None
    header_pattern, row_pattern = re.compile(_HEADER), re.compile(_ROW)
    for line in text.splitlines():
        header = header_pattern.match(line)
        if header:
            current = header.group(1) if header.group(1) in SECTIONS else None
            continue
        if current is None:
            continue
        row = row_pattern.match(line)
        if row is None:
            continue
        args = [a.strip() for a in row.group("args").split(",") if a.strip()]
        more = bool(args) and args[-1] == "..."
        if more:
            args.pop()
        sections[current].append({
            "api": row.group("api"),
            "arguments": args,
            "more_arguments": more,
            "returns": row.group("returns"),
            "description": row.group("notes").replace("\\|", "|").strip(),
        })
    return {"sections": sections}


#: Where the seed is looked for: the copy kept in the repository (``tests/fixtures/seeds``, also
#: in the sdist); the project reads nothing outside its checkout.
SEED_DIRS = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "seeds",)


def find_seed(root: Path | None = None) -> Path | None:
    """The seed file, looked up in ``root`` or else in :data:`SEED_DIRS`, in order."""
    for base in [Path(root)] if root is not None else SEED_DIRS:
        matches = sorted(base.glob(SEED_GLOB)) if base.is_dir() else []
        if matches:
            return matches[0]
    return None


def render(data: dict, source: str) -> str:
    """The text of ``catalog.json`` for parsed ``data`` (stable, so it diffs cleanly)."""
    lines = ["{", f' "source": {json.dumps(source)},', ' "sections": {']
    names = list(data["sections"])
    for i, section in enumerate(names):
        rows = data["sections"][section]
        lines.append(f"  {json.dumps(section)}: [")
        for j, row in enumerate(rows):
            comma = "," if j < len(rows) - 1 else ""
            lines.append("   " + json.dumps(row, ensure_ascii=False) + comma)
        lines.append("  ]" + ("," if i < len(names) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def render_names(data: dict) -> str:
    """The text of ``catalog_names.py`` for parsed ``data``: each namespace's function names."""
    lines = ['"""Each catalog namespace\'s function names, written by ``python -m torchdevice.catalog`` with',
             "``catalog.json`` (do not edit): what activation reads of the catalog (see :mod:`torchdevice.catalog`).",
             '"""', "", "NAMES: dict[str, frozenset[str]] = {"]
    for section, rows in data["sections"].items():
        names = sorted({row["api"].rpartition(".")[2] for row in rows})
        lines.append(f"    {json.dumps(SECTION_NAMESPACE[section])}: frozenset({{")
        lines += [f"        {json.dumps(name)}," for name in names]
        lines.append("    }),")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- loading the shipped catalog -----------------------------------------------------


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Entry, ...]:
    with open(DATA, encoding="utf-8") as f:
        data = json.load(f)
    entries = []
    for section in SECTIONS:
        for row in data["sections"][section]:
            entries.append(Entry(
                row["api"], section, tuple(row["arguments"]), row["more_arguments"],
                row["returns"], row["description"],
            ))
    return tuple(entries)


def entries(section: str | None = None) -> list[Entry]:
    """Every catalog entry, in catalog order; only ``section``'s when given."""
    if section is not None and section not in SECTIONS:
        raise ValueError(f"unknown catalog section {section!r}; known: {', '.join(SECTIONS)}")
    return [e for e in _load() if section is None or e.section == section]


@functools.lru_cache(maxsize=1)
def _by_api() -> dict[str, Entry]:
    return {e.api: e for e in _load()}


def get(api: str) -> Entry | None:
    """The entry for ``api`` (``"torch.cuda.memory_allocated"``), or None."""
    return _by_api().get(api)


def apis(section: str | None = None) -> list[str]:
    return [e.api for e in entries(section)]


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m torchdevice.catalog", description=__doc__.splitlines()[0])
    parser.add_argument("seed", nargs="?", help="the seed file (default: tests/fixtures/seeds/004_*.txt)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    seed = Path(args.seed) if args.seed else find_seed()
    if seed is None or not seed.is_file():
        print(f"torchdevice.catalog: no seed file found (looked in {', '.join(map(str, SEED_DIRS))})", file=sys.stderr)
        return 2
    data = parse_seed(seed.read_text(encoding="utf-8"))
    files = {DATA: render(data, seed.name), NAMES_MODULE: render_names(data)}
    if args.check:
        stale = [path for path, text in files.items()
                 if (path.read_text(encoding="utf-8") if path.exists() else "") != text]
        for path in stale:
            print(f"{path} is stale: regenerate with python -m torchdevice.catalog", file=sys.stderr)
        return 1 if stale else 0
    DATA.parent.mkdir(exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    counts = {s: len(v) for s, v in data["sections"].items()}
    print(f"wrote {DATA} and {NAMES_MODULE.name}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
