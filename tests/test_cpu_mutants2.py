"""The CPU backend where a complete mutation run still found the suite blind (docs/testing.md, issue 15).

Covered: the count of unknown frees c10's reporter keeps beside its total (``log_cnt_``), the
calibration's rule (the one member that follows every move), where torch's c10 library is looked
for on each OS, the resident-set fallback's errors, which allocation sources are sampled between
queries, and the property fields the CPU backend answers itself.

Expected values come from outside torchdevice.cpu: c10's reporter is found here with the test's own
ctypes calls and its members located by allocating storages of known byte sizes (c10's
``ProfiledCPUMemoryReporter`` declares ``size_t allocated_; size_t log_cnt_;`` in that order, and
logs "Memory block of unknown size ..." when a storage it never saw allocated is freed while
``log_cnt_ % 1000 == 0``); the property fields from a fake sysfs tree written here, worked out by
hand; scripted counters and a scripted stand-in for ``torch.empty``.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from helpers import write_files

import torchdevice
from torchdevice import cpu, host
from torchdevice.errors import UnsupportedError

_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"
_REPORTER = "_ZN3c1025profiledCPUMemoryReporterEv"  # c10::profiledCPUMemoryReporter()
_WORD = ctypes.sizeof(ctypes.c_size_t)
_SAMPLER = "torchdevice-peak-sampler"


# -- c10's reporter, reached by the test itself ----------------------------------------------------------


@pytest.fixture
def reporter():
    """(the reporting flag, the reporter's address) from torch's own libc10; the flag put back afterwards."""
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    paths = [os.path.join(libdir, n) for n in ("libc10.so", "libc10.dylib", "c10.dll")]
    try:
        lib = ctypes.CDLL(next(p for p in paths if os.path.exists(p)))
        flag = ctypes.c_bool.in_dll(lib, _FLAG)
        getter = lib[_REPORTER]
    except (StopIteration, OSError, ValueError, AttributeError):
        pytest.skip("this torch's c10 does not export its CPU allocation reporter")
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


# -- the property fields the backend answers itself (CPUBackend.PROPERTY_NOTES) ----------------------------


@pytest.fixture
def cpu0(tmp_path, monkeypatch):
    """A cpu0 of a 2-way SMT core with a 2 MiB L2 and a 3.6 GHz maximum clock, in place of the host's."""
    root = tmp_path / "cpu0"
    files = {"topology/thread_siblings_list": "0,8\n", "cache/index0/level": "1\n", "cache/index0/size": "48K\n",
             "cache/index2/level": "2\n", "cache/index2/size": "2048K\n", "cpufreq/cpuinfo_max_freq": "3600000\n",
             "cpufreq/scaling_cur_freq": "1200000\n"}
    write_files(root, files)
    monkeypatch.setattr(host, "CPU0", str(root))
    return root


def test_the_backend_answers_each_documented_field_itself(cpu0):
    props = cpu.CPUBackend().device_properties(0)
    assert props.max_threads_per_multi_processor == 2  # CPUs 0 and 8
    assert props.L2_cache_size == 2048 * 1024
    assert props.clock_rate == 3_600_000  # kHz, the maximum, not the current 1.2 GHz
    # "1: the device computes in host memory", "1: a CPU thread executes alone": the backend's own answers
    # (the router would fill both for a backend that left them empty; a plugin's hook must not rely on it)
    assert (props.is_integrated, props.warp_size) == (1, 1)


def test_the_public_properties_carry_the_same_fields(cpu0, on_cpu):
    torchdevice.use("cpu")  # a fresh resolution: properties read from the fake cpu0
    props = torchdevice.get_device_properties(0)
    assert (props.max_threads_per_multi_processor, props.L2_cache_size, props.clock_rate) == (2, 2 << 20, 3_600_000)
    assert (props.is_integrated, props.warp_size) == (1, 1)
