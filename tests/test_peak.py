"""torchdevice.peak: a counter's peak seen between reads, and the CPU backend's max_memory_allocated.

The expected peaks are the sizes the tests allocate (numel * element_size) or the values they feed a
scripted counter; none comes from the code under test.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time

import pytest
import torch

from torchdevice import cpu
from torchdevice.peak import SampledPeak


def _wait_for_samples(peak: SampledPeak, n: int = 3, limit: float = 10.0) -> None:
    """Until the sampling thread has taken ``n`` more samples (bounded, so a stuck thread fails)."""
    start, deadline = peak.samples, time.monotonic() + limit
    while peak.samples < start + n:
        assert time.monotonic() < deadline, "the sampling thread took no sample"
        time.sleep(0.001)


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def read(self) -> int:
        return self.value


def test_a_peak_between_two_reads_is_seen_by_the_sampler():
    counter = Counter()
    peak = SampledPeak(counter.read)
    assert peak.read() == 0
    counter.value = 500
    _wait_for_samples(peak)
    counter.value = 100
    assert peak.read() == 100
    assert peak.peak() == 500


def test_without_a_thread_only_reads_are_seen():
    counter = Counter()
    peak = SampledPeak(counter.read, interval=None)
    peak.read()
    counter.value = 500
    time.sleep(0.02)
    counter.value = 100
    assert peak.peak() == 100
    assert peak.samples == 0


def test_reset_makes_the_current_value_the_peak():
    counter = Counter()
    peak = SampledPeak(counter.read)
    counter.value = 900
    assert peak.peak() == 900
    counter.value = 300
    peak.reset()
    assert peak.peak() == 300
    counter.value = 400
    _wait_for_samples(peak)
    counter.value = 0
    assert peak.peak() == 400


def test_the_thread_ends_when_its_owner_is_gone():
    counter = Counter()
    peak = SampledPeak(counter.read)
    peak.read()
    threads = [t for t in threading.enumerate() if t.name == "torchdevice-peak-sampler"]
    assert threads
    del peak
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in threads[-1:]) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not threads[-1].is_alive()


@pytest.fixture
def cpu_memory():
    memory = cpu.CPUMemory("cpu")
    if cpu.allocation_source() != "c10":
        pytest.skip(f"c10's allocation counter is not in use here ({cpu.allocation_source()})")
    return memory


def test_cpu_max_memory_allocated_sees_a_tensor_freed_between_two_queries(cpu_memory):
    cpu_memory.reset_peak_memory_stats(0)
    before = cpu_memory.memory_allocated(0)
    t = torch.empty(16 * 2**20, dtype=torch.float32)  # 64 MiB, never touched
    size = t.numel() * t.element_size()
    _wait_for_samples(cpu_memory._allocations)
    del t
    assert cpu_memory.memory_allocated(0) < before + size  # gone again
    assert cpu_memory.max_memory_allocated(0) >= before + size
    assert cpu_memory.memory_stats(0)["allocated_bytes.all.peak"] >= before + size
    cpu_memory.reset_peak_memory_stats(0)
    assert cpu_memory.max_memory_allocated(0) < before + size


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_samples_with_its_own_thread_and_lock(cpu_memory):
    cpu_memory.memory_allocated(0)  # the parent's sampler runs
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        ok = 0
        try:
            cpu_memory.reset_peak_memory_stats(0)
            before = cpu_memory.memory_allocated(0)
            t = torch.empty(8 * 2**20, dtype=torch.float32)
            _wait_for_samples(cpu_memory._allocations, limit=5.0)
            del t
            ok = int(cpu_memory.max_memory_allocated(0) >= before + 32 * 2**20)
        finally:
            os.write(w, str(ok).encode())
            sys.stdout.flush()
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    got = os.read(r, 16).decode()
    os.close(r)
    assert status == 0 and got == "1", (status, got)
