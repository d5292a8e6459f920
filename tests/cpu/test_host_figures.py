"""What the CPU backend says about its host: total memory, the clock, the processor counts, the property
fields it answers itself, and that its families are its own.

Expected values come from the kernel (``/proc/meminfo``), from ``os``, or from fake files and a fake
sysfs tree written here, worked out by hand.
"""
from __future__ import annotations

import io
import os

import pytest
from helpers import write_files

import torchdevice
from torchdevice import cpu, host, router
from torchdevice.errors import UnsupportedError

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
