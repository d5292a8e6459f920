"""The CPU backend's memory figures: which allocation counter they come from, and what it counts.

The counters, in the order tried: c10's CPU allocation reporter (exact storage bytes), glibc's
``mallinfo2``, macOS's malloc zones, the resident set (``VmRSS``); "none" when none opens, and then
``memory_allocated`` refuses. The memory tests elsewhere skip their exact checks when c10's counter
cannot be reached, so a bug that merely made it unreachable would pass as "not reachable here": here
whether it must be reachable is decided independently (does this torch's libc10 export the reporting
flag and the reporter, read with the test's own ctypes calls), and where it must, the counter has to
open and count exact bytes. c10's reporter declares ``size_t allocated_; size_t log_cnt_;`` in that
order and logs "Memory block of unknown size ..." when a storage it never saw allocated is freed while
``log_cnt_ % 1000 == 0``; its members are located here by allocating storages of known byte sizes.
Otherwise expected values come from the kernel (``/proc/self/status``), scripted counters and a
scripted stand-in for ``torch.empty``.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from torchdevice import cpu, host
from torchdevice.errors import UnsupportedError

_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"
_REPORTER = "_ZN3c1025profiledCPUMemoryReporterEv"  # c10::profiledCPUMemoryReporter()
_WORD = ctypes.sizeof(ctypes.c_size_t)
_SAMPLER = "torchdevice-peak-sampler"


# -- c10's counter: opened where c10 exports it, exact bytes -------------------------------------------------


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


# -- c10's reporter, reached by the test itself ----------------------------------------------------------


@pytest.fixture
def reporter():
    """(the reporting flag, the reporter's address) from torch's own libc10; the flag put back afterwards."""
    flag, lib = _exported_flag(), _libc10()
    if flag is None:
        pytest.skip("this torch's c10 does not export its CPU allocation reporter")
    getter = lib[_REPORTER]
    getter.restype, getter.argtypes = ctypes.c_void_p, []
    was = bool(flag.value)
    yield flag, getter()
    flag.value = was


def _live_total_offset(address: int) -> int:
    """The one word of the reporter (flag on) that moves by exactly a storage's bytes and back."""
    def words() -> list[int]:
        return [ctypes.c_size_t.from_address(address + o).value for o in range(0, 160, _WORD)]

    nbytes = 4096 * 7 + 5
    before = words()
    block = torch.empty(nbytes, dtype=torch.uint8)
    during = words()
    del block
    after = words()
    found = [i * _WORD for i in range(len(before)) if during[i] - before[i] == nbytes == during[i] - after[i]]
    assert len(found) == 1, found
    return found[0]


def test_opening_with_reporting_off_keeps_frees_of_earlier_storages_from_printing_a_warning(reporter, capfd):
    flag, address = reporter
    flag.value = True
    log_cnt = ctypes.c_size_t.from_address(address + _live_total_offset(address) + _WORD)  # log_cnt_
    kept = log_cnt.value
    try:
        # the word after the total is c10's count of unknown frees: a free it never saw allocated adds 1
        flag.value = False
        early = torch.empty(1000, dtype=torch.uint8)  # made while reporting is off: unknown to c10
        flag.value, log_cnt.value = True, 5
        del early
        assert log_cnt.value == 6
        # a process that had reporting off, as every process has before the backend's memory family is made
        flag.value, log_cnt.value = False, 0
        early = torch.empty(1000, dtype=torch.uint8)
        capfd.readouterr()
        assert cpu._C10Counter.open() is not None and flag.value
        assert log_cnt.value == 1  # started at 1, as c10 has after one warning
        del early
        assert "unknown size" not in capfd.readouterr().err  # 1 % 1000: no warning for the early storage
        assert log_cnt.value == 2
        # a count already under way is left as it is
        flag.value, log_cnt.value = False, 7
        assert cpu._C10Counter.open() is not None and log_cnt.value == 7
        # reporting already on: every live storage was seen, there is nothing to hide
        flag.value, log_cnt.value = True, 0
        assert cpu._C10Counter.open() is not None and log_cnt.value == 0
    finally:
        log_cnt.value = max(kept, 1)


# -- calibration: only the member that follows every move is the total -----------------------------------


class _ScriptedReporter:
    """A reporter of another layout, in a buffer: the live total at ``total`` and, in every other word, a
    figure that follows some of the calibration's moves but not all of them (what a member of another c10
    could hold): the bytes ever allocated (up only), or a total switched on after the first storage."""

    def __init__(self, total: int):
        self.words = (ctypes.c_size_t * 20)()
        self.address, self.total = ctypes.addressof(self.words), total // _WORD
        self.made = 0
        self.late: set[int] = set()

    def allocate(self, storage, nbytes: int) -> None:
        self.made += 1
        for i in range(len(self.words)):
            if i == self.total or i % 2 == 0:  # the live total; the bytes ever allocated
                self.words[i] += nbytes
            elif self.made > 1:  # a total that missed the first storage
                self.words[i] += nbytes
        if self.made > 1:
            self.late.add(id(storage))

    def free(self, storage, nbytes: int) -> None:
        for i in range(len(self.words)):
            if i == self.total or (i % 2 == 1 and id(storage) in self.late):
                self.words[i] -= nbytes


def _scripted_torch(reporter: _ScriptedReporter) -> SimpleNamespace:
    class Storage:
        def __init__(self, nbytes: int):
            self.nbytes = nbytes
            reporter.allocate(self, nbytes)

        def __del__(self):
            reporter.free(self, self.nbytes)

    def empty(n: int, dtype) -> Storage:
        assert dtype is torch.uint8  # one byte per element: n is the byte size
        return Storage(n)

    return SimpleNamespace(empty=empty, uint8=torch.uint8)


@pytest.mark.parametrize("total", [96, 104])
def test_calibration_takes_the_one_member_that_followed_every_allocation_and_free(total, monkeypatch):
    scripted = _ScriptedReporter(total)
    monkeypatch.setattr(cpu, "torch", _scripted_torch(scripted))
    assert cpu._C10Counter._calibrate(scripted.address) == total
    assert scripted.made == 2 and scripted.words[scripted.total] == 0  # both calibration storages freed


# -- where torch keeps c10: libc10.so (Linux), libc10.dylib (macOS), c10.dll (Windows) ---------------------


@pytest.fixture
def torch_dir(tmp_path, monkeypatch):
    """A torch installation whose lib folder the test fills."""
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    monkeypatch.setattr(cpu, "torch", SimpleNamespace(__file__=str(tmp_path / "torch" / "__init__.py")))
    return tmp_path / "torch" / "lib"


@pytest.mark.parametrize("names", [["libc10.dylib"], ["c10.dll"], ["libc10.so", "libc10.dylib"]])
def test_c10_is_found_under_each_platforms_name(torch_dir, names):
    for name in names:
        (torch_dir / name).write_bytes(b"")
    assert cpu._C10Counter._library() == str(torch_dir / names[0])


def test_without_c10_the_error_names_the_folder_looked_in(torch_dir):
    (torch_dir / "libtorch.so").write_bytes(b"")
    with pytest.raises(OSError, match="c10") as info:
        cpu._C10Counter._library()
    assert str(torch_dir) in str(info.value)
    assert cpu._C10Counter.open() is None  # then the next source is tried


# -- the resident-set fallback -------------------------------------------------------------------------------


def test_the_resident_set_does_not_open_without_proc_status(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "PROC_STATUS", str(tmp_path / "no-status"))
    assert cpu._ResidentSet.open() is None


@pytest.fixture
def resident_source(monkeypatch, tmp_path):
    """The module as in a process where only the resident set opened, reading a status file written here."""
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  4096 kB\nVmRSS:\t  3000 kB\n")
    monkeypatch.setattr(host, "PROC_STATUS", str(status))
    opened = cpu._ResidentSet.open()
    assert opened is not None
    monkeypatch.setattr(cpu, "_source", opened)
    monkeypatch.setattr(cpu, "_source_name", "VmRSS")
    return status


def test_a_resident_set_that_cannot_be_read_is_refused_naming_the_query_and_backend(resident_source):
    memory = cpu.CPUMemory("cpu")
    assert memory.memory_allocated(0) == 3000 * 1024
    resident_source.unlink()
    with pytest.raises(UnsupportedError) as info:
        memory.memory_allocated(0)
    assert (info.value.function, info.value.backend) == ("memory_allocated", "cpu")
    assert str(resident_source) in info.value.instead


# -- which sources are sampled between queries: every cheap one, not the resident set (a /proc read) -------


class _Counter:
    def __init__(self):
        self.value = 0

    def read(self) -> int:
        return self.value


def _new_samplers(before: list[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _SAMPLER and t not in before]


@pytest.mark.parametrize("source", ["c10", "mallinfo2", "malloc_zone_statistics"])
def test_a_cheap_source_is_sampled_so_a_peak_between_two_queries_is_seen(source, monkeypatch):
    counter = _Counter()
    monkeypatch.setattr(cpu, "_allocation_counter", lambda: counter)
    monkeypatch.setattr(cpu, "_source_name", source)
    before = threading.enumerate()
    memory = cpu.CPUMemory("cpu")
    assert memory.memory_allocated(0) == 0  # the first query starts the sampler
    assert len(_new_samplers(before)) == 1
    counter.value = 1 << 20
    peak = memory._allocations
    start, deadline = peak.samples, time.monotonic() + 10
    while peak.samples < start + 2:  # two samples: at least one taken after the value went up
        assert time.monotonic() < deadline, "the sampling thread took no sample"  # bounded: a stuck thread fails
        time.sleep(0.001)
    counter.value = 4096
    assert memory.memory_allocated(0) == 4096
    assert memory.max_memory_allocated(0) == 1 << 20


def test_the_resident_set_is_not_sampled(resident_source):
    before = threading.enumerate()
    memory = cpu.CPUMemory("cpu")
    assert memory.memory_allocated(0) == 3000 * 1024
    assert memory.max_memory_allocated(0) == 3000 * 1024
    assert _new_samplers(before) == []  # a thread would start on the first query, before it returns


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
