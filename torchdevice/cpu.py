"""The built-in CPU backend: always available, lowest priority.

It registers through the same hooks as every external plugin (see
:class:`torchdevice.backend.Backend`); the router adds it before loading entry
points.

What the figures mean on CPU (torch has no CPU allocator statistics):

* ``memory_allocated`` and ``memory_reserved`` are the process's resident set
  size (``VmRSS`` in ``/proc/self/status``): the bytes of the process the OS
  holds in RAM, tensors included once their pages are touched. torch's CPU
  allocator keeps no cache, so allocated and reserved are the same figure.
* ``max_memory_allocated``/``max_memory_reserved`` are the peak resident set
  size (``VmHWM``); ``reset_peak_memory_stats`` resets it by writing ``5`` to
  ``/proc/self/clear_refs``, as the kernel documents.
* ``mem_get_info`` is ``(MemAvailable, MemTotal)`` from ``/proc/meminfo``.
* ``memory_stats`` carries those figures under CUDA's key names plus the raw
  ``/proc`` fields they come from.

The CPU is one device; ``TORCHDEVICE_DEVICE_COUNT=N`` (``torchdevice run
--devices N``) exposes it as N logical devices, all the same host CPU, and so
does a launcher that sets ``LOCAL_WORLD_SIZE`` (torchrun) when that variable
is unset, so that each local rank's ``cuda:LOCAL_RANK`` is valid (see
:func:`torchdevice.streams.host_device_count`). Memory figures are the
process's own whichever index is asked.

These need Linux's ``/proc``; elsewhere the memory family raises
UnsupportedError rather than inventing numbers.
"""
from __future__ import annotations

import os
import platform

import torch

from .backend import (
    Availability,
    Backend,
    DeviceProperties,
    MemoryOps,
    RNGOps,
    native,
    noop,
    translated,
    unsupported,
)
from .comm import DeviceComm
from .errors import UnsupportedError
from .streams import HostStreamOps, host_device_count

_PROC_STATUS = "/proc/self/status"
_MEMINFO = "/proc/meminfo"


def _read_kib_fields(path: str, backend: str, op: str) -> dict[str, int]:
    """Parse a /proc file of 'Key:   123 kB' lines into bytes."""
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


class CPUMemory(MemoryOps):
    """Process memory as the OS sees it (see the module docstring)."""

    def _status(self, op: str) -> dict[str, int]:
        return _read_kib_fields(_PROC_STATUS, self.backend, op)

    @translated("resident set size of the process (VmRSS)")
    def memory_allocated(self, index: int) -> int:
        return self._status("memory_allocated")["VmRSS"]

    @translated("peak resident set size (VmHWM), never below VmRSS (the kernel updates the peak lazily)")
    def max_memory_allocated(self, index: int) -> int:
        fields = self._status("max_memory_allocated")
        return max(fields["VmHWM"], fields["VmRSS"])

    @translated("resident set size (VmRSS): the CPU allocator keeps no cache")
    def memory_reserved(self, index: int) -> int:
        return self._status("memory_reserved")["VmRSS"]

    @translated("peak resident set size (VmHWM), never below VmRSS (the kernel updates the peak lazily)")
    def max_memory_reserved(self, index: int) -> int:
        fields = self._status("max_memory_reserved")
        return max(fields["VmHWM"], fields["VmRSS"])

    @translated("resets VmHWM through /proc/self/clear_refs")
    def reset_peak_memory_stats(self, index: int) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError as exc:
            raise UnsupportedError(
                "reset_peak_memory_stats", self.backend, f"needs a writable /proc/self/clear_refs: {exc}"
            ) from exc

    @noop("the CPU backend keeps no accumulated counters")
    def reset_accumulated_memory_stats(self, index: int) -> None:
        return None

    @translated("CUDA's current/peak keys from /proc/self/status, plus the raw fields")
    def memory_stats(self, index: int) -> dict:
        fields = self._status("memory_stats")
        stats = {
            "allocated_bytes.all.current": fields["VmRSS"],
            "allocated_bytes.all.peak": max(fields["VmHWM"], fields["VmRSS"]),
            "reserved_bytes.all.current": fields["VmRSS"],
            "reserved_bytes.all.peak": max(fields["VmHWM"], fields["VmRSS"]),
        }
        for key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize"):
            if key in fields:
                stats[f"proc.{key}"] = fields[key]
        return stats

    @translated("(MemAvailable, MemTotal) from /proc/meminfo")
    def mem_get_info(self, index: int) -> tuple[int, int]:
        info = _read_kib_fields(_MEMINFO, self.backend, "mem_get_info")
        return info["MemAvailable"], info["MemTotal"]

    @noop("torch's CPU allocator holds no cache to release")
    def empty_cache(self) -> None:
        return None

    set_per_process_memory_fraction = unsupported(
        "set_per_process_memory_fraction", "limit process memory with the OS (ulimit -v, cgroups)"
    )
    get_per_process_memory_fraction = unsupported(
        "get_per_process_memory_fraction", "the CPU backend sets no memory fraction"
    )


class CPURNG(RNGOps):
    """torch's CPU generator (``torch.default_generator``) is the device generator."""

    @native("torch.default_generator.manual_seed")
    def manual_seed(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    @native("one device: the same as manual_seed")
    def manual_seed_all(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    @native("torch.default_generator.seed")
    def seed(self) -> None:
        torch.default_generator.seed()

    @native("one device: the same as seed")
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


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _read_kib_fields(_MEMINFO, "cpu", "get_device_properties")["MemTotal"]


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

    def device_properties(self, index: int) -> DeviceProperties:
        return DeviceProperties(
            name=_cpu_name(),
            total_memory=_total_memory(),
            multi_processor_count=os.cpu_count() or 1,
            bf16_supported=True,  # torch computes bf16 on every CPU (natively with AVX512-BF16/AMX)
            type="cpu",
            raw={"cpu_capability": torch.backends.cpu.get_cpu_capability()},
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
