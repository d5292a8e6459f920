"""MLX compute backend, measured against torch on the CPU in one run (ratios are the result).

Run: ``python benchmarks/bench_mlx.py`` (``--model tiny`` for a quick run, ``--json FILE`` to keep
the numbers). Two measurements:

1. **Per-op dispatch overhead**: the CPU time (this thread's, best of 7 runs) to issue one op on a small (4x4) MLX-backed tensor --
   ``__torch_dispatch__``, the lowering, and building MLX's lazy graph node -- minus the time of the
   same op on a torch CPU tensor. Tiny tensors make kernel time negligible, so the difference is what
   torchdevice adds per op (goal: <= 10 us). MLX evaluates nothing while ops are issued; its own
   evaluation cost is not in this figure (it is in the step times below).
2. **GPT-2-small training step** (124M parameters: 12 layers, d=768, 12 heads, vocab 50257; batch 1,
   64 tokens; AdamW; forward + backward + step) with torch on the CPU, the same CUDA-written code
   translated to MLX eagerly, and with ``torch.compile(model, backend="mlx")`` where available.

**Not hardware-verified**: this machine runs mlx[cpu] on Linux, whose CPU kernels are much slower than
torch's (a large matmul ~30x); on Apple silicon MLX runs the same graphs with Metal kernels on
unified memory, and with mlx[cuda] on an NVIDIA GPU, where both the step ratio and the share of time
spent in dispatch change completely. Nothing here was measured on such hardware.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import torchdevice
from torchdevice_mlx.conversion import evaluate_pending
from torchdevice_mlx.tensor import MLXTensor

OPS = {
    "add (tensor)": lambda x: x + x,
    "add (scalar)": lambda x: x + 1.0,
    "mul": lambda x: x * x,
    "mm": lambda x: x @ x,
    "sum": lambda x: x.sum(),
    "relu": torch.relu,
    "softmax": lambda x: torch.softmax(x, -1),
    "view": lambda x: x.view(16),
    "transpose": lambda x: x.t(),
    "add_ (in place)": lambda x: x.add_(1.0),
    "linear": lambda x: F.linear(x, x, x[0]),
    "layer_norm": lambda x: F.layer_norm(x, (4,)),
}


def _per_call(fn, x, n: int, reps: int = 7) -> float:
    for _ in range(100):
        fn(x)
    best = math.inf
    for _ in range(reps):
        start = time.thread_time()  # this thread's CPU time: other processes on the machine do not count
        for _ in range(n):
            fn(x)
        best = min(best, (time.thread_time() - start) / n)
        if isinstance(x, MLXTensor):
            evaluate_pending()
    return best * 1e6


def dispatch_overhead(n: int = 2000) -> dict:
    host = torch.zeros(4, 4)
    rows = {}
    for name, fn in OPS.items():
        mlx = MLXTensor.from_torch(host)
        t_host, t_mlx = _per_call(fn, host, n), _per_call(fn, mlx, n)
        rows[name] = {"torch_cpu_us": round(t_host, 2), "mlx_us": round(t_mlx, 2), "overhead_us": round(t_mlx - t_host, 2)}
    overheads = [r["overhead_us"] for r in rows.values()]
    return {"ops": rows, "median_overhead_us": round(statistics.median(overheads), 2),
            "max_overhead_us": round(max(overheads), 2)}


# -- GPT-2 (nanoGPT's model, written for CUDA) ---------------------------------------------------

class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, heads: int, layers: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


MODELS = {
    "gpt2-small": {"vocab": 50257, "ctx": 1024, "d": 768, "heads": 12, "layers": 12, "batch": 1, "tokens": 64},
    "tiny": {"vocab": 256, "ctx": 64, "d": 64, "heads": 4, "layers": 2, "batch": 4, "tokens": 32},
}


def gpt_steps(device: str, cfg: dict, steps: int, compile_backend: str | None = None) -> dict:
    torch.manual_seed(0)
    model = GPT(cfg["vocab"], cfg["ctx"], cfg["d"], cfg["heads"], cfg["layers"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model, backend=compile_backend) if compile_backend else model
    data = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["tokens"] + 1), device=device)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    times, losses = [], []
    for _ in range(steps + 1):  # the first step warms up (and compiles)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = run(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if device != "cpu":
            # MLX is lazy: item() evaluates the loss only, and the optimizer's update would be evaluated (and
            # timed) in the next step; synchronize evaluates every pending array, so each step times its own work
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"step_ms": round(min(times[1:]) * 1e3, 1), "first_step_ms": round(times[0] * 1e3, 1), "losses": losses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2-small")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile(backend='mlx') step")
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads (default 1: a shared machine "
                        "oversubscribed by torch's thread pool measures contention, not torch)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import mlx.core as mx

    result: dict = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                    "torch": torch.__version__, "torch_threads": args.threads, "mlx": mx.__version__,
                    "mlx_device": str(mx.default_device()),
                    "hardware_verified": False},
    }
    print(f"# MLX backend benchmark ({result['machine']['platform']}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; torch {torch.__version__}, mlx {mx.__version__} on {mx.default_device()}; "
          "NOT hardware-verified on Metal or MLX-CUDA)\n")
    d = result["dispatch"] = dispatch_overhead()
    print("## Per-op dispatch overhead (4x4 tensors, op issued, MLX graph built, not evaluated)\n")
    print("| op | torch CPU us | MLX path us | overhead us |\n|---|---:|---:|---:|")
    for name, row in d["ops"].items():
        print(f"| {name} | {row['torch_cpu_us']} | {row['mlx_us']} | {row['overhead_us']} |")
    print(f"\nmedian overhead {d['median_overhead_us']} us/op (goal <= 10), max {d['max_overhead_us']} us\n")

    cfg = MODELS[args.model]
    print(f"## {args.model} training step (batch {cfg['batch']}, {cfg['tokens']} tokens, AdamW)\n")
    cpu = gpt_steps("cpu", cfg, args.steps)
    with torchdevice.use("mlx"), torchdevice.patched():
        eager = gpt_steps("cuda", cfg, args.steps)
        compiled = None
        if not args.no_compile:
            try:
                compiled = gpt_steps("cuda", cfg, args.steps, compile_backend="mlx")
            except Exception as exc:  # noqa: BLE001 -- reported in the table, never hides the eager numbers
                compiled = {"error": f"{type(exc).__name__}: {exc}"}
    result["gpt"] = {"model": args.model, "config": cfg, "torch_cpu": cpu, "mlx_eager": eager, "mlx_compiled": compiled}
    print("| run | step ms | vs torch CPU | first step ms | losses |\n|---|---:|---:|---:|---|")
    for name, r in (("torch CPU", cpu), ("MLX eager", eager), ("MLX torch.compile", compiled)):
        if r is None:
            continue
        if "error" in r:
            print(f"| {name} | - | - | - | {r['error']} |")
            continue
        ratio = r["step_ms"] / cpu["step_ms"]
        print(f"| {name} | {r['step_ms']} | {ratio:.1f}x | {r['first_step_ms']} | "
              + ", ".join(f"{v:.4f}" for v in r["losses"]) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
