"""Cost of translation onto sim, against native sim code, beside the same ratio for cpu.

For each hot path, the translated call (``device="cuda"`` under ``torchdevice.patch()``, the target
``sim`` or ``cpu``) is timed against the call a port to that device makes (``device="sim"`` or
``"cpu"``, unpatched), interleaved: every round times each of the four sides, in an order that
rotates, and each side keeps its best round. The claim checked (issue 23): translation onto sim
costs no more over native sim code than translation onto cpu costs over native cpu code, i.e.
``sim ratio <= cpu ratio`` (within the noise that ``t + t``, the same code on both sides, shows).
A training step (forward, backward, SGD) of a small MLP is timed the same way. Run::

    python benchmarks/bench_sim.py [--rounds 15] [--number 2000] [--json FILE]

Needs torchdevice-sim (its C++ extension is built on first use).
"""
from __future__ import annotations

import argparse
import json
import platform
import timeit

import torch

import torchdevice
import torchdevice_sim

CASES = [
    # name, statement with DEV standing for the device string
    ("t + t (no device)", "t + t"),
    ("torch.device", "torch.device(DEV)"),
    ("torch.zeros(16, device=)", "torch.zeros(16, device=DEV)"),
    ("Tensor.to(device)", "h.to(DEV)"),
    ("training step", "step(DEV)"),
]
SIDES = ("cpu native", "cpu translated", "sim native", "sim translated")


def _step_factory():
    models: dict[str, tuple] = {}

    def step(device: str) -> None:
        key = str(torch.device(device))
        if key not in models:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
            models[key] = (model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(16, 32, device=device))
        model, opt, x = models[key]
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        if torch.device(device).type != "cpu":
            torch.sim.synchronize()  # the work is done, not only queued (the translated side: cuda is sim)

    return step


def _time(side: str, stmt: str, env: dict, number: int) -> float:
    target, how = side.split()
    dev = "'cuda'" if how == "translated" else f"'{target}'"
    code = stmt.replace("DEV", dev)
    if how == "translated":
        with torchdevice.use(target), torchdevice.patched():
            env["t"] = env["t_" + target] = torch.ones(16, device="cuda")
            return timeit.timeit(code, globals=env, number=number) / number
    env["t"] = env["t_" + target] = torch.ones(16, device=target)
    return timeit.timeit(code, globals=env, number=number) / number


def measure(rounds: int, number: int) -> list[dict]:
    torchdevice_sim.load()
    env = {"torch": torch, "h": torch.ones(16), "step": _step_factory()}
    best = {(name, side): float("inf") for name, _ in CASES for side in SIDES}
    for round_ in range(rounds):
        order = SIDES[round_ % 4:] + SIDES[:round_ % 4]  # rotate, so drift hits every side alike
        for side in order:
            for name, stmt in CASES:
                n = number if name != "training step" else max(1, number // 50)
                best[(name, side)] = min(best[(name, side)], _time(side, stmt, env, n))
    rows = []
    for name, _ in CASES:
        cpu = best[(name, "cpu translated")] / best[(name, "cpu native")]
        sim = best[(name, "sim translated")] / best[(name, "sim native")]
        rows.append({"case": name, **{f"{side} us": round(best[(name, side)] * 1e6, 2) for side in SIDES},
                     "cpu ratio": round(cpu, 3), "sim ratio": round(sim, 3)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = measure(args.rounds, args.number)
    print(f"torch {torch.__version__}, {platform.machine()}, best of {args.rounds} interleaved rounds")
    print(f"{'case':28} {'cpu native':>11} {'cpu transl.':>11} {'cpu ratio':>9} {'sim native':>11} {'sim transl.':>11} "
          f"{'sim ratio':>9}")
    for r in rows:
        print(f"{r['case']:28} {r['cpu native us']:>9.2f}us {r['cpu translated us']:>9.2f}us {r['cpu ratio']:>8.2f}x "
              f"{r['sim native us']:>9.2f}us {r['sim translated us']:>9.2f}us {r['sim ratio']:>8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "machine": platform.machine(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
