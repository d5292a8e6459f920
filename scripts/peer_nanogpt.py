"""Peer run: karpathy/nanoGPT's own train.py, unmodified, translated onto each backend; the losses compared.

nanoGPT is a CUDA program (``device='cuda'``, bf16 autocast when ``torch.cuda.is_bf16_supported()``,
fused AdamW on ``cuda``, ``torch.cuda.amp.GradScaler``, pinned non-blocking batches,
``F.scaled_dot_product_attention``). This runs its ``train.py`` on a tiny model over a synthetic
token dataset (written here: nanoGPT's own preparation downloads text) with ``torchdevice run
--backend B`` for each backend, and checks that every printed loss is equal to the first backend's.
Full precision and no dropout by default (``--dtype float32 --dropout 0.0``): where the backends'
kernels are the CPU's (cpu, sim) the losses must be identical; a bfloat16 run compares autocast
policies, which differ by design between the CPU and a GPU-like device. One command::

    python scripts/peer_nanogpt.py NANOGPT_CHECKOUT [--backends cpu,sim] [--iters 10] [--dtype float32] [--racecheck]

``--racecheck`` runs sim with its stream race checker on (``TORCHDEVICE_SIM_RACECHECK=1``): a kernel that
uses memory another stream touched without ordering fails the run.

It exits non-zero when a loss differs or a run fails. Get a checkout with ``git clone
https://github.com/karpathy/nanoGPT`` (any recent commit; the run passes its settings on the
command line as nanoGPT's configurator takes them).
"""
from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

LOSS = re.compile(r"^(iter \d+: loss [0-9.]+|step \d+: train loss [0-9.]+, val loss [0-9.]+)", re.M)


def write_dataset(root: Path, vocab: int = 65, train: int = 20000, val: int = 2000) -> str:
    """nanoGPT's data/<name>/{train,val}.bin and meta.pkl, with seeded random tokens."""
    import numpy as np

    folder = root / "data" / "torchdevice_synth"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rng.integers(0, vocab, train, dtype=np.uint16).tofile(folder / "train.bin")
    rng.integers(0, vocab, val, dtype=np.uint16).tofile(folder / "val.bin")
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab}, f)
    return folder.name


def train_settings(dataset: str, iters: int, dropout: str, dtype: str, compile: str, out: Path) -> list[str]:
    """train.py's command line: a tiny model on ``dataset``, ``iters`` iterations, evaluated twice."""
    return [f"--dataset={dataset}", "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=8",
            f"--max_iters={iters}", "--eval_iters=2", f"--eval_interval={max(1, iters // 2)}", "--log_interval=1",
            f"--dropout={dropout}", f"--dtype={dtype}", f"--compile={compile}", f"--out_dir={out}",
            "--always_save_checkpoint=False"]


def run(checkout: Path, backend: str, args: argparse.Namespace, dataset: str, out: Path) -> tuple[list[str], float]:
    settings = train_settings(dataset, args.iters, args.dropout, args.dtype, args.compile, out)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    if args.racecheck:
        env["TORCHDEVICE_SIM_RACECHECK"] = "1"  # read by sim only
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "torchdevice", "run", "--backend", backend, "train.py", *settings],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=args.timeout)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"nanoGPT on {backend} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return LOSS.findall(done.stdout), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a nanoGPT checkout (its train.py, model.py, configurator.py)")
    parser.add_argument("--backends", default="cpu,sim")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--dropout", default="0.0")
    parser.add_argument("--compile", default="False", choices=("False", "True"))
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--racecheck", action="store_true", help="sim's stream race checker on (TORCHDEVICE_SIM_RACECHECK=1)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "train.py").is_file():
        sys.exit(f"{checkout} has no train.py: give a nanoGPT checkout")
    dataset = write_dataset(checkout)
    losses: dict[str, list[str]] = {}
    for backend in args.backends.split(","):
        losses[backend], seconds = run(checkout, backend, args, dataset, checkout / f"out-torchdevice-{backend}")
        print(f"{backend}: {len(losses[backend])} loss lines in {seconds:.1f} s; last: {losses[backend][-1]}")
    first, *others = losses
    failed = False
    for backend in others:
        differ = [(a, b) for a, b in zip(losses[first], losses[backend]) if a != b]
        if differ or len(losses[first]) != len(losses[backend]):
            failed = True
            print(f"{backend} differs from {first}: first difference {differ[:1] or 'in the number of lines'}")
        else:
            print(f"{backend}: every loss equal to {first}'s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
