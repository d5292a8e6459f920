"""The built-in CPU backend: always available, lowest priority.

It registers through the same hooks as every external plugin (see
:class:`torchdevice.backend.Backend`); the router adds it before loading entry
points. What the host says about itself (``/proc``, ``/sys``, the Mach kernel,
``sysctl``) is read by :mod:`torchdevice.host`; this module turns it into
CUDA's answers.

What the memory figures mean on CPU (``docs/memory.md`` has the full account):

* ``memory_allocated`` is the bytes of every live tensor storage torch's CPU
  allocator has handed out in this process -- all CPU tensors of the process,
  not only those the program made "on cuda" (under translation they are the
  same tensors), counted at allocation whether or not their pages were ever
  touched, and dropped when the storage is freed. The figure is c10's own CPU
  allocation counter (``c10::ProfiledCPUMemoryReporter``, switched on with
  c10's ``caffe2_report_cpu_memory_usage`` flag when this backend's memory
  family is made; allocations made before that are not in it). Where that
  counter cannot be reached (a torch whose c10 does not export it, or a
  layout check that fails), the figure is the C allocator's bytes in use --
  glibc ``mallinfo2()`` (``uordblks + hblkhd``), macOS
  ``malloc_zone_statistics`` (``size_in_use``) -- which also counts the
  process's other ``malloc`` users; where neither exists, the resident set
  size. :func:`allocation_source` says which is in use, as does the note
  beside the figures in ``memory_stats`` (``cpu.source``).
* ``max_memory_allocated`` is the highest ``memory_allocated`` seen since start
  or the last ``reset_peak_memory_stats``: at every memory query and, from the
  first one on, every 5 ms by a sampling thread (:mod:`torchdevice.peak`).
  torch's CPU allocator keeps no peak and offers no hook at allocation, so a
  peak shorter than that between two queries can be missed: a lower bound,
  never above the true peak. The resident-set fallback is not sampled.
* ``memory_reserved`` is the process's resident set size (``VmRSS``): what the
  OS holds in RAM for the process, tensors once their pages are touched.
  ``max_memory_reserved`` is the kernel's peak of it (``VmHWM``);
  ``reset_peak_memory_stats`` resets it too (``/proc/self/clear_refs``).
  Without ``/proc`` (macOS) both come from the Mach kernel's ``task_info``
  (``resident_size``, ``resident_size_max``); that peak cannot be reset, so
  after ``reset_peak_memory_stats`` it is the highest resident set read since.
* ``mem_get_info`` is ``(MemAvailable, MemTotal)`` from ``/proc/meminfo``;
  on macOS ``(free + inactive pages, hw.memsize)`` (``host_statistics64``).
* ``memory_stats`` has exactly CUDA's keys (:mod:`torchdevice.memstats`) plus
  ``cpu.*`` raw figures.

Queries a program asks about the device get the host's answer (see the
``docs/memory.md`` table): ``utilization`` is the percent of the machine's
CPU capacity this process used since the previous call, ``list_gpu_processes``
this process in CUDA's format, ``get_allocator_backend`` ``"native"``,
``host_memory_stats`` zeros (there is no pinned host-memory allocator, so no
pinned blocks). The sensor queries read the host where it exposes them
(:mod:`torchdevice.host`): ``clock_rate`` the current clock of CPU 0 in MHz
(cpufreq, else ``/proc/cpuinfo``), ``temperature`` the hottest CPU-package
temperature in degrees C (hwmon coretemp/k10temp/zenpower/cpu_thermal, else
the CPU's thermal zones), ``power_draw`` the packages' average power in mW
since the previous call (powercap RAPL energy counters, root-only since Linux
5.10). Where the host has no such reading (most VMs and containers, macOS, a
root-only file) they raise :class:`~torchdevice.errors.SensorUnavailableError`
saying what was tried -- as CUDA raises without NVML -- never a made-up
figure. ``memory_usage`` (the percent of time the memory bus was busy) stays
refused (UnsupportedError): no host exposes that figure; its memory
controller's counters need perf privileges and count bandwidth.

The CPU is one device; ``TORCHDEVICE_DEVICE_COUNT=N`` (``torchdevice run
--devices N``) exposes it as N logical devices, all the same host CPU, and so
does a launcher that sets ``LOCAL_WORLD_SIZE`` (torchrun) when that variable
is unset, so that each local rank's ``cuda:LOCAL_RANK`` is valid (see
:func:`torchdevice.streams.host_device_count`). Memory figures are the
process's own whichever index is asked.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time

import torch

from . import host, memstats
from .backend import (
    Availability,
    Backend,
    DeviceProperties,
    MemoryOps,
    RNGOps,
    emulated,
    native,
    noop,
    translated,
    unsupported,
)
from .collectives import DeviceComm
from .errors import SensorUnavailableError, UnsupportedError
from .host import MallInfo2 as _MallInfo2  # the C allocator's readers, under the names the source chain,
from .host import MallocZones as _MallocZones  # tests and benchmarks/bench_cpu_memory.py use
from .memstats import NoPinnedHostMemory
from .peak import INTERVAL as PEAK_INTERVAL
from .peak import SampledPeak
from .streams import HostStreamOps, host_device_count

# -- the bytes of live CPU allocations -----------------------------------------------------


class _C10Counter:
    """c10's CPU allocation counter: exact bytes of live storages from torch's CPU allocator.

    c10's ``DefaultCPUAllocator`` reports every allocation and free to
    ``c10::profiledCPUMemoryReporter()``, which keeps the running total
    (``allocated_``) while the exported flag ``FLAGS_caffe2_report_cpu_memory_usage``
    is set (it then also logs each event at INFO level, below c10's default
    WARNING threshold, so nothing is printed). The total is a private member:
    its offset is found by allocating two storages of known, odd sizes and
    keeping the one candidate offset that moved by exactly those sizes and back;
    if none does, the flag is restored and :meth:`open` returns None.
    """

    _CANDIDATES = (96, 104, 80, 88, 112, 120, 128)  # mutex (40/48/64) + unordered_map (40/56) by ABI

    def __init__(self, address: int, offset: int):
        self.address, self.offset = address, offset
        self._value = ctypes.c_size_t.from_address(address + offset)

    def read(self) -> int:
        return int(self._value.value)

    @classmethod
    def open(cls) -> "_C10Counter | None":
        try:
            lib = ctypes.CDLL(cls._library())
            flag = ctypes.c_bool.in_dll(lib, "FLAGS_caffe2_report_cpu_memory_usage")
            getter = lib["_ZN3c1025profiledCPUMemoryReporterEv"]  # c10::profiledCPUMemoryReporter()
        except (OSError, ValueError, AttributeError):
            return None
        getter.restype = ctypes.c_void_p
        getter.argtypes = []
        address = getter()
        if not address:
            return None
        was = bool(flag.value)
        flag.value = True
        offset = cls._calibrate(address)
        if offset is None:
            flag.value = was
            return None
        if not was:
            # Frees of storages allocated before the flag was set are unknown to the reporter, which
            # logs a warning on the 1st, 1001st ... of them (its log_cnt_, the member after the total);
            # starting that count at 1 keeps the few early tensors freed later from printing one.
            log_cnt = ctypes.c_size_t.from_address(address + offset + ctypes.sizeof(ctypes.c_size_t))
            if log_cnt.value == 0:
                log_cnt.value = 1
        return cls(address, offset)

    @staticmethod
    def _library() -> str:
        libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
        for name in ("libc10.so", "libc10.dylib", "c10.dll"):
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                return path
        raise OSError(f"no c10 library in {libdir}")

    @classmethod
    def _calibrate(cls, address: int) -> int | None:
        def snapshot() -> dict[int, int]:
            return {o: ctypes.c_size_t.from_address(address + o).value for o in cls._CANDIDATES}

        sizes = (4096 * 3 + 40, 65536 + 24)
        base = snapshot()
        first = torch.empty(sizes[0], dtype=torch.uint8)
        one = snapshot()
        second = torch.empty(sizes[1], dtype=torch.uint8)
        two = snapshot()
        del first
        three = snapshot()
        del second
        four = snapshot()
        good = [o for o in cls._CANDIDATES
                if one[o] - base[o] == sizes[0] and two[o] - one[o] == sizes[1]
                and two[o] - three[o] == sizes[0] and three[o] - four[o] == sizes[1]]
        return good[0] if len(good) == 1 else None


class _ResidentSet:
    """The resident set size (``VmRSS``): the last resort, for a Linux without mallinfo2."""

    def read(self) -> int:
        return host.read_kib_fields(host.PROC_STATUS, "cpu", "memory_allocated")["VmRSS"]

    @classmethod
    def open(cls) -> "_ResidentSet | None":
        return cls() if os.path.exists(host.PROC_STATUS) else None


#: What each source counts, for :func:`allocation_source` and ``memory_stats()["cpu.source"]``.
SOURCES = {
    _C10Counter: "c10", _MallInfo2: "mallinfo2", _MallocZones: "malloc_zone_statistics", _ResidentSet: "VmRSS",
}

_source_lock = threading.Lock()
_source: object = None
_source_name = ""


def _allocation_counter() -> object:
    """The first source of live-allocation bytes that opens here (opened once per process)."""
    global _source, _source_name
    with _source_lock:
        if not _source_name:
            _source_name = "none"
            for kind in (_C10Counter, _MallInfo2, _MallocZones, _ResidentSet):
                opened = kind.open()  # type: ignore[attr-defined]
                if opened is not None:
                    _source, _source_name = opened, SOURCES[kind]
                    break
        return _source


def allocation_source() -> str:
    """Which figure ``memory_allocated`` reads on the cpu backend.

    ``"c10"`` (exact bytes of live CPU tensor storages), ``"mallinfo2"`` or
    ``"malloc_zone_statistics"`` (bytes the C allocator has handed out, every
    ``malloc`` user of the process included), ``"VmRSS"`` (resident set size),
    or ``"none"`` (memory_allocated raises UnsupportedError).
    """
    _allocation_counter()
    return _source_name


class CPUMemory(NoPinnedHostMemory, MemoryOps):
    """Host memory figures (see the module docstring); the live-allocation counter opens on creation."""

    def __init__(self, backend: str):
        super().__init__(backend)
        counter = _allocation_counter()
        # the peak of live bytes, sampled between reads where a read is cheap (not the /proc fallback)
        self._allocations = None if counter is None else SampledPeak(
            counter.read, None if _source_name == "VmRSS" else PEAK_INTERVAL)  # type: ignore[attr-defined]
        self._lock = threading.Lock()
        self._cpu_mark: tuple[float, float] | None = None
        self._rss_peak: int | None = None  # without /proc, after a reset: the highest resident set read since
        self._power = host.PackagePower()

    def _status(self, op: str) -> dict[str, int]:
        return host.read_kib_fields(host.PROC_STATUS, self.backend, op)

    def _resident(self, op: str) -> tuple[int, int]:
        """(resident set size, its peak): /proc/self/status, else the Mach kernel's task info (macOS)."""
        try:
            fields = self._status(op)
            return fields["VmRSS"], max(fields["VmHWM"], fields["VmRSS"])
        except UnsupportedError:
            found = host.mach_resident()
            if found is None:
                raise
        rss, peak = found
        with self._lock:
            if self._rss_peak is not None:  # the kernel's peak cannot be reset there: the reads since the reset
                peak = self._rss_peak = max(self._rss_peak, rss)
        return rss, max(peak, rss)

    def _counted(self, op: str) -> SampledPeak:
        if self._allocations is None:
            raise UnsupportedError(op, self.backend, "no allocation counter here (c10's, mallinfo2, malloc zones, "
                                   "/proc all missing)")
        return self._allocations

    def _allocated(self, op: str) -> int:
        return self._counted(op).read()

    @translated("bytes of live CPU tensor storages of the process (c10's CPU allocation counter), counted at "
                "allocation, touched or not; fallback: the C allocator's bytes in use (mallinfo2 / malloc zones); docs/memory.md")
    def memory_allocated(self, index: int) -> int:
        return self._allocated("memory_allocated")

    @emulated("the highest memory_allocated() seen since start or reset_peak_memory_stats: at every memory query and "
              "every 5 ms from the first one on (torch's CPU allocator keeps no peak: one lasting under 5 ms between "
              "two queries can be missed, so it is a lower bound); docs/memory.md")
    def max_memory_allocated(self, index: int) -> int:
        return self._counted("max_memory_allocated").peak()

    @translated("resident set size of the process (VmRSS; macOS: the task's resident_size): what the host holds "
                "in RAM for it")
    def memory_reserved(self, index: int) -> int:
        return self._resident("memory_reserved")[0]

    @translated("peak resident set size (VmHWM; macOS: resident_size_max), never below the current one (the kernel "
                "updates the peak lazily)")
    def max_memory_reserved(self, index: int) -> int:
        return self._resident("max_memory_reserved")[1]

    @translated("sets the allocated peak to the current figure and resets VmHWM through /proc/self/clear_refs "
                "(macOS: the reserved peak is then the highest resident set read since)")
    def reset_peak_memory_stats(self, index: int) -> None:
        if self._allocations is not None:
            self._allocations.reset()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError as exc:
            if os.path.exists("/proc/self"):
                raise UnsupportedError(
                    "reset_peak_memory_stats", self.backend, f"needs a writable /proc/self/clear_refs: {exc}"
                ) from exc
            # no /proc (macOS): the kernel's peak cannot be reset; from now on the peak is the reads' highest
            found = host.mach_resident()
            with self._lock:
                self._rss_peak = found[0] if found is not None else None

    @noop("torch's CPU allocator keeps no accumulated counters (memory_stats' allocated/freed totals are 0)")
    def reset_accumulated_memory_stats(self, index: int) -> None:
        return None

    @translated("CUDA's keys (torchdevice.memstats): allocated/active/requested bytes from memory_allocated, "
                "reserved bytes from the resident set, CUDA-allocator mechanisms 0; plus cpu.* raw figures")
    def memory_stats(self, index: int) -> dict:
        allocated, peak = self._counted("memory_stats").read_with_peak()
        try:
            fields = self._status("memory_stats")
        except UnsupportedError:
            fields = {}
        try:
            reserved, reserved_peak = self._resident("memory_stats")
        except UnsupportedError:
            reserved, reserved_peak = 0, 0
        extra: dict = {"cpu.source": _source_name}
        for key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize"):
            if key in fields:
                extra[f"cpu.{key}"] = fields[key]
        return memstats.device_stats(allocated, peak, reserved, reserved_peak, extra=extra)

    @translated("(MemAvailable, MemTotal) from /proc/meminfo; macOS: (free + inactive pages, hw.memsize)")
    def mem_get_info(self, index: int) -> tuple[int, int]:
        try:
            info = host.read_kib_fields(host.MEMINFO, self.backend, "mem_get_info")
        except UnsupportedError:
            found = host.mach_mem_info()
            if found is None:
                raise
            return found
        return info["MemAvailable"], info["MemTotal"]

    @noop("torch's CPU allocator holds no cache to release")
    def empty_cache(self) -> None:
        return None

    set_per_process_memory_fraction = unsupported(
        "set_per_process_memory_fraction", "limit process memory with the OS (ulimit -v, cgroups)"
    )

    @translated("1.0: torch sets no cap on CPU allocations (set_per_process_memory_fraction is refused; OS limits "
                "such as ulimit or cgroups apply outside torch)")
    def get_per_process_memory_fraction(self, index: int) -> float:
        return 1.0

    # -- optional operations (torchdevice.namespaces.OPTIONAL_OPS) --------------------------

    @translated("'native': torch's own CPU allocator (there is no cudaMallocAsync)")
    def get_allocator_backend(self) -> str:
        return "native"

    @emulated("percent (0-100) of the machine's CPU capacity (all logical CPUs) this process used since the "
              "previous call (the first: since the backend was made), from os.times()")
    def utilization(self, index: int) -> int:
        now = time.monotonic()
        times = os.times()
        used = times.user + times.system
        with self._lock:
            mark, self._cpu_mark = self._cpu_mark, (now, used)
        if mark is None:
            mark = _CPU_MARK
        wall = now - mark[0]
        if wall <= 0:
            return 0
        percent = 100.0 * (used - mark[1]) / (wall * (os.cpu_count() or 1))
        return int(round(min(max(percent, 0.0), 100.0)))

    @translated("the current clock of CPU 0 in MHz (Linux cpufreq scaling_cur_freq, else /proc/cpuinfo) where "
                "the host exposes it; elsewhere SensorUnavailableError")
    def clock_rate(self, index: int) -> int:
        mhz = host.cpu_mhz()
        if mhz is None:
            raise SensorUnavailableError(
                "clock_rate", self.backend, f"no CPU clock reading ({host.CPU0}/cpufreq/scaling_cur_freq and "
                f"the 'cpu MHz' line of {host.CPUINFO} are missing or unreadable)",
                "get_device_properties().clock_rate (the maximum clock in kHz, 0 where unknown) or the machine's "
                "own tools")
        return mhz

    @translated("the hottest CPU-package temperature in °C: Linux hwmon (coretemp, k10temp, zenpower, cpu_thermal), "
                "else the CPU's thermal zones (x86_pkg_temp, cpu*, soc*), where the host exposes them; elsewhere "
                "SensorUnavailableError")
    def temperature(self, index: int) -> int:
        try:
            return host.cpu_temperature()
        except host.Unreadable as exc:
            raise SensorUnavailableError(
                "temperature", self.backend, str(exc),
                "the machine's own monitoring (lm-sensors' `sensors`; in a VM or container, the host's)") from exc

    @emulated("the CPU packages' average power in mW since the previous call (the first: over 0.1 s) from Linux "
              "powercap RAPL energy counters (energy_uj, root-only since Linux 5.10) where the host exposes them; "
              "elsewhere SensorUnavailableError")
    def power_draw(self, index: int) -> int:
        try:
            return self._power.milliwatts()
        except host.Unreadable as exc:
            raise SensorUnavailableError(
                "power_draw", self.backend, str(exc),
                "run as root or let this user read /sys/class/powercap/intel-rapl:*/energy_uj (a udev rule), or "
                "the machine's own tools (turbostat, powerstat; macOS: sudo powermetrics)") from exc

    memory_usage = unsupported(
        "memory_usage",
        "a host exposes no memory-bus busy time: NVML reads it from a GPU's memory controller, a CPU's memory "
        "controller counters (uncore IMC) need perf privileges and count bandwidth, not busy time; measure "
        "bandwidth with `perf stat` (uncore_imc events) or the machine's own tools")

    @emulated("CUDA's format listing this process only, with its resident set size: other processes' use of "
              "the host is not the backend's to report")
    def list_gpu_processes(self, index: int) -> str:
        try:
            used = self._resident("list_gpu_processes")[0]
        except UnsupportedError:
            used = self._allocated("list_gpu_processes")
        return (f"GPU:{index}\nprocess {os.getpid():>10d} uses {used / (1024 * 1024):>12.3f} MB GPU memory\n"
                f"(torchdevice {self.backend} backend: this process only; the host's other processes are not listed)")


_CPU_MARK = (time.monotonic(), sum(os.times()[:2]))


class CPURNG(RNGOps):
    """torch's CPU generator (``torch.default_generator``) is the device generator."""

    @native("torch.default_generator.manual_seed")
    def manual_seed(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    @native("torch.default_generator.manual_seed: every device shares torch's one host generator")
    def manual_seed_all(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    @native("torch.default_generator.seed")
    def seed(self) -> None:
        torch.default_generator.seed()

    @native("torch.default_generator.seed: every device shares torch's one host generator")
    def seed_all(self) -> None:
        torch.default_generator.seed()

    @native("torch.default_generator.initial_seed")
    def initial_seed(self) -> int:
        return torch.default_generator.initial_seed()

    @native("torch.default_generator.get_state")
    def get_rng_state(self, index: int) -> torch.Tensor:
        return torch.default_generator.get_state()

    @native("torch.default_generator.set_state")
    def set_rng_state(self, state: torch.Tensor, index: int) -> None:
        torch.default_generator.set_state(state)

    @native("torch.default_generator")
    def default_generator(self, index: int) -> torch.Generator:
        return torch.default_generator


class CPUCollectives(DeviceComm):
    """gloo carries CPU tensors across processes; ``torch.cuda.comm``'s ops are torch copies and sums."""

    device_type = "cpu"
    dist_backend = "gloo"


class CPUStreams(HostStreamOps):
    pass


class CPUBackend(Backend):
    """The host CPU as one device."""

    name = "cpu"
    device_type = "cpu"
    priority = 0
    description = "host CPU (built in)"

    def availability(self) -> Availability:
        return Availability(True, f"{os.cpu_count()} logical CPUs")

    def device_count(self) -> int:
        return host_device_count()

    #: What each of CUDA's property fields is on this backend (docs/compatibility.md shows it)
    PROPERTY_NOTES = {
        "name": "the CPU model name (/proc/cpuinfo, else platform)",
        "total_memory": "the host's physical memory",
        "multi_processor_count": "the logical CPUs this process may run on (its affinity mask)",
        "is_integrated": "1: the device computes in host memory",
        "is_multi_gpu_board": "0",
        "max_threads_per_multi_processor": "hardware threads per core (SMT siblings of CPU 0), 1 where the OS "
                                           "does not say",
        "warp_size": "1: a CPU thread executes alone (no lockstep thread groups)",
        "L2_cache_size": "the L2 cache of CPU 0 in bytes (Linux sysfs, macOS sysctl), 0 where the OS does not say",
        "clock_rate": "the maximum clock of CPU 0 in kHz (cpufreq cpuinfo_max_freq; else its current clock, "
                      "cpufreq or /proc/cpuinfo; else macOS sysctl), 0 where the OS does not say",
        "memory_clock_rate": "0: not readable without privileges",
        "memory_bus_width": "0: not readable without privileges",
        "shared_memory_per_block": "0: a CPU has no software-managed shared memory",
        "shared_memory_per_multiprocessor": "0: a CPU has no software-managed shared memory",
    }

    def device_properties(self, index: int) -> DeviceProperties:
        return DeviceProperties(
            name=host.cpu_name(),
            total_memory=host.total_memory(),
            multi_processor_count=host.usable_cpus(),
            bf16_supported=True,  # torch computes bf16 on every CPU (natively with AVX512-BF16/AMX)
            type="cpu",
            raw={"cpu_capability": torch.backends.cpu.get_cpu_capability()},
            is_integrated=1,
            max_threads_per_multi_processor=host.threads_per_core(),
            warp_size=1,
            L2_cache_size=host.l2_cache_size(),
            clock_rate=host.max_clock_khz(),
        )

    def memory(self) -> CPUMemory:
        return CPUMemory(self.name)

    def streams(self) -> CPUStreams:
        return CPUStreams(self.name)

    def rng(self) -> CPURNG:
        return CPURNG(self.name)

    def collectives(self) -> CPUCollectives:
        return CPUCollectives(self.name)


plugin = CPUBackend()
