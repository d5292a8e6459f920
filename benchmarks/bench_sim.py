"""Cost of translation onto sim, against native sim code, beside the same ratio for cpu.

For each hot path, the translated call (``device="cuda"`` under ``torchdevice.patch()``, the target
``sim`` or ``cpu``) is timed against the call a port to that device makes (``device="sim"`` or
``"cpu"``, unpatched), interleaved: every round times each of the four sides, in an order that
rotates, and each side keeps its best round. The claim checked (issue 23): translation onto sim
costs no more over native sim code than translation onto cpu costs over native cpu code, i.e.
``sim ratio <= cpu ratio`` (within the noise that ``t + t``, the same code on both sides, shows).
A training step (forward, backward, SGD) of a small MLP is timed the same way.

Then sim's own cost per op (issue 32: a simulated GPU should add no more than a CUDA launch, ~5-10 us,
over the CPU kernel): small ops (64x64 float32 ``add``, ``mm``, ``relu``) on native CPU tensors, on
the cpu backend (``cuda`` translated to cpu) and on sim (``cuda`` translated to sim), each side timing a
batch of calls followed by a synchronize (so queued work is counted), interleaved and best of the rounds;
and a small training loop (an MLP with Adam, several steps, synchronized) on the cpu backend and on sim,
whose ratio should be at most 1.5. Run::

    python benchmarks/bench_sim.py [--rounds 15] [--number 2000] [--json FILE] [--ops-only]

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


OPS = [("add", "a + b"), ("mm", "a @ b"), ("relu", "torch.relu(a)")]
OP_SIDES = ("native cpu", "cpu backend", "sim")


def _op_time(side: str, stmt: str, number: int) -> float:
    """Seconds per call of ``stmt`` on 64x64 float32 tensors ``a``, ``b`` on ``side``, completion included."""
    env: dict = {"torch": torch}
    if side == "native cpu":
        env["a"], env["b"] = torch.randn(64, 64), torch.randn(64, 64)
        return timeit.timeit(stmt, globals=env, number=number) / number
    with torchdevice.use("cpu" if side == "cpu backend" else "sim"), torchdevice.patched():
        env["a"], env["b"] = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        torch.cuda.synchronize()
        seconds = timeit.timeit(stmt, globals=env, number=number)
        start = timeit.default_timer()
        torch.cuda.synchronize()  # the queued work is part of the cost
        return (seconds + timeit.default_timer() - start) / number


def _loop(steps: int) -> None:
    """A small CUDA training loop: an MLP, Adam, ``steps`` steps, then the loss read on the host."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).to("cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64, device="cuda"), torch.randint(0, 10, (32,), device="cuda")
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    loss.item()


def _loop_time(side: str, steps: int) -> float:
    with torchdevice.use("cpu" if side == "cpu backend" else "sim"), torchdevice.patched():
        _loop(2)  # warm: modules, optimizer state, sim's caches
        start = timeit.default_timer()
        _loop(steps)
        return (timeit.default_timer() - start) / steps


def measure_ops(rounds: int, number: int, steps: int) -> dict:
    """Best-of-``rounds`` us per op for each side, and the training loop's seconds per step, interleaved."""
    torchdevice_sim.load()
    best = {(name, side): float("inf") for name, _ in OPS for side in OP_SIDES}
    loop = {"cpu backend": float("inf"), "sim": float("inf")}
    for round_ in range(rounds):
        order = OP_SIDES[round_ % 3:] + OP_SIDES[:round_ % 3]
        for side in order:
            for name, stmt in OPS:
                best[(name, side)] = min(best[(name, side)], _op_time(side, stmt, number))
            if side in loop:
                loop[side] = min(loop[side], _loop_time(side, steps))
    ops = [{"op": name, **{f"{side} us": round(best[(name, side)] * 1e6, 2) for side in OP_SIDES},
            "sim over cpu us": round((best[(name, "sim")] - best[(name, "native cpu")]) * 1e6, 2)} for name, _ in OPS]
    return {"ops": ops, "loop step ms": {k: round(v * 1e3, 3) for k, v in loop.items()},
            "loop ratio": round(loop["sim"] / loop["cpu backend"], 3)}


def _print_ops(result: dict, rounds: int) -> None:
    print(f"\nper op, 64x64 float32, best of {rounds} interleaved rounds (sim: completion included)")
    print(f"{'op':6} {'native cpu':>11} {'cpu backend':>12} {'sim':>10} {'sim - native':>13}")
    for r in result["ops"]:
        print(f"{r['op']:6} {r['native cpu us']:>9.2f}us {r['cpu backend us']:>10.2f}us {r['sim us']:>8.2f}us "
              f"{r['sim over cpu us']:>11.2f}us")
    steps = result["loop step ms"]
    print(f"training loop step: cpu backend {steps['cpu backend']:.3f} ms, sim {steps['sim']:.3f} ms, "
          f"ratio {result['loop ratio']:.2f}x (goal <= 1.5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--ops-only", action="store_true", help="only the per-op costs and the training loop")
    parser.add_argument("--steps", type=int, default=20, help="training loop steps per timing")
    args = parser.parse_args()
    ops = measure_ops(args.rounds, max(1, args.number // 4), args.steps)
    rows = [] if args.ops_only else measure(args.rounds, args.number)
    print(f"torch {torch.__version__}, {platform.machine()}, best of {args.rounds} interleaved rounds")
    print(f"{'case':28} {'cpu native':>11} {'cpu transl.':>11} {'cpu ratio':>9} {'sim native':>11} {'sim transl.':>11} "
          f"{'sim ratio':>9}")
    for r in rows:
        print(f"{r['case']:28} {r['cpu native us']:>9.2f}us {r['cpu translated us']:>9.2f}us {r['cpu ratio']:>8.2f}x "
              f"{r['sim native us']:>9.2f}us {r['sim translated us']:>9.2f}us {r['sim ratio']:>8.2f}x")
    _print_ops(ops, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "machine": platform.machine(), "rows": rows, **ops}, f, indent=2)


if __name__ == "__main__":
    main()
