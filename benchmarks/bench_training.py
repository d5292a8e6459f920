"""The training example translated vs its hand port to the CPU, in one interleaved run.

``examples/train_cuda.py`` runs under ``torchdevice.patch()`` (CUDA code on the
CPU backend) and ``examples/ported/train_cpu.py`` runs natively, alternately,
in this one process: rounds alternate which side goes first so drift (other
processes, frequency scaling) hits both alike. Each run is the example's whole
``main()`` (data, model, AMP training loop with GradScaler, events, memory
figures, RNG round trip, checkpoint save/load, evaluation); the first run of
each side is a warm-up. Reports the ratio of the best runs and the median of
the per-round ratios, translated/native; the budget (issue 3) is 1.02x. Both sides must produce the
same losses, or the comparison is void. Run::

    python benchmarks/bench_training.py [--rounds 15] [--threads 1] [--json FILE] [-- example args]

Example arguments after ``--`` go to both programs (e.g. ``-- --epochs 3``).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import torchdevice

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 1.02


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time(fn, argv, translated: bool):
    if translated:
        torchdevice.patch()
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        result = fn(argv)
        return (time.perf_counter() - start, time.process_time() - cpu_start), result
    finally:
        if translated:
            torchdevice.unpatch()


def measure(rounds: int, example_args: list[str]) -> dict:
    cuda_program = _load(ROOT / "examples" / "train_cuda.py", "bench_train_cuda")
    cpu_program = _load(ROOT / "examples" / "ported" / "train_cpu.py", "bench_train_cpu")
    argv = ["--quiet", *example_args]
    times = {"native": [], "translated": []}  # wall seconds
    cpu = {"native": [], "translated": []}  # process CPU seconds
    ratios, cpu_ratios = [], []
    for i in range(rounds + 1):
        order = ("native", "translated") if i % 2 == 0 else ("translated", "native")
        this = {}
        for side in order:
            seconds, result = _time(cuda_program.main if side == "translated" else cpu_program.main, argv, side == "translated")
            this[side] = (seconds, result)
        if this["native"][1]["losses"] != this["translated"][1]["losses"]:
            raise SystemExit("translated and native losses differ: the comparison is void")
        if i == 0:
            continue  # warm-up
        for side in times:
            times[side].append(this[side][0][0])
            cpu[side].append(this[side][0][1])
        ratios.append(this["translated"][0][0] / this["native"][0][0])
        cpu_ratios.append(this["translated"][0][1] / this["native"][0][1])
    best = min(times["translated"]) / min(times["native"])
    cpu_best = min(cpu["translated"]) / min(cpu["native"])
    return {
        "case": "examples/train_cuda.py (translated) vs examples/ported/train_cpu.py",
        "example_args": example_args,
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "steps": len(this["native"][1]["losses"]),
        "native_best_s": round(min(times["native"]), 4),
        "translated_best_s": round(min(times["translated"]), 4),
        "native_median_s": round(statistics.median(times["native"]), 4),
        "translated_median_s": round(statistics.median(times["translated"]), 4),
        "ratio_of_bests": round(best, 4),
        "median_of_pair_ratios": round(statistics.median(ratios), 4),
        "native_cpu_best_s": round(min(cpu["native"]), 4),
        "translated_cpu_best_s": round(min(cpu["translated"]), 4),
        "cpu_ratio_of_bests": round(cpu_best, 4),
        "cpu_median_of_pair_ratios": round(statistics.median(cpu_ratios), 4),
        "budget": BUDGET,
        "within_budget": statistics.median(cpu_ratios) <= BUDGET,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "torch": torch.__version__,
    }


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    example_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, example_args = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1 keeps a shared machine's noise down; 0: torch's default)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torchdevice.use("cpu")
    row = measure(args.rounds, example_args)
    print(f"{row['case']}: {row['steps']} steps, {row['rounds']} interleaved rounds, {row['threads']} thread(s)")
    print(f"  native     best {row['native_best_s']:.3f} s  median {row['native_median_s']:.3f} s")
    print(f"  translated best {row['translated_best_s']:.3f} s  median {row['translated_median_s']:.3f} s")
    print(f"  native     CPU best {row['native_cpu_best_s']:.3f} s")
    print(f"  translated CPU best {row['translated_cpu_best_s']:.3f} s")
    print(f"  wall: ratio of bests {row['ratio_of_bests']:.3f}x, median of paired ratios "
          f"{row['median_of_pair_ratios']:.3f}x")
    print(f"  CPU time: ratio of bests {row['cpu_ratio_of_bests']:.3f}x, median of paired ratios "
          f"{row['cpu_median_of_pair_ratios']:.3f}x (budget {BUDGET:.2f}x): "
          f"{'within' if row['within_budget'] else 'OVER'} budget")
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
