"""What the host machine says about itself: torch-free readers of the OS.

The CPU backend (:mod:`torchdevice.cpu`) answers CUDA's questions about "the
device" with the host's own figures; this module reads them, and nothing
else: Linux ``/proc`` and ``/sys`` (hwmon, thermal zones, powercap RAPL), the
C allocator (``mallinfo2``, macOS malloc zones), and on macOS the Mach kernel
(``task_info``, ``host_statistics64``) and ``sysctl`` through ``ctypes``.
Each reader returns its figure, or says that the host does not give it --
``None``/``0`` or :class:`Unreadable` (saying what was tried), as documented
per function -- so that the backend decides what a missing figure means;
none makes a number up.

The paths are module constants so that tests can point them at a fake tree.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import time
from typing import Callable

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


# -- the C allocator's bytes in use (a fallback of the cpu backend's memory_allocated) -----------


class MallInfo2:
    """glibc ``mallinfo2()``: ``uordblks`` (bytes in use in the arenas) + ``hblkhd`` (bytes in mmapped chunks)."""

    class _Struct(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost")]

    def __init__(self, fn: Callable[[], MallInfo2._Struct]) -> None:
        self._fn = fn

    def read(self) -> int:
        info = self._fn()
        return int(info.uordblks + info.hblkhd)

    @classmethod
    def open(cls) -> "MallInfo2 | None":
        try:
            fn = ctypes.CDLL(None).mallinfo2
        except (OSError, AttributeError):
            return None
        fn.restype = cls._Struct
        fn.argtypes = []
        return cls(fn)


class MallocZones:
    """macOS ``malloc_zone_statistics(NULL, &stats)``: ``size_in_use`` summed over every malloc zone."""

    class _Struct(ctypes.Structure):
        _fields_ = [("blocks_in_use", ctypes.c_uint), ("size_in_use", ctypes.c_size_t),
                    ("max_size_in_use", ctypes.c_size_t), ("size_allocated", ctypes.c_size_t)]

    def __init__(self, fn: Callable[[None, object], None]) -> None:
        self._fn = fn

    def read(self) -> int:
        stats = self._Struct()
        self._fn(None, ctypes.byref(stats))
        return int(stats.size_in_use)

    @classmethod
    def open(cls) -> "MallocZones | None":
        fn = getattr(_libc_darwin(), "malloc_zone_statistics", None)  # getattr(None, ...) is None off macOS
        if fn is None:
            return None
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        return cls(fn)


# -- macOS: the process's resident set and the host's free memory without /proc ---------------


class _MachTaskBasicInfo(ctypes.Structure):
    _pack_ = 4  # <mach/task_info.h>: #pragma pack(4)
    _fields_ = [("virtual_size", ctypes.c_uint64), ("resident_size", ctypes.c_uint64),
                ("resident_size_max", ctypes.c_uint64), ("user_time", ctypes.c_int32 * 2),
                ("system_time", ctypes.c_int32 * 2), ("policy", ctypes.c_int32), ("suspend_count", ctypes.c_int32)]


_MACH_TASK_BASIC_INFO = 20
_HOST_VM_INFO64, _HOST_VM_INFO64_COUNT = 4, 38  # vm_statistics64: free_count, active_count, inactive_count, ...


def _libc_darwin() -> ctypes.CDLL | None:
    """The C library on macOS (its Mach and sysctl calls), else None."""
    if sys.platform != "darwin":
        return None
    import ctypes.util  # here, not at the top: only macOS reads through it

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
    libc = _libc_darwin()
    if libc is None:
        return None
    try:
        fn = libc.sysctlbyname
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


# -- sensors: CPU temperature and package power (Linux sysfs), where the host exposes them ----


HWMON = "/sys/class/hwmon"
THERMAL = "/sys/class/thermal"
POWERCAP = "/sys/class/powercap"


class Unreadable(Exception):
    """A figure this host does not expose (no such file, root-only, garbage); the message says what was tried
    and what was found there."""


#: hwmon drivers whose temperatures are the CPU package's: coretemp (Intel), k10temp and zenpower (AMD),
#: cpu_thermal (ARM SoCs such as the Raspberry Pi's)
CPU_HWMON_NAMES = ("coretemp", "k10temp", "zenpower", "cpu_thermal")
#: thermal-zone types (prefixes, ``-`` read as ``_``) that measure the CPU package: x86_pkg_temp (Intel),
#: cpu* (cpu_thermal, cpu-0-0-usr ...), soc* (soc_thermal, soc_dts0 ...)
CPU_ZONE_TYPES = ("x86_pkg_temp", "cpu", "soc")
#: readings outside this range (millidegrees Celsius) are a sensor's error code, not a temperature
_PLAUSIBLE_MILLI_C = (-50_000, 150_000)


def _listdir(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _millidegrees(path: str, problems: list[str]) -> int | None:
    """One sysfs temperature in m°C, or None (and why, in ``problems``)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except PermissionError:
        problems.append(f"{path}: permission denied")
        return None
    except OSError as exc:  # a sensor that is present but not reporting answers EIO/ENODATA
        problems.append(f"{path}: {exc.strerror or exc}")
        return None
    try:
        value = int(text)
    except ValueError:
        problems.append(f"{path}: not a number ({text[:20]!r})")
        return None
    low, high = _PLAUSIBLE_MILLI_C
    if not low <= value <= high:
        problems.append(f"{path}: {value} m°C is no temperature")
        return None
    return value


def _hwmon_cpu_readings(problems: list[str]) -> list[int]:
    entries = _listdir(HWMON)
    if entries is None:
        problems.append(f"{HWMON}: missing")
        return []
    readings: list[int] = []
    names = []
    for entry in entries:
        # the attributes sit in hwmonN/, or in hwmonN/device/ for old drivers
        base = next((b for b in (f"{HWMON}/{entry}", f"{HWMON}/{entry}/device") if read(f"{b}/name")), None)
        if base is None:
            continue
        name = read(f"{base}/name") or ""
        names.append(name)
        if name not in CPU_HWMON_NAMES:
            continue
        inputs = [f for f in (_listdir(base) or []) if f.startswith("temp") and f.endswith("_input")]
        labels = {f: read(f"{base}/{f[:-len('_input')]}_label") or "" for f in inputs}
        if "Tdie" in labels.values():  # k10temp: Tctl is Tdie plus a fan-control offset on some parts
            inputs = [f for f in inputs if labels[f] != "Tctl"]
        found = [v for v in (_millidegrees(f"{base}/{f}", problems) for f in inputs) if v is not None]
        if not inputs:
            problems.append(f"{base}: {name} has no temp*_input")
        readings += found
    if not readings and not any(n in CPU_HWMON_NAMES for n in names):
        problems.append(f"{HWMON}: no CPU sensor ({'/'.join(CPU_HWMON_NAMES)}) among "
                        f"{', '.join(names) if names else 'no devices'}")
    return readings


def _zone_is_cpu(kind: str) -> bool:
    kind = kind.lower().replace("-", "_")
    return kind.startswith(CPU_ZONE_TYPES)


def _thermal_cpu_readings(problems: list[str]) -> list[int]:
    entries = _listdir(THERMAL)
    if entries is None:
        problems.append(f"{THERMAL}: missing")
        return []
    zones = [e for e in entries if e.startswith("thermal_zone")]
    kinds = {z: read(f"{THERMAL}/{z}/type") or "" for z in zones}
    cpu_zones = [z for z in zones if _zone_is_cpu(kinds[z])]
    if not cpu_zones:
        found = ", ".join(sorted(set(kinds.values()) - {""})) or "none"
        problems.append(f"{THERMAL}: no thermal zone of type {'*, '.join(CPU_ZONE_TYPES)}* (zones: {found})")
        return []
    return [v for v in (_millidegrees(f"{THERMAL}/{z}/temp", problems) for z in cpu_zones) if v is not None]


def cpu_temperature() -> int:
    """The hottest CPU-package temperature in whole degrees Celsius (rounded to the nearest).

    Read from Linux hwmon (the drivers of :data:`CPU_HWMON_NAMES`, every ``temp*_input``: package and
    cores; k10temp's ``Tctl`` left out where ``Tdie`` is given), else from the thermal zones whose type is a
    CPU's (:data:`CPU_ZONE_TYPES`). Raises :class:`Unreadable` saying what was tried where neither gives a
    reading (a VM, a container without /sys, macOS).
    """
    problems: list[str] = []
    readings = _hwmon_cpu_readings(problems) or _thermal_cpu_readings(problems)
    if not readings:
        if sys.platform == "darwin":
            problems.append("macOS exposes CPU temperatures to no unprivileged reader")
        raise Unreadable("no CPU temperature reading: " + "; ".join(problems))
    return round(max(readings) / 1000)


class PackagePower:
    """Average power of the CPU packages from the RAPL energy counters of Linux powercap.

    The counters are ``POWERCAP/intel-rapl:N/energy_uj`` (the AMD driver uses the same names), one per
    package domain (``name`` ``package-N``; the core/uncore/dram subdomains and ``psys`` are left out, so
    nothing is counted twice), in microjoules, wrapping at ``max_energy_range_uj``. :meth:`milliwatts`
    averages the packages' summed power since its previous call; the first call, a call less than
    :attr:`MIN_INTERVAL_S` after the previous one (the counters move about once a millisecond), and one after
    an interval in which a counter could have wrapped more than once (longer than its range at
    :attr:`MAX_WATTS`) measure over :attr:`SAMPLE_S` instead. Since Linux 5.10 ``energy_uj`` is readable by
    root only (CVE-2020-8694): a permission error is reported as unreadable, as is any package domain that
    cannot be read (a partial sum would be a wrong number).
    """

    SAMPLE_S = 0.1  #: how long a call without a usable previous reading measures
    MIN_INTERVAL_S = 0.01  #: the shortest interval averaged over
    MAX_WATTS = 1000.0  #: no package draws more: bounds how long a counter surely wraps at most once

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mark: tuple[float, dict[str, int]] | None = None

    @staticmethod
    def read_packages() -> tuple[dict[str, int], dict[str, int | None]]:
        """``({domain: energy_uj}, {domain: max_energy_range_uj or None})`` of every package domain; raises
        :class:`Unreadable` (what was tried and found) where there is none or one cannot be read."""
        entries = _listdir(POWERCAP)
        if entries is None:
            why = f"{POWERCAP}: missing (no powercap RAPL driver exposed, as in most VMs and containers and off Linux)"
            if sys.platform == "darwin":
                why += "; macOS exposes CPU power to root only (powermetrics)"
            raise Unreadable(why)
        energy: dict[str, int] = {}
        ranges: dict[str, int | None] = {}
        seen = []
        for entry in entries:
            head, _, number = entry.partition(":")
            if head != "intel-rapl" or not number.isdigit():  # intel-rapl:N:M are subdomains; -mmio repeats N
                continue
            name = read(f"{POWERCAP}/{entry}/name") or ""
            seen.append(f"{entry} ({name or 'no name'})")
            if not name.startswith("package"):
                continue
            path = f"{POWERCAP}/{entry}/energy_uj"
            try:
                with open(path) as f:
                    text = f.read().strip()
            except PermissionError as exc:
                raise Unreadable(f"{path}: permission denied (root-only since Linux 5.10)") from exc
            except OSError as exc:
                raise Unreadable(f"{path}: {exc.strerror or exc}") from exc
            if not text.isdigit():
                raise Unreadable(f"{path}: not a count of microjoules ({text[:20]!r})")
            energy[entry] = int(text)
            top = read(f"{POWERCAP}/{entry}/max_energy_range_uj")
            ranges[entry] = int(top) if top and top.isdigit() and int(top) > 0 else None
        if not energy:
            raise Unreadable(f"{POWERCAP}: no RAPL package domain (intel-rapl:N named package-N; found: "
                             f"{', '.join(seen) or 'none'})")
        return energy, ranges

    def milliwatts(self) -> int:
        """Average power of all packages in whole milliwatts (see the class docstring); raises
        :class:`Unreadable`."""
        with self._lock:
            mark = self._mark
            energy, ranges = self.read_packages()
            now = time.monotonic()
            if mark is not None:
                elapsed = now - mark[0]
                shortest_wrap = min((r for r in ranges.values() if r), default=None)
                if set(mark[1]) != set(energy) or (
                        shortest_wrap is not None and elapsed > shortest_wrap / 1e6 / self.MAX_WATTS):
                    mark = None  # other domains, or a counter may have wrapped more than once: measure afresh
                elif elapsed < self.MIN_INTERVAL_S:
                    time.sleep(self.MIN_INTERVAL_S - elapsed)
                    energy, ranges = self.read_packages()
                    now = time.monotonic()
            if mark is None:
                mark = (now, energy)
                time.sleep(self.SAMPLE_S)
                energy, ranges = self.read_packages()
                now = time.monotonic()
            self._mark = (now, energy)
        if set(energy) != set(mark[1]):
            raise Unreadable(f"{POWERCAP}: the package domains changed while measuring")
        total = 0
        for domain, value in energy.items():
            delta = value - mark[1][domain]
            if delta < 0:  # the counter wrapped
                top = ranges.get(domain)
                if top is None:
                    raise Unreadable(f"{POWERCAP}/{domain}/energy_uj wrapped and its max_energy_range_uj "
                                     "cannot be read")
                delta += top
            total += delta
        elapsed = now - mark[0]
        if elapsed <= 0:
            raise Unreadable("no time passed between two readings of the energy counters")
        return round(total / elapsed / 1000)  # µJ/s is µW
