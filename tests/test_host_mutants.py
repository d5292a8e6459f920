"""The host's readers where mutation testing found the suite blind (docs/testing.md, issue 15).

Covered: the macOS readers (``sysctl_int``, ``mach_resident``, ``mach_mem_info``, ``MallocZones``,
``_libc_darwin``), the sysfs CPU topology, cache and clock readers, and what the sensor readers
(hwmon, thermal zones, RAPL powercap) say when they find nothing.

The macOS readers never run on Linux, so they are run here against a labelled stand-in: a fake C
library (:class:`_StandInLibc`) whose ``sysctlbyname``, ``task_info``, ``mach_host_self``,
``host_statistics64`` and ``malloc_zone_statistics`` behave as Apple's headers and man pages say --
they check the flavor, count and buffer they are handed, write the header's struct layout byte by
byte into the ctypes buffers (a ``ctypes.byref(x)`` argument exposes ``x`` as ``._obj``), and
return 0 or a kernel error code. The layout and the constants are taken from the headers, not from
torchdevice: <mach/task_info.h> (``struct mach_task_basic_info``, ``#pragma pack(4)``, flavor 20,
12 words), <mach/host_info.h> and <mach/vm_statistics.h> (``HOST_VM_INFO64`` = 4, 38 words,
``free_count`` and ``inactive_count`` at words 0 and 2), <malloc/malloc.h>
(``malloc_statistics_t``). The Linux readers run against fake trees in ``tmp_path`` (``host.CPU0``,
``CPUINFO``, ``HWMON``, ``THERMAL``, ``POWERCAP`` pointed there) and a fake clock; every expected
value is worked out here by hand from what was written.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import RAPL_RANGE, write_files

from torchdevice import host

KERN_SUCCESS, KERN_INVALID_ARGUMENT, KERN_FAILURE = 0, 4, 5  # <mach/kern_return.h>
TASK_PORT, HOST_PORT = 0x203, 0x103  # what mach_task_self_ and mach_host_self() name on a real Mac


# -- the stand-in for macOS's C library ----------------------------------------------------------------


class _Foreign:
    """A foreign function as ctypes gives it: ``restype`` and ``argtypes`` can be set on it, and ``restype``
    refuses what ctypes refuses."""

    def __init__(self, fn):
        self.fn, self.restype, self.argtypes = fn, ctypes.c_int, None  # ctypes' defaults

    @property
    def restype(self):
        return self._restype

    @restype.setter
    def restype(self, value):
        if value is not None and not isinstance(value, type) and not callable(value):
            raise TypeError("restype must be a type, a callable, or None")  # ctypes' own check and words
        self._restype = value

    def __call__(self, *args):
        return self.fn(*args)


class _MachHostSelf(_Foreign):
    """``mach_host_self()``: a port name, returned as ctypes returns it for the ``restype`` the caller set
    (``None`` means void: the caller gets None)."""

    def __init__(self):
        super().__init__(lambda: HOST_PORT)

    def __call__(self):
        return None if self.restype is None else self.fn()


class _StandInLibc:
    """A fake libSystem: the calls torchdevice.host makes, as the headers and man pages describe them."""

    def __init__(self, sysctls=None, task=None, vm=None, zones=None):
        self.sysctls = sysctls or {}  # name (bytes) -> (value, width in bytes)
        self.task = task  # (virtual_size, resident_size, resident_size_max)
        self.vm = vm  # the natural_t words of vm_statistics64
        self.zones = zones  # malloc_statistics_t (blocks_in_use, size_in_use, max_size_in_use, size_allocated)
        self.symbols = {"mach_task_self_": TASK_PORT}  # the exported variables (ctypes' in_dll finds them)
        self.calls: list[tuple] = []
        self.mach_host_self = _MachHostSelf()
        for name in ("sysctlbyname", "task_info", "host_statistics64", "malloc_zone_statistics"):
            setattr(self, name, _Foreign(getattr(self, name)))

    def sysctlbyname(self, name, oldp, oldlenp, newp, newlen):
        """sysctlbyname(3): -1 (ENOENT) for an unknown name, -1 (ENOMEM) when ``*oldlenp`` is too small;
        "newp is set to NULL and newlen to 0" when nothing is set."""
        self.calls.append(("sysctlbyname", name))
        newlen = getattr(newlen, "value", newlen) or 0  # ctypes passes None as 0
        if not isinstance(name, bytes) or name not in self.sysctls or newp is not None or newlen != 0:
            return -1
        value, width = self.sysctls[name]
        buffer, size = oldp._obj, oldlenp._obj
        if size.value < width or ctypes.sizeof(buffer) < width:
            return -1
        ctypes.memmove(ctypes.addressof(buffer), value.to_bytes(width, sys.byteorder), width)
        size.value = width
        return 0

    def task_info(self, task, flavor, info, count):
        """task_info(task, MACH_TASK_BASIC_INFO = 20, &info, &count): count is in 4-byte words, at least
        MACH_TASK_BASIC_INFO_COUNT = 12; the kernel writes the struct and the words it wrote."""
        self.calls.append(("task_info", getattr(task, "value", task), flavor, count._obj.value))
        if getattr(task, "value", None) != TASK_PORT or flavor != 20 or count._obj.value < 12:
            return KERN_INVALID_ARGUMENT
        if self.task is None:
            return KERN_FAILURE
        buffer = info._obj
        assert ctypes.sizeof(buffer) >= 48
        # virtual_size, resident_size, resident_size_max (uint64 at 0, 8, 16); user_time, system_time
        # (time_value_t: two int32 each, at 24 and 32); policy (40), suspend_count (44): 48 bytes, pack(4)
        raw = struct.pack("=3Q6i", *self.task, 7, 1, 3, 2, 1, 0)
        ctypes.memmove(ctypes.addressof(buffer), raw, len(raw))
        count._obj.value = 12
        return KERN_SUCCESS

    def host_statistics64(self, host_port, flavor, stats, count):
        """host_statistics64(host, HOST_VM_INFO64 = 4, stats, &count): count at least
        HOST_VM_INFO64_COUNT = 38 words."""
        self.calls.append(("host_statistics64", host_port, flavor, count._obj.value))
        if host_port != HOST_PORT or flavor != 4:
            return KERN_INVALID_ARGUMENT
        if count._obj.value < 38 or self.vm is None:
            return KERN_FAILURE
        assert ctypes.sizeof(stats) >= 38 * 4
        for i, word in enumerate(self.vm):
            stats[i] = word
        count._obj.value = 38
        return KERN_SUCCESS

    def malloc_zone_statistics(self, zone, stats):
        """malloc_zone_statistics(NULL, &stats): every zone's statistics summed."""
        self.calls.append(("malloc_zone_statistics", zone))
        buffer = stats._obj
        # unsigned blocks_in_use (0, then padding), size_t size_in_use (8), max_size_in_use (16),
        # size_allocated (24): 32 bytes on a 64-bit Mac
        raw = struct.pack("=I4x3Q", *self.zones)
        ctypes.memmove(ctypes.addressof(buffer), raw, len(raw))


@pytest.fixture
def mac(monkeypatch):
    """host's macOS readers get a fresh :class:`_StandInLibc` (set its fields in the test), and
    ``mach_task_self_`` is found in it as the symbol would be in libSystem."""
    libc = _StandInLibc()
    monkeypatch.setattr(host, "_libc_darwin", lambda: libc)
    assert "in_dll" not in vars(ctypes.c_uint32)

    def in_dll(lib, name):
        if not isinstance(lib, _StandInLibc):
            raise AttributeError(f"{lib!r} has no _handle")  # what ctypes raises for None
        if name not in lib.symbols:
            raise ValueError(f"dlsym: undefined symbol: {name}")
        return ctypes.c_uint32(lib.symbols[name])

    ctypes.c_uint32.in_dll = in_dll  # the class attribute shadows ctypes' own in_dll; removed below
    try:
        yield libc
    finally:
        del ctypes.c_uint32.in_dll


def test_the_task_info_struct_is_laid_out_as_the_header_says():
    info = host._MachTaskBasicInfo
    assert ctypes.sizeof(info) == 48  # 3 * 8 + 2 * 8 + 2 * 4 under pack(4): 48 / 4 = 12 words
    assert [getattr(info, name).offset for name in ("virtual_size", "resident_size", "resident_size_max",
                                                    "user_time", "system_time", "policy", "suspend_count")] \
        == [0, 8, 16, 24, 32, 40, 44]


def test_sysctl_int_reads_4_and_8_byte_integers_by_name(mac):
    mac.sysctls = {b"hw.memsize": (68_719_476_736, 8), b"hw.physicalcpu": (10, 4),
                   b"hw.cpufrequency_max": (3_504_000_000, 8), b"kern.short": (300, 2)}
    memsize = host.sysctl_int("hw.memsize")
    assert memsize == 64 << 30 and type(memsize) is int
    assert host.sysctl_int("hw.physicalcpu") == 10
    assert host.sysctl_int("hw.cpufrequency_max") == 3_504_000_000
    assert mac.calls == [("sysctlbyname", b"hw.memsize"), ("sysctlbyname", b"hw.physicalcpu"),
                         ("sysctlbyname", b"hw.cpufrequency_max")]
    assert host.sysctl_int("kern.short") is None  # neither 4 nor 8 bytes: no integer this reader knows
    assert host.sysctl_int("hw.nosuchname") is None  # sysctlbyname failed


def test_sysctl_int_is_none_without_the_call_or_off_macos(mac, monkeypatch):
    mac.sysctls = {b"hw.memsize": (1 << 34, 8)}
    monkeypatch.setattr(host, "_libc_darwin", lambda: SimpleNamespace())  # no sysctlbyname
    assert host.sysctl_int("hw.memsize") is None
    monkeypatch.setattr(host, "_libc_darwin", lambda: None)
    assert host.sysctl_int("hw.memsize") is None


def test_mach_resident_is_the_task_basic_infos_resident_sizes(mac):
    mac.task = (400 << 30, 123_456_789_000, 234_567_890_000)
    rss = host.mach_resident()
    assert rss == (123_456_789_000, 234_567_890_000) and all(type(n) is int for n in rss)
    assert mac.calls == [("task_info", TASK_PORT, 20, 12)]  # MACH_TASK_BASIC_INFO, 48 bytes in words


def test_mach_resident_is_none_when_task_info_fails_or_is_missing(mac, monkeypatch):
    assert host.mach_resident() is None  # the stand-in answers KERN_FAILURE without a task
    mac.task = (1, 2, 3)
    mac.symbols = {}
    assert host.mach_resident() is None  # no mach_task_self_ in the library
    monkeypatch.setattr(host, "_libc_darwin", lambda: SimpleNamespace())
    assert host.mach_resident() is None
    monkeypatch.setattr(host, "_libc_darwin", lambda: None)
    assert host.mach_resident() is None


def test_mach_mem_info_is_free_plus_inactive_pages_and_the_physical_memory(mac, monkeypatch):
    page = 16384  # an Apple-silicon page
    monkeypatch.setattr(host.os, "sysconf", lambda name: {"SC_PAGE_SIZE": page}[name])
    mac.sysctls = {b"hw.memsize": (32 << 30, 8)}
    # free_count, active_count, inactive_count, wire_count, ... (natural_t words)
    mac.vm = [10_000, 500_000, 70_000, 300_000] + [999_999] * 34
    found = host.mach_mem_info()
    assert found == ((10_000 + 70_000) * page, 32 << 30) and type(found[0]) is int
    assert mac.calls == [("sysctlbyname", b"hw.memsize"), ("host_statistics64", HOST_PORT, 4, 38)]


def test_mach_mem_info_is_none_without_any_of_its_sources(mac, monkeypatch):
    mac.vm = [1] * 38
    assert host.mach_mem_info() is None  # no hw.memsize
    mac.sysctls = {b"hw.memsize": (8 << 30, 8)}
    mac.vm = None
    assert host.mach_mem_info() is None  # host_statistics64 failed
    monkeypatch.setattr(host, "sysctl_int", {"hw.memsize": 8 << 30}.get)
    monkeypatch.setattr(host, "_libc_darwin", lambda: SimpleNamespace())
    assert host.mach_mem_info() is None  # no host_statistics64
    monkeypatch.setattr(host, "_libc_darwin", lambda: None)
    assert host.mach_mem_info() is None


def test_malloc_zones_read_the_summed_size_in_use(mac, monkeypatch):
    mac.zones = (1200, 7_654_321, 9_000_000, 16 << 20)
    zones = host.MallocZones.open()
    assert zones is not None and zones.read() == 7_654_321
    assert mac.calls == [("malloc_zone_statistics", None)]  # NULL: all zones
    monkeypatch.setattr(host, "_libc_darwin", lambda: None)
    assert host.MallocZones.open() is None


def test_the_c_library_is_looked_for_only_on_macos(monkeypatch):
    loaded = []

    def cdll(name):
        loaded.append(name)
        return f"libc at {name}"

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "/usr/lib/libc.dylib" if name == "c" else None)
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="linux"))
    assert host._libc_darwin() is None and loaded == []
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="darwin"))
    assert host._libc_darwin() == "libc at /usr/lib/libc.dylib"
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # no search path: the bare name
    assert host._libc_darwin() == "libc at libc.dylib"

    def missing(name):
        raise OSError(f"dlopen({name}): image not found")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert host._libc_darwin() is None


# -- /proc fields ---------------------------------------------------------------------------------------


def test_a_process_name_that_looks_like_a_field_adds_no_field(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tworker: 5 kB\nVmPeak:\t  2048 kB\nVmRSS:\t   512 kB\nThreads:\t4\n")
    assert host.read_kib_fields(str(status), "cpu", "memory_reserved") == {"VmPeak": 2048 * 1024,
                                                                             "VmRSS": 512 * 1024}


# -- CPU topology, caches and clocks from sysfs, else sysctl ---------------------------------------------


@pytest.fixture
def cpu0(tmp_path, monkeypatch):
    """An empty cpu0 directory and no /proc/cpuinfo, in place of the host's."""
    root = tmp_path / "cpu0"
    root.mkdir()
    monkeypatch.setattr(host, "CPU0", str(root))
    monkeypatch.setattr(host, "CPUINFO", str(tmp_path / "cpuinfo"))
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    return root


@pytest.mark.parametrize(("siblings", "threads"), [("0-1", 2), ("0,4", 2), ("2-3", 2), ("0-3,8-11", 8),
                                                   ("5", 1), ("0-1,4", 3)])
def test_threads_per_core_counts_the_siblings_list(cpu0, siblings, threads):
    write_files(cpu0, {"topology/thread_siblings_list": siblings + "\n"})
    assert host.threads_per_core() == threads


def test_threads_per_core_from_sysctl_is_a_whole_ratio_and_needs_both_counts(cpu0, monkeypatch):
    monkeypatch.setattr(host, "sysctl_int", {"hw.logicalcpu": 16, "hw.physicalcpu": 8}.get)
    threads = host.threads_per_core()
    assert threads == 2 and type(threads) is int
    monkeypatch.setattr(host, "sysctl_int", {"hw.logicalcpu": 16}.get)
    assert host.threads_per_core() == 1
    monkeypatch.setattr(host, "sysctl_int", {"hw.physicalcpu": 8}.get)
    assert host.threads_per_core() == 1


@pytest.mark.parametrize(("size", "expected"), [("2048K", 2 << 20), ("2M", 2 << 20), ("1G", 1 << 30),
                                                ("524288", 524288)])
def test_l2_cache_size_is_the_level_2_entry_in_bytes(cpu0, size, expected):
    write_files(cpu0, {"cache/index0/level": "1\n", "cache/index0/size": "48K\n",
                  "cache/index1/level": "1\n", "cache/index1/size": "32K\n",
                  "cache/index2/level": "2\n", "cache/index2/size": size + "\n",
                  "cache/index3/level": "3\n", "cache/index3/size": "30720K\n"})
    assert host.l2_cache_size() == expected


def test_l2_cache_size_falls_back_to_sysctl_then_zero(cpu0, monkeypatch):
    write_files(cpu0, {"cache/index0/level": "1\n", "cache/index0/size": "64K\n"})
    monkeypatch.setattr(host, "sysctl_int", {"hw.l2cachesize": 4 << 20}.get)
    assert host.l2_cache_size() == 4 << 20
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    assert host.l2_cache_size() == 0


def test_the_max_clock_is_cpufreqs_maximum_not_the_current_clock(cpu0):
    write_files(cpu0, {"cpufreq/cpuinfo_max_freq": "4500000\n", "cpufreq/scaling_cur_freq": "1200000\n"})
    assert host.max_clock_khz() == 4_500_000


def test_without_a_maximum_the_max_clock_is_the_current_clock_in_khz(cpu0, tmp_path):
    write_files(cpu0, {"cpufreq/scaling_cur_freq": "2994374\n"})
    assert host.max_clock_khz() == 2_994_000  # 2994 whole MHz
    write_files(cpu0, {"cpufreq/cpuinfo_max_freq": "n/a\n", "cpufreq/scaling_cur_freq": "garbage\n"})
    (tmp_path / "cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2394.374\n")
    assert host.max_clock_khz() == 2_394_000


def test_without_sysfs_or_cpuinfo_the_max_clock_is_sysctls_hz_in_whole_khz(cpu0, monkeypatch):
    monkeypatch.setattr(host, "sysctl_int", {"hw.cpufrequency_max": 2_400_000_500}.get)
    khz = host.max_clock_khz()
    assert khz == 2_400_000 and type(khz) is int
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    assert host.max_clock_khz() == 0


# -- temperatures: what is read, and what the error says was tried ---------------------------------------


def _unreadable(call) -> str:
    with pytest.raises(host.Unreadable) as info:
        call()
    return str(info.value)


def test_a_device_without_a_name_is_skipped_and_the_rest_read(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/temp1_input": "99000\n",  # no name: not known to be the CPU
                            "hwmon1/name": "coretemp\n", "hwmon1/temp1_input": "45000\n"})
    assert host.cpu_temperature() == 45


def test_every_cpu_package_counts_whatever_its_order(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": "71200\n",
                            "hwmon1/name": "coretemp\n", "hwmon1/temp1_input": "44000\n"})
    assert host.cpu_temperature() == 71


def test_the_temperature_is_rounded_to_the_nearest_degree(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "k10temp\n", "hwmon0/temp1_input": "62520\n"})
    assert host.cpu_temperature() == 63  # 62.52 degrees


@pytest.mark.parametrize(("milli", "celsius"), [("150000", 150), ("-50000", -50)])
def test_the_plausible_ranges_ends_are_temperatures(sysfs, milli, celsius):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": milli + "\n"})
    assert host.cpu_temperature() == celsius


def test_the_error_lists_each_sensor_and_why_it_gave_nothing(sysfs, monkeypatch):
    hwmon, thermal = sysfs["hwmon"], sysfs["thermal"]
    write_files(hwmon, {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": "0\n", "hwmon0/temp2_input": "garbage\n",
                   "hwmon0/temp3_input": "255000\n"})
    real_open = open

    def eio(path, *args, **kwargs):  # a sensor that is present but not reporting
        if str(path).endswith("temp1_input"):
            raise OSError(5, "Input/output error", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(host, "open", eio, raising=False)
    base = f"{hwmon}/hwmon0"
    assert _unreadable(host.cpu_temperature) == (
        f"no CPU temperature reading: {base}/temp1_input: Input/output error; "
        f"{base}/temp2_input: not a number ('garbage'); {base}/temp3_input: 255000 m°C is no temperature; "
        f"{thermal}: no thermal zone of type x86_pkg_temp*, cpu*, soc* (zones: none)")


def test_a_cpu_driver_without_inputs_is_named_and_not_called_missing(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_max": "100000\n"})
    message = _unreadable(host.cpu_temperature)
    assert f"{sysfs['hwmon']}/hwmon0: coretemp has no temp*_input" in message
    assert "no CPU sensor" not in message  # there is one: it has no reading


def test_the_error_names_the_drivers_looked_for_and_the_devices_found(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "acpitz\n", "hwmon0/temp1_input": "40000\n",
                            "hwmon1/name": "nvme\n", "hwmon1/temp1_input": "41000\n"})
    write_files(sysfs["thermal"], {"thermal_zone0/type": "acpitz\n", "thermal_zone0/temp": "40000\n",
                              "thermal_zone1/temp": "40000\n",  # a zone without a type
                              "thermal_zone2/type": "pch_cannonlake\n", "thermal_zone2/temp": "40000\n"})
    message = _unreadable(host.cpu_temperature)
    assert f"{sysfs['hwmon']}: no CPU sensor (coretemp/k10temp/zenpower/cpu_thermal) among acpitz, nvme" in message
    assert "(zones: acpitz, pch_cannonlake)" in message
    assert "macOS" not in message


def test_with_no_devices_the_error_says_so(sysfs):
    message = _unreadable(host.cpu_temperature)
    assert f"{sysfs['hwmon']}: no CPU sensor (coretemp/k10temp/zenpower/cpu_thermal) among no devices" in message


def test_zone_types_written_with_dashes_are_the_cpus(sysfs):
    write_files(sysfs["thermal"], {"thermal_zone0/type": "x86-pkg-temp\n", "thermal_zone0/temp": "58000\n"})
    assert host.cpu_temperature() == 58


def test_on_macos_the_error_says_why_there_is_no_reading(sysfs, monkeypatch):
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="darwin"))
    message = _unreadable(host.cpu_temperature)
    assert message.startswith("no CPU temperature reading: ")
    assert message.endswith("; macOS exposes CPU temperatures to no unprivileged reader")


# -- package power ---------------------------------------------------------------------------------------


def _domain(root: Path, domain: str, energy: int, name: str | None = "package-0", top: str = f"{RAPL_RANGE}") -> None:
    write_files(root, {f"{domain}/energy_uj": f"{energy}\n", f"{domain}/max_energy_range_uj": f"{top}\n"})
    if name is not None:
        write_files(root, {f"{domain}/name": name + "\n"})


def test_without_powercap_on_macos_the_error_says_where_power_is(tmp_path, monkeypatch):
    missing = tmp_path / "no-powercap"
    monkeypatch.setattr(host, "POWERCAP", str(missing))
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="darwin"))
    assert _unreadable(host.PackagePower.read_packages) == (
        f"{missing}: missing (no powercap RAPL driver exposed, as in most VMs and containers and off Linux); "
        "macOS exposes CPU power to root only (powermetrics)")
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="linux"))
    assert "macOS" not in _unreadable(host.PackagePower.read_packages)


def test_the_error_lists_the_domains_found_with_their_names(sysfs):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 5, name="psys")
    _domain(root, "intel-rapl:1", 5, name=None)
    assert _unreadable(host.PackagePower.read_packages) == (
        f"{root}: no RAPL package domain (intel-rapl:N named package-N; found: intel-rapl:0 (psys), "
        "intel-rapl:1 (no name))")


def test_an_empty_powercap_says_it_found_none(sysfs):
    assert _unreadable(host.PackagePower.read_packages).endswith("found: none)")


def test_a_package_after_another_domain_is_read(sysfs):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 7, name="psys")  # the platform domain listed first, as on some laptops
    _domain(root, "intel-rapl:1", 11, name="package-0")
    assert host.PackagePower.read_packages() == ({"intel-rapl:1": 11}, {"intel-rapl:1": RAPL_RANGE})


def test_a_package_that_did_not_move_adds_nothing(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 4_000_000)
    _domain(root, "intel-rapl:1", 9_000_000, name="package-1")
    clock.during_sleep = lambda: _domain(root, "intel-rapl:1", 9_300_000, name="package-1")
    assert host.PackagePower().milliwatts() == 3_000  # 0.3 J in 0.1 s; package 0 idle (0 J), not wrapped


def test_a_zero_range_is_no_range_to_unwrap_with(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 5_000_000, top="0")
    clock.during_sleep = lambda: _domain(root, "intel-rapl:0", 200, top="0")  # went back: wrapped
    message = _unreadable(host.PackagePower().milliwatts)
    assert "intel-rapl:0/energy_uj wrapped and its max_energy_range_uj cannot be read" in message


def test_a_domain_appearing_while_measuring_is_unreadable(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 1_000)
    clock.during_sleep = lambda: _domain(root, "intel-rapl:1", 2_000, name="package-1")
    message = _unreadable(host.PackagePower().milliwatts)
    assert message == f"{root}: the package domains changed while measuring"


def test_the_average_is_rounded_to_the_nearest_milliwatt(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 0)
    clock.during_sleep = lambda: _domain(root, "intel-rapl:0", 100_000)
    power = host.PackagePower()
    power.milliwatts()
    clock.during_sleep = None
    clock.now += 2.0  # exact: the clock stays in one binade, so the interval is 2.0 to the bit
    _domain(root, "intel-rapl:0", 100_000 + 2_002_999)
    assert power.milliwatts() == 1_001  # 2.002999 J in 2 s: 1001.4995 mW


def test_an_interval_just_inside_the_wrap_bound_is_averaged_over(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 0, top="500000000")  # 500 J: at 1 kW it wraps in 0.5 s at the soonest
    clock.during_sleep = lambda: _domain(root, "intel-rapl:0", 100_000, top="500000000")
    power = host.PackagePower()
    power.milliwatts()
    clock.during_sleep = None
    clock.now += 0.4999998
    _domain(root, "intel-rapl:0", 100_000 + 4_999_998, top="500000000")
    assert power.milliwatts() == 10_000  # 4.999998 J in 0.4999998 s, with no fresh sample
    assert len(clock.slept) == 1


def test_a_clock_that_did_not_advance_is_unreadable(sysfs, clock):
    _domain(sysfs["powercap"], "intel-rapl:0", 1_000)
    clock.rate = 0.0  # a coarse monotonic clock: the same reading before and after the sample
    message = _unreadable(host.PackagePower().milliwatts)
    assert message == "no time passed between two readings of the energy counters"
