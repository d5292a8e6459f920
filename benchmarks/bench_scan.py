"""Time ``torchdevice scan`` on a generated tree of Python files (10,000 by default).

    python benchmarks/bench_scan.py [--files N] [--cuda-share 0.3] [--jobs J] [--cli] [--keep DIR]

The tree mixes training scripts, models and utilities of 40-400 lines in
nested packages; ``--cuda-share`` of the files use accelerator APIs (every
detection category), the rest are plain PyTorch/Python code that mentions no
accelerator. With ``--cuda-share 1`` every file must be parsed (the worst
case). ``--cli`` also times the command end to end (``python -m torchdevice
scan TREE --format json``), torch import included. Prints one line per timing.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

PLAIN_BLOCK = '''
class Block{i}(nn.Module):
    """A residual block; see the paper for details."""

    def __init__(self, dim: int, hidden: int = {h}, dropout: float = 0.1):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        y = self.fc2(self.drop(F.gelu(self.fc1(self.norm(x)))))
        if mask is not None:
            y = y.masked_fill(mask[..., None], 0.0)
        return x + y


def helper_{i}(values, scale={h}):
    total = 0
    for j, v in enumerate(values):
        if j % 3 == 0:
            total += v * scale
        elif isinstance(v, dict):
            total += sum(v.get(k, 0) for k in ("a", "b", "c"))
        else:
            total -= len(str(v))
    return {{"total": total, "name": f"helper_{i}", "items": [x for x in values if x]}}
'''

CUDA_BLOCK = '''
def train_step_{i}(model, batch, optimizer, scaler, rank):
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    x = batch["x"].to(device, non_blocking=True)
    y = batch["y"].cuda(non_blocking=True)
    with torch.cuda.amp.autocast():
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    torch.cuda.synchronize()
    if rank == 0 and {i} % 10 == 0:
        print(f"step {i}: {{torch.cuda.memory_allocated() / 2**20:.1f}} MiB", tc.max_memory_allocated())
    return loss.item()


def setup_{i}(local_rank):
    torch.backends.cudnn.benchmark = True
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(local_rank)
    state = torch.load("ckpt.pt", map_location=f"cuda:{{local_rank}}")
    if torch.backends.mps.is_available():
        state = {{k: v.to("mps") for k, v in state.items()}}
    return state, synchronize
'''

HEADER_PLAIN = '''"""Generated module {n}: plain model code."""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
'''

HEADER_CUDA = '''"""Generated module {n}: training code written for CUDA."""
import os

import torch
import torch.cuda as tc
import torch.distributed as dist
import torch.nn.functional as F
from torch.cuda import synchronize
'''


def make_tree(root: str, files: int, cuda_share: float, seed: int = 0) -> int:
    """Write ``files`` modules under ``root``; returns the total number of lines."""
    rng = random.Random(seed)
    lines = 0
    per_dir = 50
    for n in range(files):
        d = os.path.join(root, f"pkg{n // (per_dir * 20)}", f"sub{(n // per_dir) % 20}")
        os.makedirs(d, exist_ok=True)
        cuda = rng.random() < cuda_share
        parts = [(HEADER_CUDA if cuda else HEADER_PLAIN).format(n=n)]
        for i in range(rng.randint(1, 8)):
            parts.append(PLAIN_BLOCK.format(i=i, h=rng.choice((64, 128, 256))))
            if cuda and rng.random() < 0.5:
                parts.append(CUDA_BLOCK.format(i=i))
        if cuda and len(parts) == 2:
            parts.append(CUDA_BLOCK.format(i=99))
        text = "".join(parts)
        lines += text.count("\n")
        with open(os.path.join(d, f"mod{n}.py"), "w") as f:
            f.write(text)
    # things that must be skipped or reported, not fatal
    with open(os.path.join(root, "legacy_py2.py"), "w") as f:
        f.write('print "cuda"\n')
    venv = os.path.join(root, ".venv", "lib", "site-packages")
    os.makedirs(venv)
    with open(os.path.join(venv, "x.py"), "w") as f:
        f.write("import torch\ntorch.cuda.synchronize()\n")
    return lines


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the pool's workers)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--cuda-share", type=float, default=0.3)
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    parser.add_argument("--cli", action="store_true", help="also time the command line end to end")
    parser.add_argument("--keep", metavar="DIR", help="build the tree in DIR and keep it")
    args = parser.parse_args()

    from torchdevice.scan import scan_paths

    root = args.keep or tempfile.mkdtemp(prefix="td-bench-scan-")
    try:
        t0 = time.perf_counter()
        lines = make_tree(root, args.files, args.cuda_share)
        print(f"tree: {args.files} files, {lines} lines, {args.cuda_share:.0%} with accelerator uses "
              f"(generated in {time.perf_counter() - t0:.1f}s); {os.cpu_count()} CPUs")
        lookup = lambda api: ("unknown", "")  # noqa: E731  (time the scan, not the status source)
        for jobs in ([args.jobs] if args.jobs else [1, os.cpu_count() or 1]):
            t0, c0 = time.perf_counter(), _cpu()
            report = scan_paths([root], "cpu", jobs=jobs, lookup=lookup)
            dt, cpu = time.perf_counter() - t0, _cpu() - c0
            print(f"scan_paths jobs={jobs}: {dt:.2f}s wall, {cpu:.2f}s CPU  ({report.files_scanned} files, "
                  f"{len(report.uses)} uses, {len(report.errors)} parse errors, {report.files_scanned / dt:.0f} files/s)")
        print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        if args.cli:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "torchdevice", "scan", root, "--format", "json"],
                                  capture_output=True, text=True)
            dt = time.perf_counter() - t0
            data = json.loads(proc.stdout)
            print(f"cli (torch import included): {dt:.2f}s  rc={proc.returncode}, "
                  f"{data['summary']['uses']} uses in {data['summary']['files_with_uses']} files")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
