"""The CPU backend where mutation testing found the suite blind (docs/testing.md, issue 15).

The memory tests skip their exact checks when c10's CPU allocation counter cannot be reached, so a
bug that merely made it unreachable passed as "not reachable here". Here whether it must be
reachable is decided independently (does this torch's libc10 export the reporting flag and the
reporter, read with ctypes), and where it must, the counter has to open and count exact bytes.
Expected values otherwise come from the kernel (``/proc/meminfo``) and from torch.
"""
from __future__ import annotations

import ctypes
import io
import os
import re

import pytest
import torch

import torchdevice
from torchdevice import cpu, host, router
from torchdevice.errors import UnsupportedError

_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"
_REPORTER = "_ZN3c1025profiledCPUMemoryReporterEv"  # c10::profiledCPUMemoryReporter()


def _libc10():
    """torch's own libc10, or None where this torch has none we can load."""
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libc10.so", "libc10.dylib", "c10.dll"):
        path = os.path.join(libdir, name)
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path)
            except OSError:
                return None
    return None


def _exported_flag():
    lib = _libc10()
    if lib is None:
        return None
    try:
        lib[_REPORTER]
        return ctypes.c_bool.in_dll(lib, _FLAG)
    except (ValueError, AttributeError):
        return None


@pytest.fixture
def c10_flag():
    flag = _exported_flag()
    if flag is None:
        pytest.skip("this torch's c10 does not export its CPU allocation reporter")
    was = bool(flag.value)
    yield flag
    flag.value = was


def test_where_c10_exports_its_counter_it_opens_and_counts_exact_storage_bytes(c10_flag):
    counter = cpu._C10Counter.open()
    assert counter is not None
    assert cpu.allocation_source() == "c10"  # the first choice, where it opens
    before = counter.read()
    block = torch.empty(4096 * 5 + 3, dtype=torch.uint8)  # an odd size: no rounding hides an error
    assert counter.read() - before == 4096 * 5 + 3
    wide = torch.empty(1000, dtype=torch.float64)
    assert counter.read() - before == 4096 * 5 + 3 + 8000
    del block
    assert counter.read() - before == 8000
    del wide
    assert counter.read() == before
    assert c10_flag.value  # reporting stays on: the counter only counts while it is
    # opened again while storages are live (the total is not 0), it finds the same counter
    live = torch.empty(1 << 16, dtype=torch.uint8)
    again = cpu._C10Counter.open()
    assert again is not None and (again.address, again.offset) == (counter.address, counter.offset)
    del live


def test_a_counter_that_cannot_be_calibrated_is_refused_and_leaves_the_flag_as_it_was(c10_flag, monkeypatch):
    c10_flag.value = True
    monkeypatch.setattr(cpu._C10Counter, "_CANDIDATES", (0, 8))  # offsets that hold no byte total
    assert cpu._C10Counter.open() is None
    assert c10_flag.value is True


# -- total memory: the kernel's figure, by whichever route the host offers --------------------------------


def _meminfo_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


@pytest.fixture
def meminfo_total():
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo here")
    return _meminfo_total()


def test_total_memory_without_proc_is_the_page_count_times_the_page_size(monkeypatch, meminfo_total, tmp_path):
    monkeypatch.setattr(host, "MEMINFO", str(tmp_path / "no-meminfo"))  # as on macOS: sysconf only
    assert host.total_memory() == meminfo_total
    assert cpu.CPUBackend().device_properties(0).total_memory == meminfo_total


def test_total_memory_with_no_source_is_refused_naming_the_query(monkeypatch, tmp_path):
    def no_sysconf(name):
        raise ValueError(f"unknown sysconf name {name}")

    monkeypatch.setattr(host.os, "sysconf", no_sysconf)
    monkeypatch.setattr(host, "MEMINFO", str(tmp_path / "no-meminfo"))
    with pytest.raises(UnsupportedError) as info:
        host.total_memory()
    assert (info.value.function, info.value.backend) == ("get_device_properties", "cpu")
    assert "no-meminfo" in str(info.value)


# -- which allocation counter: opened once, the first that opens, "none" when none does ----------------


@pytest.fixture
def unopened(monkeypatch):
    """The module as in a process that has not looked for a counter yet (put back afterwards)."""
    monkeypatch.setattr(cpu, "_source", None)
    monkeypatch.setattr(cpu, "_source_name", "")


def test_the_first_counter_that_opens_is_the_one_every_caller_gets(unopened):
    first = cpu._allocation_counter()
    assert first is not None and first is cpu._allocation_counter()
    assert cpu.allocation_source() in ("c10", "mallinfo2", "malloc_zone_statistics", "VmRSS")
    assert cpu.SOURCES[type(first)] == cpu.allocation_source()


def test_with_no_counter_the_source_is_none_looked_for_once_and_memory_allocated_refuses(unopened, monkeypatch):
    tried = []
    for kind in (cpu._C10Counter, cpu._MallInfo2, cpu._MallocZones, cpu._ResidentSet):
        monkeypatch.setattr(kind, "open", classmethod(lambda cls: tried.append(cls) or None))
    assert cpu.allocation_source() == "none"  # as documented: memory_allocated then raises
    assert cpu.allocation_source() == "none" and cpu._allocation_counter() is None
    assert tried == [cpu._C10Counter, cpu._MallInfo2, cpu._MallocZones, cpu._ResidentSet]  # once, in order
    with pytest.raises(UnsupportedError) as info:
        cpu.CPUMemory("cpu").memory_allocated(0)
    assert (info.value.function, info.value.backend) == ("memory_allocated", "cpu")
    for source in ("c10", "mallinfo2", "/proc"):  # what to do instead: says which sources were missing
        assert source in info.value.instead


def test_the_resident_set_fallback_reads_vmrss():
    if not os.path.exists("/proc/self/status"):
        assert cpu._ResidentSet.open() is None
        return
    counter = cpu._ResidentSet.open()
    with open("/proc/self/status") as f:
        vmrss = int(re.search(r"^VmRSS:\s+(\d+) kB$", f.read(), re.M).group(1)) * 1024
    assert abs(counter.read() - vmrss) < 16 << 20  # the process moves a little between the two reads


def test_a_process_that_has_allocated_nothing_has_a_peak_of_zero(monkeypatch):
    class Nothing:
        def read(self):
            return 0

    monkeypatch.setattr(cpu, "_allocation_counter", Nothing)  # the counter this CPUMemory opens reads 0
    memory = cpu.CPUMemory("cpu")
    assert memory.memory_allocated(0) == 0 and memory.max_memory_allocated(0) == 0
    assert memory.memory_stats(0)["allocated_bytes.all.peak"] == 0


# -- without /proc/self/status (macOS): reserved figures refused, the rest still answers ----------------


def test_without_proc_status_reserved_figures_are_refused_and_the_rest_answers(monkeypatch, tmp_path):
    monkeypatch.setattr(host, "PROC_STATUS", str(tmp_path / "no-status"))
    memory = cpu.CPUMemory("cpu")
    for op in ("memory_reserved", "max_memory_reserved"):
        with pytest.raises(UnsupportedError) as info:
            getattr(memory, op)(0)
        assert (info.value.function, info.value.backend) == (op, "cpu") and "no-status" in info.value.instead
    stats = memory.memory_stats(0)
    assert stats["reserved_bytes.all.current"] == 0 and not any(k.startswith("cpu.Vm") for k in stats)
    assert stats["allocated_bytes.all.current"] >= 0 and stats["cpu.source"] == cpu.allocation_source()
    assert re.fullmatch(rf"process {os.getpid():>10d} uses +\d+\.\d{{3}} MB GPU memory",
                        memory.list_gpu_processes(0).splitlines()[1])


# -- the clock: Linux cpufreq reports kHz, /proc/cpuinfo MHz; the answer is whole MHz --------------------


def _fake_files(monkeypatch, files: dict[str, str]):
    def fake_open(path, *args, **kwargs):
        if path in files:
            return io.StringIO(files[path])
        raise FileNotFoundError(path)

    monkeypatch.setattr(host, "open", fake_open, raising=False)


SYSFS = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"


def test_the_clock_is_cpufreqs_khz_in_whole_mhz(monkeypatch):
    _fake_files(monkeypatch, {SYSFS: "2400000\n", "/proc/cpuinfo": "cpu MHz\t\t: 1000.000\n"})
    mhz = host.cpu_mhz()
    assert mhz == 2400 and type(mhz) is int  # 2,400,000 kHz; cpufreq wins over cpuinfo
    _fake_files(monkeypatch, {SYSFS: "3199999\n"})
    assert host.cpu_mhz() == 3199  # whole MHz, rounded down as CUDA's clock_rate is an int


def test_without_cpufreq_the_clock_is_cpuinfos(monkeypatch):
    _fake_files(monkeypatch, {"/proc/cpuinfo": "processor\t: 0\nmodel name\t: Chip\ncpu MHz\t\t: 2399.998\n"})
    assert host.cpu_mhz() == 2399
    _fake_files(monkeypatch, {SYSFS: "not a number\n", "/proc/cpuinfo": "CPU MHz : 1800\n"})
    assert host.cpu_mhz() == 1800
    _fake_files(monkeypatch, {})
    assert host.cpu_mhz() is None


# -- what the backend says about itself ---------------------------------------------------------------


def test_the_cpu_backend_says_how_many_logical_cpus_it_found():
    availability = cpu.CPUBackend().availability()
    assert availability.available is True and availability.automatic is True
    assert f"{os.cpu_count()} logical CPU" in availability.reason


def test_a_host_that_cannot_count_its_cpus_has_one(monkeypatch):
    """No affinity mask (macOS) and no count from the OS: one processor, never 0 or None."""
    monkeypatch.delattr(cpu.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: None)
    assert cpu.CPUBackend().device_properties(0).multi_processor_count == 1


def test_the_processor_count_is_the_affinity_mask_where_there_is_one(monkeypatch):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity masks on this OS")
    monkeypatch.setattr(cpu.os, "sched_getaffinity", lambda pid: {0, 3, 5})
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 64)
    assert cpu.CPUBackend().device_properties(0).multi_processor_count == 3


def test_every_family_of_the_cpu_backend_belongs_to_it(on_cpu):
    active = router.active()
    families = (active.memory, active.streams, active.rng, active.collectives)
    assert [family.backend for family in families] == ["cpu"] * 4  # what their errors name
    with pytest.raises(TypeError, match="set_stream expects a cpu stream"):
        torchdevice.set_stream("not a stream")
