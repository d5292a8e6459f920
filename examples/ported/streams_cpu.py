"""``examples/streams_cuda.py`` ported to the CPU by hand.

A CPU runs each operation to completion before the call returns, so a person
porting this drops the streams, the stream waits, ``record_stream`` and the
events, and times with ``time.perf_counter``. The arithmetic, the seed and the
order of random draws stay; the numbers agree with the translated CUDA version.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("STREAMS_OUT"))
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    n = args.size
    a = torch.randn(n, n)
    b = torch.randn(n, n)

    start = time.perf_counter()
    x = a @ b
    y = torch.relu(x) @ b
    z = torch.tanh(a) * 2
    middle = time.perf_counter()
    out = y + z
    end = time.perf_counter()

    chunks = torch.randn(args.chunks, 64, n).unbind(0)
    results = [torch.tanh(chunk @ b).sum(dim=0) for chunk in chunks]
    pipeline = torch.stack(results).sum(dim=0)

    seen = {}

    def worker():
        seen["thread_sum"] = (a * 3).sum().item()

    t = threading.Thread(target=worker)
    t.start()
    t.join()

    result = {
        "out_sum": out.double().sum().item(),
        "out_head": out[0, :4].tolist(),
        "y_sum": y.double().sum().item(),
        "pipeline_sum": pipeline.double().sum().item(),
        "pipeline_head": pipeline[:4].tolist(),
        "thread_sum": seen["thread_sum"],
        "elapsed_ms": (end - start) * 1000,
        "middle_ms": (middle - start) * 1000,
    }
    print(f"out {result['out_sum']:.4f}, pipeline {result['pipeline_sum']:.4f}, "
          f"{result['elapsed_ms']:.2f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
