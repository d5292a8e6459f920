"""MLX compute backend: per-op dispatch overhead and a tiny-GPT training step, vs torch CPU.

Run: ``python benchmarks/bench_mlx.py`` (mlx[cpu] on Linux here). MLX's CPU kernels on
Linux are much slower than torch's, so step times measure MLX-CPU, not Apple silicon or
MLX-CUDA: those numbers are **not hardware-verified** (no Metal/CUDA MLX was available).
Dispatch overhead is measured on a tiny tensor (4 elements) so kernel time is negligible:
the per-op cost of ``__torch_dispatch__`` + lowering + building the lazy MLX graph; each
MLX op is evaluated (``mx.eval``) every 100 ops, so graph size stays bounded.
"""
from __future__ import annotations

import os
import sys
import time

import mlx.core as mx
import torch
import torch.nn.functional as F

import torchdevice
from torchdevice_mlx.tensor import MLXTensor


def _dispatch_only(x, n: int = 2000) -> float:
    """Time to issue ``n`` ops without evaluating them (dispatch + lowering + graph building)."""
    start = time.perf_counter()
    for _ in range(n):
        y = x + 1.0
    elapsed = time.perf_counter() - start
    if isinstance(y, MLXTensor):
        mx.eval(y.mx_array)
    return elapsed / n * 1e6


def _per_op(x, n: int = 2000) -> float:
    start = time.perf_counter()
    for i in range(n):
        x = x + 1.0
        if isinstance(x, MLXTensor) and i % 100 == 99:
            mx.eval(x.mx_array)
    if isinstance(x, MLXTensor):
        mx.eval(x.mx_array)
    return (time.perf_counter() - start) / n * 1e6


def _gpt_step(device: str, steps: int = 3) -> float:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugins", "torchdevice-mlx", "tests"))
    from test_mlx_compute import TinyGPT

    torch.manual_seed(0)
    model = TinyGPT(vocab=256, d=128, heads=4, ctx=64).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (8, 64), device=device)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, 256), x.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()  # forces evaluation
        times.append(time.perf_counter() - start)
    return min(times[1:]) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    host = _per_op(torch.zeros(4))
    mlx = _per_op(MLXTensor.from_torch(torch.zeros(4)))
    issue = _dispatch_only(MLXTensor.from_torch(torch.zeros(4)))
    print(f"per-op dispatch (add, 4 elements, issued unevaluated): torch CPU {host:.1f} us, MLX path {issue:.1f} us, "
          f"overhead {issue - host:.1f} us/op (goal <= 10)")
    print(f"  with MLX evaluating the ops (a chain of 100, then mx.eval): {mlx:.1f} us/op -- MLX's own CPU "
          "execution of tiny ops, not torchdevice's dispatch")
    cpu_ms = _gpt_step("cpu")
    with torchdevice.use("mlx"), torchdevice.patched():
        mlx_ms = _gpt_step("cuda")
    print(f"tiny GPT (2 blocks, d=128, ctx=64, batch 8) AdamW step: torch CPU {cpu_ms:.1f} ms, "
          f"MLX[cpu] {mlx_ms:.1f} ms, ratio {mlx_ms / cpu_ms:.1f}x (MLX CPU kernels; not hardware-verified "
          "for Metal/CUDA MLX)")


if __name__ == "__main__":
    main()
