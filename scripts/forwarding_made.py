"""Write (or check) ``torchdevice/_forwarding_made.py``: the makers activation uses, kept as source.

    python scripts/forwarding_made.py            # rewrite it from what activating the CPU backend builds
    python scripts/forwarding_made.py --check    # exit 1 if it differs (tests/test_forwarding.py runs this)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "torchdevice" / "_forwarding_made.py"


def forwarding_made_text() -> str:
    """The module's text for every maker activating the CPU backend builds (this process patches and
    unpatches torch, with nothing precompiled)."""
    from torchdevice import forwarding, router, translate

    forwarding.compile_everything()
    router.use("cpu")
    translate.patch()
    translate.unpatch()
    return forwarding.render_made(forwarding.compiled_sources)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    text = forwarding_made_text()
    if args.check:
        if not PATH.exists() or PATH.read_text(encoding="utf-8") != text:
            print(f"{PATH} is stale: regenerate with python scripts/forwarding_made.py", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text, encoding="utf-8")
    print(f"wrote {PATH}: {text.count('def make_')} makers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
