"""What the host machine says about itself: torch-free readers of the OS.

The CPU backend (:mod:`torchdevice.cpu`) answers CUDA's questions about "the
device" with the host's own figures; this module reads them, and nothing
else: Linux ``/proc`` and ``/sys``, and on macOS the Mach kernel
(``task_info``, ``host_statistics64``) and ``sysctl`` through ``ctypes``.
Each reader returns its figure, or ``None``/``0`` where the OS does not say
(documented per function), so that the backend decides what a missing figure
means; none makes a number up.

The paths are module constants so that tests can point them at a fake tree.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys

from .errors import UnsupportedError

PROC_STATUS = "/proc/self/status"
MEMINFO = "/proc/meminfo"
CPUINFO = "/proc/cpuinfo"
CPU0 = "/sys/devices/system/cpu/cpu0"


def read(path: str) -> str | None:
    """The stripped text of a (sysfs) file, None where it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def read_kib_fields(path: str, backend: str, op: str) -> dict[str, int]:
    """Parse a /proc file of 'Key:   123 kB' lines into bytes; UnsupportedError naming ``op`` where it is
    unreadable."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise UnsupportedError(op, backend, f"needs {path} (Linux /proc): {exc}") from exc
    fields = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[key] = int(parts[0]) * 1024
    return fields


# -- macOS: the process's resident set and the host's free memory without /proc ---------------


class _MachTaskBasicInfo(ctypes.Structure):
    _pack_ = 4  # <mach/task_info.h>: #pragma pack(4)
    _fields_ = [("virtual_size", ctypes.c_uint64), ("resident_size", ctypes.c_uint64),
                ("resident_size_max", ctypes.c_uint64), ("user_time", ctypes.c_int32 * 2),
                ("system_time", ctypes.c_int32 * 2), ("policy", ctypes.c_int32), ("suspend_count", ctypes.c_int32)]


_MACH_TASK_BASIC_INFO = 20
_HOST_VM_INFO64, _HOST_VM_INFO64_COUNT = 4, 38  # vm_statistics64: free_count, active_count, inactive_count, ...


def _libc_darwin():
    if sys.platform != "darwin":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.dylib")
    except OSError:
        return None


def mach_resident() -> tuple[int, int] | None:
    """(resident_size, resident_size_max) of this task from ``task_info`` (macOS), else None."""
    libc = _libc_darwin()
    if libc is None:
        return None
    try:
        task = ctypes.c_uint32.in_dll(libc, "mach_task_self_")
        info = _MachTaskBasicInfo()
        count = ctypes.c_uint32(ctypes.sizeof(info) // 4)
        if libc.task_info(task, _MACH_TASK_BASIC_INFO, ctypes.byref(info), ctypes.byref(count)) != 0:
            return None
    except (OSError, AttributeError, ValueError):
        return None
    return int(info.resident_size), int(info.resident_size_max)


def mach_mem_info() -> tuple[int, int] | None:
    """(free + inactive bytes, physical memory) from ``host_statistics64`` and ``hw.memsize`` (macOS), else None:
    inactive pages are what the kernel hands out again without swapping, as Linux's MemAvailable counts."""
    libc, total = _libc_darwin(), sysctl_int("hw.memsize")
    if libc is None or not total:
        return None
    try:
        stats = (ctypes.c_uint32 * 64)()
        count = ctypes.c_uint32(_HOST_VM_INFO64_COUNT)
        libc.mach_host_self.restype = ctypes.c_uint32
        if libc.host_statistics64(libc.mach_host_self(), _HOST_VM_INFO64, stats, ctypes.byref(count)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    free, inactive = stats[0], stats[2]
    return (free + inactive) * os.sysconf("SC_PAGE_SIZE"), total


def sysctl_int(name: str) -> int | None:
    """``sysctlbyname(name)`` as an integer (macOS, BSD); None elsewhere or when it fails."""
    if sys.platform != "darwin":
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.dylib").sysctlbyname
        value, size = ctypes.c_uint64(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_uint64))
        if fn(name.encode(), ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return int(value.value) if size.value in (4, 8) else None


# -- the processor: name, counts, caches, clocks ----------------------------------------------


def cpu_name() -> str:
    """The CPU model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        with open(CPUINFO) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def total_memory() -> int:
    """The host's physical memory in bytes (sysconf, else ``MemTotal``); UnsupportedError where neither says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return read_kib_fields(MEMINFO, "cpu", "get_device_properties")["MemTotal"]


def usable_cpus() -> int:
    """The logical CPUs this process may run on (its affinity mask; else all of them; at least 1)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks (macOS)
        return os.cpu_count() or 1


def cpu_mhz() -> int | None:
    """The current clock of CPU 0 in whole MHz (cpufreq ``scaling_cur_freq``, else ``/proc/cpuinfo``), else None."""
    try:
        with open(f"{CPU0}/cpufreq/scaling_cur_freq") as f:
            return int(f.read().strip()) // 1000
    except (OSError, ValueError):
        pass
    try:
        with open(CPUINFO) as f:
            for line in f:
                if line.lower().startswith("cpu mhz"):
                    return int(float(line.split(":", 1)[1]))
    except (OSError, ValueError):
        pass
    return None


def threads_per_core() -> int:
    """Hardware threads per core (SMT siblings of CPU 0; macOS: logical / physical CPUs), 1 where the OS does
    not say."""
    siblings = read(f"{CPU0}/topology/thread_siblings_list")  # "0-1", "0,4" or "0"
    if siblings:
        count = 0
        for part in siblings.split(","):
            low, _, high = part.partition("-")
            count += int(high) - int(low) + 1 if high else 1
        return count
    logical, physical = sysctl_int("hw.logicalcpu"), sysctl_int("hw.physicalcpu")
    return logical // physical if logical and physical else 1


def l2_cache_size() -> int:
    """The L2 cache of CPU 0 in bytes (sysfs, else macOS sysctl), 0 where the OS does not say."""
    for i in range(8):
        level, size = read(f"{CPU0}/cache/index{i}/level"), read(f"{CPU0}/cache/index{i}/size")
        if level == "2" and size:  # "2048K"
            units = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}
            return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    return sysctl_int("hw.l2cachesize") or 0


def max_clock_khz() -> int:
    """The maximum clock of CPU 0 in kHz (cpufreq ``cpuinfo_max_freq``; else its current clock; else macOS
    sysctl), 0 where the OS does not say."""
    found = read(f"{CPU0}/cpufreq/cpuinfo_max_freq")
    if found and found.isdigit():
        return int(found)
    mhz = cpu_mhz()
    if mhz:
        return mhz * 1000
    hz = sysctl_int("hw.cpufrequency_max")
    return hz // 1000 if hz else 0
