"""Issue 31 failure 7: does a translated 2-rank DDP program exit 0 every time? Runs
``torchrun --nproc-per-node 2 -m torchdevice run examples/ddp_train.py`` N times and reports each
failed run's exit status and the lines that name the abort. Outside the default test run (N torchrun launches)::

    python scripts/stress_ddp_exit.py [-n 50] [--load 2] [--backend cpu]

``--load K`` runs K busy-looping processes beside it, as a loaded CI machine has.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "ddp_train.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _busy(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def run_once(backend: str, out: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    env.update(TORCHDEVICE_BACKEND=backend, GLOO_SOCKET_IFNAME="lo")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), "-m", "torchdevice", "run", str(PROGRAM), "--out", out]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args()
    loaders = [multiprocessing.Process(target=_busy, args=(time.time() + 3600,), daemon=True)
               for _ in range(args.load)]
    for p in loaders:
        p.start()
    failures = 0
    try:
        with tempfile.TemporaryDirectory() as out:
            for i in range(args.n):
                code, output = run_once(args.backend, out)
                if code != 0:
                    failures += 1
                    marks = [line for line in output.splitlines()
                             if "terminate called" in line or "Signal" in line or "exitcode" in line]
                    print(f"run {i}: exit {code}: " + " | ".join(marks[:4]), flush=True)
    finally:
        for p in loaders:
            p.terminate()
    print(f"{args.n - failures}/{args.n} runs exited 0")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
