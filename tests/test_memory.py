"""Memory figures under translation: tensor bytes on cpu, CUDA's stat keys on every host backend,
and the device queries a host answers."""
from __future__ import annotations

import os
import re

import pytest
import torch
from helpers import host_backends

import torchdevice
from torchdevice import cpu, memstats, translate
from torchdevice import host as host_os

CUDA_MEMORY_SUMMARY = torch.cuda.memory.memory_summary  # torch's own, taken before any patch


@pytest.fixture
def on_cpu():
    torchdevice.use("cpu")
    translate.patch()
    try:
        yield
    finally:
        translate.unpatch()
        torchdevice.use(None)


@pytest.fixture
def translated(on_target, target):
    """CUDA code translated onto the suite's target: the figures checked below are CUDA's contract, which
    the cpu backend keeps from the host's allocation counter and a device type of its own from its allocator."""
    if target.name == "cpu":
        _needs_c10()
    translate.patch()
    try:
        yield
    finally:
        translate.unpatch()


@pytest.fixture(params=host_backends())
def host(request):
    torchdevice.use(request.param)
    translate.patch()
    try:
        yield request.param
    finally:
        translate.unpatch()
        torchdevice.use(None)


def _needs_c10():
    if cpu.allocation_source() != "c10":
        pytest.skip(f"c10's CPU allocation counter is not reachable here ({cpu.allocation_source()})")


@pytest.mark.parametrize("make", [
    pytest.param(lambda n: torch.empty(n, device="cuda"), id="untouched"),
    pytest.param(lambda n: torch.ones(n, device="cuda"), id="touched"),
])
def test_memory_allocated_moves_by_the_tensor_bytes(make, translated):
    before = torch.cuda.memory_allocated()
    block = make(10_000_000)
    assert torch.cuda.memory_allocated() - before == block.nbytes == 40_000_000
    del block
    assert torch.cuda.memory_allocated() == before


def test_results_of_operations_are_counted(translated):
    a = torch.ones(1 << 20, device="cuda")
    before = torch.cuda.memory_allocated()
    b = a * 2
    assert torch.cuda.memory_allocated() - before == b.nbytes
    view = b[: 1 << 10]  # a view shares the storage: nothing new is allocated
    assert torch.cuda.memory_allocated() - before == b.nbytes
    del b, view
    assert torch.cuda.memory_allocated() == before


def test_peak_and_reset(translated):
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    assert torch.cuda.max_memory_allocated() == base
    block = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() == base + (8 << 20)  # read while it is live
    del block
    assert torch.cuda.memory_allocated() == base
    assert torch.cuda.max_memory_allocated() == base + (8 << 20)  # the peak stays after the free
    assert torch.cuda.memory_stats()["allocated_bytes.all.peak"] == base + (8 << 20)
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() == base


def test_the_counter_opens_once_and_says_which_it_is():
    assert cpu.allocation_source() in ("c10", "mallinfo2", "malloc_zone_statistics", "VmRSS", "none")
    assert cpu._allocation_counter() is cpu._allocation_counter()


def test_mallinfo2_fallback_counts_untouched_allocations():
    counter = cpu._MallInfo2.open()
    if counter is None:
        pytest.skip("no glibc mallinfo2 here")
    before = counter.read()
    block = torch.empty(10_000_000)
    grown = counter.read() - before
    assert block.nbytes <= grown < block.nbytes + (64 << 10)  # malloc's chunk header and page rounding
    del block
    assert abs(counter.read() - before) < 64 << 10


def test_without_any_counter_memory_allocated_refuses(monkeypatch):
    monkeypatch.setattr(cpu, "_allocation_counter", lambda: None)  # no source opens on this host
    memory = cpu.CPUMemory("cpu")
    for query in (memory.memory_allocated, memory.max_memory_allocated, memory.memory_stats):
        with pytest.raises(torchdevice.UnsupportedError):
            query(0)
    memory.reset_peak_memory_stats(0)  # an action with nothing to reset: the reserved peak still resets


def test_memory_stats_has_cudas_keys(host):
    stats = torch.cuda.memory_stats()
    own = {k for k in stats if not k.startswith(f"{host}.")}
    assert own == memstats.CUDA_KEYS
    assert all(isinstance(v, int) and v >= 0 for k, v in stats.items() if k in memstats.CUDA_KEYS)
    assert stats["allocated_bytes.all.current"] <= stats["allocated_bytes.all.peak"]
    assert stats["num_ooms"] == 0 and stats["num_alloc_retries"] == 0
    nested = torch.cuda.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == stats["allocated_bytes.all.current"] or host == "cpu"


def test_torchs_own_memory_summary_reads_the_stats(host):
    """torch's memory_summary (CUDA's table) finds every key it reads in the translated memory_stats,
    and torch.cuda.memory_summary() under translation prints the same rows with the same figures."""
    def rows(text):
        return [line for line in text.splitlines() if re.match(r"\| [A-Za-z -]{21} \| ", line)]

    theirs, ours = rows(CUDA_MEMORY_SUMMARY(0)), rows(torch.cuda.memory_summary())
    assert len(theirs) >= 9 * 3 + 2  # nine pooled metrics by pool, two over-size rows
    assert [r[:24] for r in ours] == [r[:24] for r in theirs]
    assert [r[:24] for r in rows(torch.cuda.memory_summary(abbreviated=True))] == [
        r[:24] for r in rows(CUDA_MEMORY_SUMMARY(0, abbreviated=True))]


def _docstring_keys(fn) -> set[str]:
    keys = set()
    for stat, groups in re.findall(r'``"([a-z_]+)\.((?:\{[a-z_,]+\}\.?)+)"``', fn.__doc__):
        parts = [g.split(",") for g in re.findall(r"\{([a-z_,]+)\}", groups)]
        combos = [[]]
        for options in parts:
            combos = [c + [o] for c in combos for o in options]
        keys |= {".".join([stat, *c]) for c in combos}
    return keys


def test_host_memory_stats_has_cudas_keys_and_is_zero(host):
    documented = _docstring_keys(CUDA_HOST_MEMORY_STATS) | {"num_host_alloc", "num_host_free"}
    assert documented == memstats.HOST_KEYS
    stats = torch.cuda.host_memory_stats()
    assert set(stats) == memstats.HOST_KEYS and not any(stats.values())
    torch.cuda.reset_peak_host_memory_stats()
    torch.cuda.reset_accumulated_host_memory_stats()
    assert torch.cuda.host_memory_stats_as_nested_dict()["allocated_bytes"]["current"] == 0


CUDA_HOST_MEMORY_STATS = torch.cuda.memory.host_memory_stats


def test_memory_stats_keys_match_torchs_docstring():
    documented = _docstring_keys(torch.cuda.memory.memory_stats)
    # the docstring calls the allocation counts "allocated"; torch (and memory_summary) key them "allocation"
    documented = {("allocation" + k[len("allocated"):]) if k.startswith("allocated.") else k for k in documented}
    pooled_and_oversize = {k for k in memstats.CUDA_KEYS if k.count(".") >= 1}
    assert documented == pooled_and_oversize


def test_host_queries_answer_on_cpu(on_cpu):
    assert torch.cuda.get_allocator_backend() == "native"
    assert torch.cuda.is_tf32_supported() is False
    assert torch.cuda.get_per_process_memory_fraction() == 1.0
    text = torch.cuda.list_gpu_processes()
    lines = text.splitlines()
    assert lines[0] == "GPU:0"
    assert re.fullmatch(rf"process {os.getpid():>10d} uses +\d+\.\d{{3}} MB GPU memory", lines[1])
    torch.cuda.utilization()  # starts a measuring interval
    x = torch.ones(1 << 18)
    for _ in range(400):
        x = x * 1.0001  # this process uses the CPU
    assert 0 < torch.cuda.utilization() <= 100
    if host_os.cpu_mhz() is not None:
        assert torch.cuda.clock_rate() == pytest.approx(host_os.cpu_mhz(), rel=0.5)


def test_memory_bus_busy_time_stays_refused(host):
    with pytest.raises(torchdevice.UnsupportedError):
        torch.cuda.memory_usage()  # no host exposes it (tests/host/test_sensors.py has the sensors the cpu reads)


@pytest.mark.parametrize("name", ["temperature", "power_draw"])
def test_host_sensors_are_read_on_cpu_and_refused_on_mlx(name, host):
    if host == "mlx":  # MLX's device may be a GPU, which no host sensor describes
        with pytest.raises(torchdevice.UnsupportedError):
            getattr(torch.cuda, name)()
        return
    try:
        value = getattr(torch.cuda, name)()
    except torchdevice.SensorUnavailableError as exc:  # this host has no such reading (a VM, a container)
        assert exc.function == f"torch.cuda.{name}" and exc.tried and exc.instead
    else:
        assert type(value) is int and value > 0


def test_mlx_reserved_peak(host):
    if host != "mlx":
        pytest.skip("mlx only")
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved()
    assert torch.cuda.max_memory_reserved() >= torch.cuda.max_memory_allocated()
    assert torch.cuda.get_sync_debug_mode() == 0


def test_allocator_snapshots_are_answered_empty(host):
    """A program asking for the allocator's segments gets CUDA's shape with none (a query is
    answered, never refused): what CUDA returns before its first allocation."""
    assert torch.cuda.memory_snapshot() == []
    assert torch.cuda.memory_snapshot(include_traces=False) == []
    snap = torch.mtia.snapshot()
    assert snap["segments"] == [] and len(snap["device_traces"]) == torch.cuda.device_count()
    with pytest.raises(torchdevice.UnsupportedError):
        torch.mtia.record_memory_history()  # the action stays refused: there is no recorder


# -- without /proc (macOS): the kernel's task figures, not a refusal --------------------------------------------


def _no_proc(monkeypatch):
    real_open, real_exists = open, os.path.exists

    def open_(path, *args, **kwargs):
        if str(path).startswith("/proc"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(cpu, "open", open_, raising=False)  # /proc/self/clear_refs
    monkeypatch.setattr(host_os, "open", open_, raising=False)  # /proc/self/status, /proc/meminfo
    monkeypatch.setattr(cpu.os.path, "exists", lambda p: not str(p).startswith("/proc") and real_exists(p))


def test_without_proc_the_reserved_figures_are_the_tasks_resident_set(monkeypatch):
    memory = cpu.CPUMemory("cpu")
    _no_proc(monkeypatch)
    task = {"rss": 100 << 20, "max": 150 << 20}
    monkeypatch.setattr(host_os, "mach_resident", lambda: (task["rss"], task["max"]))
    assert memory.memory_reserved(0) == 100 << 20
    assert memory.max_memory_reserved(0) == 150 << 20
    memory.reset_peak_memory_stats(0)  # the kernel's peak cannot be reset: the reads since are the peak
    assert memory.max_memory_reserved(0) == 100 << 20
    task["rss"] = 120 << 20
    assert memory.max_memory_reserved(0) == 120 << 20
    task["rss"] = 90 << 20
    assert (memory.memory_reserved(0), memory.max_memory_reserved(0)) == (90 << 20, 120 << 20)
    stats = memory.memory_stats(0)
    assert (stats["reserved_bytes.all.current"], stats["reserved_bytes.all.peak"]) == (90 << 20, 120 << 20)
    assert "90.000 MB" in memory.list_gpu_processes(0)
    monkeypatch.setattr(host_os, "mach_mem_info", lambda: (3 << 30, 16 << 30))
    assert memory.mem_get_info(0) == (3 << 30, 16 << 30)
    # where the kernel says nothing either, the figures are refused, naming what they need
    monkeypatch.setattr(host_os, "mach_resident", lambda: None)
    monkeypatch.setattr(host_os, "mach_mem_info", lambda: None)
    for ask in (memory.memory_reserved, memory.max_memory_reserved, memory.mem_get_info):
        with pytest.raises(torchdevice.UnsupportedError, match="/proc"):
            ask(0)


def test_the_mach_sources_answer_only_on_macos():
    import sys

    if sys.platform == "darwin":
        rss, peak = host_os.mach_resident()
        assert 0 < rss <= peak
        available, total = host_os.mach_mem_info()
        assert 0 < available < total == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    else:
        assert host_os.mach_resident() is None and host_os.mach_mem_info() is None
