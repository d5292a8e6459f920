"""The host's macOS readers (``sysctl_int``, ``mach_resident``, ``mach_mem_info``, ``MallocZones``,
``_libc_darwin``), run on any OS against a labelled stand-in for Apple's C library.

The macOS readers never run on Linux, so they are run here against a fake C library
(:class:`_StandInLibc`) whose ``sysctlbyname``, ``task_info``, ``mach_host_self``,
``host_statistics64`` and ``malloc_zone_statistics`` behave as Apple's headers and man pages say --
they check the flavor, count and buffer they are handed, write the header's struct layout byte by
byte into the ctypes buffers (a ``ctypes.byref(x)`` argument exposes ``x`` as ``._obj``), and
return 0 or a kernel error code. The layout and the constants are taken from the headers, not from
torchdevice: <mach/task_info.h> (``struct mach_task_basic_info``, ``#pragma pack(4)``, flavor 20,
12 words), <mach/host_info.h> and <mach/vm_statistics.h> (``HOST_VM_INFO64`` = 4, 38 words,
``free_count`` and ``inactive_count`` at words 0 and 2), <malloc/malloc.h>
(``malloc_statistics_t``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import struct
import sys
from types import SimpleNamespace

import pytest

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
