"""Cost of translation on an FSDP2 training step: the CUDA-written step through ``torchrun -m torchdevice
run`` on the cpu backend against its native CPU/gloo port (``benchmarks/fsdp2_step.py``), 2 ranks.

Interleaved: each round launches both, alternating which goes first; each side keeps its best
round's median step time. Run::

    python benchmarks/bench_fsdp2.py [--rounds 3] [--steps 30] [--json FILE]

Goal (issue 31): <= 1.05x.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

import torchdevice

STEP = Path(__file__).with_name("fsdp2_step.py")


def _launch(translated: bool, steps: int, port: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port)]
    if translated:
        env["TORCHDEVICE_BACKEND"] = "cpu"
        cmd += ["-m", "torchdevice", "run", str(STEP), "--device", "cuda", "--backend", "nccl"]
    else:
        cmd += [str(STEP), "--device", "cpu", "--backend", "gloo"]
    out = subprocess.run(cmd + ["--steps", str(steps)], env=env, capture_output=True, text=True, timeout=600,
                         check=True).stdout
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("STEP_SECONDS")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", help="also write the result to this file")
    args = parser.parse_args()
    best = {"native": float("inf"), "translated": float("inf")}
    for round_ in range(args.rounds):
        order = ("native", "translated") if round_ % 2 == 0 else ("translated", "native")
        for i, side in enumerate(order):
            best[side] = min(best[side], _launch(side == "translated", args.steps, 29700 + 2 * round_ + i))
    ratio = best["translated"] / best["native"]
    print(f"torch {torch.__version__}, torchdevice {torchdevice.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, best of {args.rounds} rounds, median of {args.steps} steps")
    print(f"native {best['native'] * 1e3:.2f} ms/step, translated {best['translated'] * 1e3:.2f} ms/step, "
          f"ratio {ratio:.3f} (goal <= 1.05)")
    if args.json:
        Path(args.json).write_text(json.dumps({**best, "ratio": ratio}, indent=2))


if __name__ == "__main__":
    main()
