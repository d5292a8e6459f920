"""Where a conv-heavy training step spends its time on MLX, op by op, next to torch on the CPU.

Run: ``python benchmarks/profile_mlx_conv.py`` (``--model cnn|block|both``, ``--steps N``, ``--json FILE``).

The same CUDA-written training step (forward, backward, SGD with momentum) runs natively on torch's CPU and
translated onto mlx (``torchdevice.use("mlx")`` + ``torchdevice.patched()``). For every ATen op reaching the
device it reports:

* **torch CPU ms**: the op's time in torch on the CPU (a ``TorchDispatchMode`` timing each op);
* **MLX ms**: the op's time through torchdevice on MLX -- dispatch, the lowering, and MLX computing its
  outputs (each top-level op's outputs are evaluated when it returns, so MLX's lazy graph is charged to the
  op that built it; this removes nothing MLX would otherwise overlap on its CPU stream, which runs one op
  at a time);
* **conv ms**: of that, time in host <-> MLX copies (``bridge.to_mlx``/``from_mlx``) made for the op;
* **host ms**: of that, time the op spent running on torch's host kernels (a counted fallback).

Copies outside any op (``.item()``, ``.cpu()``, moving the batch) are listed as ``(outside ops)``. Unprofiled
step times of both are given first. The per-op evaluation makes the profiled MLX total larger than the
unprofiled step; ratios between ops are what it is for.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import torchdevice

OUTSIDE = "(outside ops)"


def cnn() -> nn.Module:
    """The MNIST CNN of PyTorch's examples (two convolutions, max-pool, dropout, two linears)."""
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


class Block(nn.Module):
    """A ResNet basic block (conv-BN-ReLU-conv-BN plus the identity) and a classifier."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)) + x)
        return self.head(out.mean((2, 3)))


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "cnn": (cnn, (64, 1, 28, 28)), "block": (Block, (16, 3, 32, 32))}


def make_step(name: str, device: str) -> Callable[[], float]:
    """One training step of model ``name`` on ``device`` (the program's view: "cuda" when translated)."""
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(*shape, device=device)
    y = torch.randint(0, 10, (shape[0],), device=device)

    def step() -> float:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


class OpTable:
    """op name -> calls and seconds per column."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, op: str, column: str, seconds: float, count: bool = False) -> None:
        row = self.rows[op]
        row[column] += seconds
        if count:
            row[column + " calls"] += 1


class TorchTimer(TorchDispatchMode):
    """Times every ATen op torch runs on the CPU."""

    def __init__(self, table: OpTable) -> None:
        super().__init__()
        self.table = table

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.table.add(str(func), "torch", time.perf_counter() - start, count=True)
        return out


class MLXTimer:
    """Times every top-level ATen op on MLX tensors (evaluating its outputs), and the copies and host runs in it."""

    def __init__(self, table: OpTable) -> None:
        from torchdevice_mlx import bridge, dispatch, tensor

        self.table, self.bridge, self.dispatch, self.tensor = table, bridge, dispatch, tensor
        self.current: list[str] = []
        self.saved: dict[str, Any] = {}
        self.patched: list[tuple[Any, str, Any]] = []  # (module, name, original)

    def __enter__(self) -> MLXTimer:
        dispatch = self.dispatch
        # the plugin's modules import to_mlx/from_mlx by name: each module's binding is timed
        originals = {name: getattr(self.bridge, name) for name in ("to_mlx", "from_mlx")}
        for module in [m for n, m in sys.modules.items() if n.split(".")[0] == "torchdevice_mlx"]:
            for name, original in originals.items():
                if getattr(module, name, None) is original:
                    self.patched.append((module, name, original))
                    setattr(module, name, self._timing(original, "conv"))
        self.saved = {"_host_fallback": dispatch._host_fallback}
        dispatch._host_fallback = self._timing(dispatch._host_fallback, "host")
        self.tensor.bind_dispatch(self._op)
        return self

    def __exit__(self, *exc: Any) -> None:
        for module, name, original in reversed(self.patched):
            setattr(module, name, original)
        self.patched.clear()
        self.dispatch._host_fallback = self.saved["_host_fallback"]
        self.tensor.bind_dispatch(self.dispatch.dispatch)

    def _timing(self, fn: Callable[..., Any], column: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.table.add(self.current[0] if self.current else OUTSIDE, column, time.perf_counter() - start)
        return timed

    def _op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        top = not self.current
        self.current.append(str(func))
        start = time.perf_counter()
        try:
            out = self.dispatch.dispatch(func, args, kwargs)
            if top:
                arrays = [t.mx_array for t in tree_leaves(out) if isinstance(t, self.tensor.MLXTensor)]
                if arrays:
                    _eval(arrays)
        finally:
            self.current.pop()
        if top:
            self.table.add(str(func), "mlx", time.perf_counter() - start, count=True)
        return out


def _eval(arrays: list) -> None:
    from torchdevice_mlx.runtime import mx

    mx().eval(*arrays)


def timed_steps(step: Callable[[], float], steps: int, sync: Callable[[], None]) -> float:
    """Median seconds of ``steps`` steps after one warm-up step."""
    step()
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def profile(name: str, steps: int) -> dict[str, Any]:
    table = OpTable()
    native_step = make_step(name, "cpu")
    native_s = timed_steps(native_step, steps, lambda: None)
    with TorchTimer(table):
        native_step()
    with torchdevice.use("mlx"), torchdevice.patched():
        from torchdevice_mlx.conversion import fallback_counts, reset_fallback_counts

        mlx_step = make_step(name, "cuda")
        mlx_s = timed_steps(mlx_step, steps, torch.cuda.synchronize)
        reset_fallback_counts()
        with MLXTimer(table):
            mlx_step()
        fallbacks = fallback_counts()
    return {"model": name, "torch step s": native_s, "mlx step s": mlx_s, "ratio": mlx_s / native_s,
            "fallbacks": fallbacks, "ops": {op: dict(row) for op, row in table.rows.items()}}


def report(result: dict[str, Any], top: int) -> str:
    lines = [f"## {result['model']}: torch CPU {result['torch step s'] * 1e3:.1f} ms/step, MLX "
             f"{result['mlx step s'] * 1e3:.1f} ms/step ({result['ratio']:.2f}x); host fallbacks: "
             f"{result['fallbacks'] or 'none'}", "",
             "| op | calls (torch/mlx) | torch CPU ms | MLX ms | conv ms | host ms | MLX/torch |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    rows = sorted(result["ops"].items(), key=lambda kv: -kv[1].get("mlx", 0.0))
    for op, row in rows[:top]:
        native, mlx = row.get("torch", 0.0) * 1e3, row.get("mlx", 0.0) * 1e3
        ratio = f"{mlx / native:.1f}" if native and mlx else "-"
        lines.append(f"| {op} | {int(row.get('torch calls', 0))}/{int(row.get('mlx calls', 0))} | {native:.2f} | "
                     f"{mlx:.2f} | {row.get('conv', 0.0) * 1e3:.2f} | {row.get('host', 0.0) * 1e3:.2f} | {ratio} |")
    totals = {c: sum(r.get(c, 0.0) for r in result["ops"].values()) * 1e3 for c in ("torch", "mlx", "conv", "host")}
    lines.append(f"| **total** | | {totals['torch']:.1f} | {totals['mlx']:.1f} | {totals['conv']:.1f} | "
                 f"{totals['host']:.1f} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*MODELS, "both"], default="both")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (median) after one warm-up")
    parser.add_argument("--top", type=int, default=15, help="ops listed, by MLX time")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args(argv)
    print(f"{platform.machine()} {platform.system()}, torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"{time.strftime('%Y-%m-%d')}")
    results = [profile(name, args.steps) for name in (MODELS if args.model == "both" else [args.model])]
    for result in results:
        print(report(result, args.top) + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
