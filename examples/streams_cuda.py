"""Overlap work on CUDA streams and time it with CUDA events; written for an NVIDIA GPU.

The usual stream patterns: a side stream that waits for the main stream's
producer (``wait_stream``), work issued under ``with torch.cuda.stream(s)``,
``Tensor.record_stream`` for a tensor used on another stream, events to order
streams (``record_event``, ``wait_event``) and to time them
(``Event(enable_timing=True)``, ``elapsed_time``), ``query``, double-buffered
chunks over two streams, and a thread with its own current stream.

    python examples/streams_cuda.py --out result.json          # on a GPU
    torchdevice run examples/streams_cuda.py --out result.json  # anywhere

``examples/ported/streams_cpu.py`` is the hand port; the numbers agree.
"""
from __future__ import annotations

import argparse
import json
import os
import threading

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
    if not torch.cuda.is_available():
        raise SystemExit("this script needs a CUDA GPU")
    torch.manual_seed(args.seed)
    n = args.size
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")

    main_stream = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    start = torch.cuda.Event(enable_timing=True)
    middle = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    start.record()
    x = a @ b                              # producer, on the main stream
    side.wait_stream(main_stream)          # the side stream waits for x
    with torch.cuda.stream(side):
        on_side = torch.cuda.current_stream() == side
        y = torch.relu(x) @ b              # consumer, on the side stream
        x.record_stream(side)              # x is used on side: keep its memory until side is done
        side_done = side.record_event()
    back_on_main = torch.cuda.current_stream() == main_stream
    z = torch.tanh(a) * 2                  # independent work on the main stream meanwhile
    middle.record()
    main_stream.wait_event(side_done)      # y is ready
    out = y + z
    end.record()
    end.synchronize()

    # Double buffering: chunks alternate between two streams.
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    chunks = torch.randn(args.chunks, 64, n, device="cuda").unbind(0)
    results = []
    for i, chunk in enumerate(chunks):
        s = streams[i % 2]
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            chunk.record_stream(s)
            results.append(torch.tanh(chunk @ b).sum(dim=0))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    pipeline = torch.stack(results).sum(dim=0)
    torch.cuda.synchronize()

    # The current stream is per thread.
    seen = {}

    def worker():
        own = torch.cuda.Stream()
        seen["thread_starts_on_default"] = torch.cuda.current_stream() == torch.cuda.default_stream()
        with torch.cuda.stream(own):
            seen["thread_uses_own"] = torch.cuda.current_stream() == own
            seen["thread_sum"] = (a * 3).sum().item()

    with torch.cuda.stream(side):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        main_thread_kept_side = torch.cuda.current_stream() == side

    untimed = torch.cuda.Event()
    untimed.record()
    try:
        untimed.elapsed_time(end)
        untimed_raises = False
    except ValueError:  # CUDA's TORCH_CHECK_VALUE
        untimed_raises = True

    result = {
        "out_sum": out.double().sum().item(),
        "out_head": out[0, :4].tolist(),
        "y_sum": y.double().sum().item(),
        "pipeline_sum": pipeline.double().sum().item(),
        "pipeline_head": pipeline[:4].tolist(),
        "thread_sum": seen["thread_sum"],
        "elapsed_ms": start.elapsed_time(end),
        "middle_ms": start.elapsed_time(middle),
        "queries": [side.query(), side_done.query(), end.query(), streams[0].query()],
        "on_side": on_side,
        "back_on_main": back_on_main,
        "thread_starts_on_default": seen["thread_starts_on_default"],
        "thread_uses_own": seen["thread_uses_own"],
        "main_thread_kept_side": main_thread_kept_side,
        "untimed_event_raises": untimed_raises,
        "is_stream": isinstance(side, torch.cuda.Stream),
        "is_event": isinstance(end, torch.cuda.Event),
    }
    print(f"out {result['out_sum']:.4f}, pipeline {result['pipeline_sum']:.4f}, "
          f"{result['elapsed_ms']:.2f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
