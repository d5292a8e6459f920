"""What zero-code activation adds to ``import torch``, in CPU milliseconds, measured two ways.

**The hook, timed where it runs** (the precise figure): in each fresh process, ``import torch``
with activation off, then the ``torch.backends`` entry point torch calls at the end of its import
(``_torchdevice_autoload.hook``) is called as torch calls it, with ``TORCHDEVICE_BACKEND`` set,
and the process's CPU time is read around it (``time.process_time``), plus the young-generation
collection its allocations leave due (the shim holds the collector during the hook; the
program's first allocation after it runs that pass, so it is activation's cost too). The median
over the processes is reported, with the modules the hook imported.

**The paired difference** (the cross-check): each round runs ``import torch`` twice in fresh
processes, without and with ``TORCHDEVICE_BACKEND``, alternating which goes first, and takes
the difference of their CPU times (user + system, ``getrusage`` right after the import; the
process then leaves with ``os._exit``, because torch's teardown costs ~300 ms with a spread
larger than what is measured). This is the literal "import torch with and without" figure, but
it is the difference of two ~1.1 s figures that each vary by tens of milliseconds, so its median
moves by several milliseconds between runs; the interquartile range of the differences is printed
to show that spread.

Bytecode caches are warmed first (a user's installed packages have them; with
``PYTHONDONTWRITEBYTECODE=1`` every edited module would be compiled again in each process)::

    python benchmarks/bench_activation.py [--rounds 20] [--backend cpu]

Goal (issue 11): at most 25 ms with ``TORCHDEVICE_BACKEND=cpu``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

IMPORT = """\
import os, resource, sys
import torch
r = resource.getrusage(resource.RUSAGE_SELF)
sys.stdout.write(repr(1000 * (r.ru_utime + r.ru_stime)))
sys.stdout.flush()
os._exit(0)
"""

HOOK = """\
import gc, json, os, sys, time
backend = os.environ.pop("TORCHDEVICE_BACKEND")
import torch
import _torchdevice_autoload
os.environ["TORCHDEVICE_BACKEND"] = backend
before = len(sys.modules)
start = time.process_time()
_torchdevice_autoload.hook()
hooked = time.process_time()
gc.collect(0)  # the young-generation pass the program's next allocation would run
done = time.process_time()
import torchdevice
assert torchdevice.current_backend() == backend and torch.cuda.is_available(), "translation did not turn on"
sys.stdout.write(json.dumps([1000 * (hooked - start), 1000 * (done - hooked), len(sys.modules) - before]))
sys.stdout.flush()
os._exit(0)
"""


def _run(code: str, env: dict) -> str:
    return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout


def _quartiles(values: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.1f} to {q3:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args(argv)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_") and k != "PYTHONDONTWRITEBYTECODE"}
    active = {**plain, "TORCHDEVICE_BACKEND": args.backend}
    _run(IMPORT, plain), _run(IMPORT, active)  # warm bytecode caches

    hook, collect, modules = [], [], set()
    for _ in range(args.rounds):
        ms, gc_ms, n = json.loads(_run(HOOK, active))
        hook.append(ms + gc_ms)
        collect.append(gc_ms)
        modules.add(n)
    print(f"the hook, timed in-process: {statistics.median(hook):.1f} ms CPU (median of {args.rounds} processes; "
          f"quartiles {_quartiles(hook)}; of it the young collection {statistics.median(collect):.1f} ms); "
          f"modules imported: {', '.join(map(str, sorted(modules)))}")

    added, base = [], []
    for i in range(args.rounds):
        if i % 2:
            a, b = float(_run(IMPORT, plain)), float(_run(IMPORT, active))
        else:
            b, a = float(_run(IMPORT, active)), float(_run(IMPORT, plain))
        added.append(b - a)
        base.append(a)
    print(f"import torch: {statistics.median(base):.0f} ms CPU; TORCHDEVICE_BACKEND={args.backend} adds "
          f"{statistics.median(added):.1f} ms (median of {args.rounds} paired rounds; quartiles of the differences "
          f"{_quartiles(added)})")
    print("goal (issue 11): <= 25 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
