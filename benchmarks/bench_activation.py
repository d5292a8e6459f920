"""What zero-code activation adds to ``import torch``, in CPU milliseconds.

Each round runs ``import torch`` twice in fresh processes, without and with
``TORCHDEVICE_BACKEND=cpu``, alternating which goes first, and takes the difference of their
CPU times (user + system of the process, from ``getrusage(RUSAGE_SELF)`` read right after the
import: interpreter start-up plus ``import torch``; the process then leaves with ``os._exit``,
because torch's own teardown costs ~300 ms with a spread larger than what is measured here).
The median difference is reported. Bytecode caches are warmed first (a user's installed
packages have them)::

    python benchmarks/bench_activation.py [--rounds 20] [--backend cpu]

Goal (issue 11): at most 25 ms with ``TORCHDEVICE_BACKEND=cpu``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CODE = """\
import os, resource, sys
import torch
r = resource.getrusage(resource.RUSAGE_SELF)
sys.stdout.write(repr(1000 * (r.ru_utime + r.ru_stime)))
sys.stdout.flush()
os._exit(0)
"""


def _cpu_ms(env: dict) -> float:
    done = subprocess.run([sys.executable, "-c", CODE], env=env, check=True, capture_output=True, text=True)
    return float(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args(argv)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_") and k != "PYTHONDONTWRITEBYTECODE"}
    active = {**plain, "TORCHDEVICE_BACKEND": args.backend}
    _cpu_ms(plain), _cpu_ms(active)  # warm bytecode caches
    added, base = [], []
    for i in range(args.rounds):
        if i % 2:
            a, b = _cpu_ms(plain), _cpu_ms(active)
        else:
            b, a = _cpu_ms(active), _cpu_ms(plain)
        added.append(b - a)
        base.append(a)
    print(f"import torch: {statistics.median(base):.0f} ms CPU; TORCHDEVICE_BACKEND={args.backend} adds "
          f"{statistics.median(added):.1f} ms (median of {args.rounds} paired rounds; goal <= 25 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
