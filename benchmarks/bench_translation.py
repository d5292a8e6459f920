"""Cost of translation on the hot paths, as ratios against native CPU code.

Each case times a translated call (``device="cuda"`` under ``torchdevice.patch()``)
against the native call a CPU port would make (``device="cpu"``, unpatched), in
one interleaved run: each round times both sides, alternating which goes first,
so drift hits both alike; each side keeps its best round. ``t + t`` runs the
same code on both sides: its ratio shows the measurement noise. Run::

    python benchmarks/bench_translation.py [--rounds 40] [--number 20000] [--json FILE]

Budgets (issue 3): no-device ops 1.00x (checked as <= 1.02x: both sides run the same code, the
rest is noise), torch.device 2.5x, factory 1.3x, .to 3x.
"""
from __future__ import annotations

import argparse
import json
import platform
import timeit

import torch

import torchdevice

CASES = [
    # name, native statement, translated statement, budget
    ("t + t (no device)", "t + t", "t + t", 1.02),  # 1.00x: the same code runs; 2% is timer noise
    ("torch.device", "torch.device('cpu')", "torch.device('cuda')", 2.5),
    ("torch.zeros(16, device=)", "torch.zeros(16, device='cpu')", "torch.zeros(16, device='cuda')", 1.3),
    ("Tensor.to(device)", "t.to('cpu')", "t.to('cuda')", 3.0),
]


def measure(rounds: int, number: int) -> list[dict]:
    t = torch.ones(16)
    env = {"torch": torch, "t": t}
    best = {(name, side): float("inf") for name, *_ in CASES for side in ("native", "translated")}
    for round_ in range(rounds):
        # alternate which side goes first, so drift within a round hits both alike
        for side in ("native", "translated") if round_ % 2 == 0 else ("translated", "native"):
            if side == "translated":
                torchdevice.patch()
            try:
                for name, native, translated, _budget in CASES:
                    stmt = native if side == "native" else translated
                    seconds = timeit.timeit(stmt, globals=env, number=number)
                    best[(name, side)] = min(best[(name, side)], seconds / number)
            finally:
                torchdevice.unpatch()
    rows = []
    for name, _native, _translated, budget in CASES:
        n, tr = best[(name, "native")], best[(name, "translated")]
        rows.append({"case": name, "native_ns": round(n * 1e9, 1), "translated_ns": round(tr * 1e9, 1),
                     "ratio": round(tr / n, 3), "budget": budget, "within_budget": tr / n <= budget})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = measure(args.rounds, args.number)
    print(f"torch {torch.__version__}, torchdevice {torchdevice.__version__}, {platform.machine()}, "
          f"best of {args.rounds} x {args.number}")
    print(f"{'case':28} {'native ns':>10} {'translated ns':>14} {'ratio':>7} {'budget':>7}")
    for r in rows:
        flag = "" if r["within_budget"] else "  OVER BUDGET"
        print(f"{r['case']:28} {r['native_ns']:>10} {r['translated_ns']:>14} {r['ratio']:>7} {r['budget']:>7}{flag}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
