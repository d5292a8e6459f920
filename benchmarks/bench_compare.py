"""What ``torchdevice compare`` costs over a plain ``torchdevice run`` of the backend under test, in wall seconds.

Each round runs, each in a fresh process (interpreter and torch start-up included, as a user sees them):

* ``torchdevice run --backend B PROG ARGS`` (the baseline),
* ``torchdevice compare --backends A,B --level module --no-whole-run PROG ARGS`` (two recorded runs, in processes
  of their own, module outputs compared),
* ``torchdevice compare --backends A,B --no-whole-run PROG ARGS`` (op level: lockstep, every op also on A),

and the medians over the rounds are reported with their ratios to the baseline. The whole-run comparison
(on by default) adds one plain run on each backend to either level. ::

    python benchmarks/bench_compare.py [--rounds 3] [--backends cpu,mlx] [--args 128 4 20 64]

The program is tests/programs/compare_mlp.py (an MLP trained a few steps; ARGS: width depth steps batch).
Goal (issue 24): module level at most 3x the plain run; op level's measured cost is stated in docs/porting.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "tests", "programs", "compare_mlp.py")


def _time(cmd: list[str]) -> float:
    env = dict(os.environ)
    env.pop("TORCHDEVICE_BACKEND", None)
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="cpu,mlx")
    parser.add_argument("--args", nargs="*", default=["128", "4", "20", "64"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ref, backend = args.backends.split(",")
    td = [sys.executable, "-m", "torchdevice"]
    commands = {
        "plain run": [*td, "run", "--backend", backend, PROGRAM, *args.args],
        "compare --level module": [*td, "compare", "--backends", args.backends, "--level", "module", "--no-whole-run",
                                   PROGRAM, *args.args],
        "compare --level op": [*td, "compare", "--backends", args.backends, "--no-whole-run", PROGRAM, *args.args],
    }
    _time(commands["plain run"])  # warm the bytecode caches
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, cmd in commands.items():
            times[name].append(_time(cmd))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["plain run"]
    result = {"backends": args.backends, "program_args": args.args, "rounds": args.rounds,
              "median_s": {k: round(v, 3) for k, v in medians.items()},
              "ratio": {k: round(v / base, 2) for k, v in medians.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"compare_mlp.py {' '.join(args.args)}, backends {args.backends}, median of {args.rounds} rounds (wall s):")
    for name, value in medians.items():
        print(f"  {name:24s} {value:7.2f} s  {value / base:5.2f}x")


if __name__ == "__main__":
    main()
