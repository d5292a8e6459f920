"""Cost and accuracy of the cpu backend's memory_allocated sources (docs/memory.md quotes the output).

    python benchmarks/bench_cpu_memory.py

Accuracy: the change each source shows for one 40 MB tensor, untouched (``torch.empty``) and
touched (``torch.ones``), and after its free. Cost: a read of each source, and the allocation and
free of a small tensor with c10's counting flag off and then on (the flag makes c10's CPU
allocator record each allocation in a table under a mutex). Last, what the peak's sampling thread
(:mod:`torchdevice.peak`) costs a thread busy in Python and small torch ops: paired fresh processes
(a started sampler cannot be stopped within one), alternating which runs first, each timing the
same loop's CPU with the sampler on and off; the median of the paired ratios.
"""
from __future__ import annotations

import ctypes
import statistics
import subprocess
import sys
import timeit

import torch

from torchdevice import cpu

N = 10_000_000  # float32 elements: 40 MB


def _delta(read, make) -> tuple[int, int]:
    before = read()
    block = make()
    grown = read() - before
    del block
    return grown, read() - before


def _alloc_free_us(numel: int, loops: int = 200_000) -> float:
    return min(timeit.repeat(lambda: torch.empty(numel), number=loops, repeat=3)) / loops * 1e6


SAMPLER_CODE = """\
import sys, time, torch
from torchdevice import cpu
torch.set_num_threads(1)
memory = cpu.CPUMemory("cpu")
if sys.argv[1] == "off":
    memory._allocations._interval = None  # the sampler never starts
memory.memory_allocated(0)
a = torch.randn(64, 64)
def work():
    t0 = time.process_time()
    for _ in range(20000):
        a @ a
        [i * 2 for i in range(20)]
    return time.process_time() - t0
work()
print(min(work() for _ in range(5)))
"""


def _sampler_cost(rounds: int = 6) -> float:
    """Median of paired CPU-time ratios, sampler on / off, of the same busy loop in fresh processes."""
    ratios = []
    for i in range(rounds):
        order = ("on", "off") if i % 2 else ("off", "on")
        cpu_s = {mode: float(subprocess.run([sys.executable, "-c", SAMPLER_CODE, mode], check=True,
                                            capture_output=True, text=True).stdout) for mode in order}
        ratios.append(cpu_s["on"] / cpu_s["off"])
    return statistics.median(ratios)


def main() -> None:
    torch.set_num_threads(1)
    flag = None
    try:
        lib = ctypes.CDLL(cpu._C10Counter._library())
        flag = ctypes.c_bool.in_dll(lib, "FLAGS_caffe2_report_cpu_memory_usage")
    except (OSError, ValueError):
        pass
    small_off = _alloc_free_us(256) if flag is not None and not flag.value else float("nan")
    big_off = _alloc_free_us(1 << 20, 20_000) if flag is not None and not flag.value else float("nan")
    sources = {
        "c10": cpu._C10Counter.open(),  # switches the flag on
        "mallinfo2": cpu._MallInfo2.open(),
        "malloc_zone_statistics": cpu._MallocZones.open(),
        "VmRSS": cpu._ResidentSet.open(),
    }
    small_on = _alloc_free_us(256)
    big_on = _alloc_free_us(1 << 20, 20_000)
    print(f"torch {torch.__version__}; tensor of {N * 4} bytes")
    print(f"{'source':24} {'untouched':>12} {'touched':>12} {'after free':>11} {'read (us)':>10}")
    for name, source in sources.items():
        if source is None:
            print(f"{name:24} (not available here)")
            continue
        untouched, freed = _delta(source.read, lambda: torch.empty(N))
        touched, _ = _delta(source.read, lambda: torch.ones(N))
        read_us = min(timeit.repeat(source.read, number=20_000, repeat=3)) / 20_000 * 1e6
        print(f"{name:24} {untouched:>12} {touched:>12} {freed:>11} {read_us:>10.2f}")
    print(f"alloc+free of a 1 KiB tensor:  {small_off:.3f} us without c10's counting, {small_on:.3f} us with it")
    print(f"alloc+free of a 4 MiB tensor:  {big_off:.3f} us without c10's counting, {big_on:.3f} us with it")
    if cpu.allocation_source() != "VmRSS":
        print(f"peak sampler every {cpu.PEAK_INTERVAL * 1000:g} ms: CPU of a busy loop x{_sampler_cost():.3f} "
              "(median of 6 paired processes, on / off)")


if __name__ == "__main__":
    main()
