"""``simchip``: a simulated accelerator on the host CPU, as a third-party torchdevice plugin.

Written against ``docs/plugins.md``: a :class:`torchdevice.Backend` subclass
registered under the entry-point group ``torchdevice``, composed from the
documented building blocks, every operation tagged.

What it simulates, and what each family does:

* devices: ``SIMCHIP_DEVICES`` (default 2) devices, all of them the host, so
  tensors live on torch's ``cpu`` device type; availability comes from
  ``SIMCHIP_AVAILABLE`` (default on), with a reason either way;
* memory: the host's figures (:class:`torchdevice.cpu.CPUMemory`: bytes of live
  CPU tensor storages from c10's counter, resident set size, ``/proc/meminfo``);
  ``mem_get_info`` divides the host's memory among the simulated devices, so each device reports its share (emulated);
* streams/events: host-synchronous streams (:mod:`torchdevice.streams`), with a
  per-thread current device among the simulated ones;
* RNG: torch's host generator (:class:`torchdevice.cpu.CPURNG`), shared by
  every simulated device since their tensors are host tensors;
* collectives: ``torch.cuda.comm``'s six with torch operations
  (:class:`torchdevice.collectives.DeviceComm`), ``gloo`` across processes.
"""
from __future__ import annotations

import os
from typing import ClassVar

from torchdevice import Availability, Backend, DeviceProperties
from torchdevice.backend import emulated
from torchdevice.collectives import DeviceComm
from torchdevice.cpu import CPURNG, CPUMemory
from torchdevice.streams import HostEvent, HostStream, HostStreamOps

__version__ = "1.0.0"
__all__ = ["SimChipBackend", "plugin"]

NAME = "simchip"


def _int_env(var: str, default: int) -> int:
    value = os.environ.get(var, "").strip()
    try:
        return int(value) if value else default
    except ValueError:
        raise ValueError(f"{var} must be an integer, got {value!r}") from None


DEVICES = max(1, _int_env("SIMCHIP_DEVICES", 2))


class SimChipStream(HostStream):
    backend: ClassVar[str] = NAME
    device_type: ClassVar[str] = "cpu"
    device_count: ClassVar[int] = DEVICES

    @classmethod
    def event_class(cls) -> type:
        return SimChipEvent


class SimChipEvent(HostEvent):
    backend: ClassVar[str] = NAME
    stream_class: ClassVar[type] = SimChipStream


class SimChipStreams(HostStreamOps):
    Stream = SimChipStream
    Event = SimChipEvent


class SimChipMemory(CPUMemory):
    @emulated("the host's (MemAvailable, MemTotal) divided equally among the simulated devices")
    def mem_get_info(self, index: int) -> tuple[int, int]:
        free, total = super().mem_get_info(index)
        return free // DEVICES, total // DEVICES


class SimChipCollectives(DeviceComm):
    device_type = "cpu"
    dist_backend = "gloo"


class SimChipBackend(Backend):
    name = NAME
    device_type = "cpu"
    priority = _int_env("SIMCHIP_PRIORITY", 50)
    description = "simulated accelerator on the host CPU (sample third-party plugin)"

    def availability(self) -> Availability:
        if os.environ.get("SIMCHIP_AVAILABLE", "1").strip() == "0":
            return Availability(False, "simchip disabled by SIMCHIP_AVAILABLE=0")
        return Availability(True, f"{DEVICES} simulated devices on the host CPU")

    def device_count(self) -> int:
        return DEVICES

    def device_properties(self, index: int) -> DeviceProperties:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return DeviceProperties(
            name=f"SimChip {index} (simulated)",
            total_memory=total // DEVICES,
            multi_processor_count=max(1, (os.cpu_count() or 1) // DEVICES),
            bf16_supported=True,
            type=NAME,
        )

    def memory(self) -> SimChipMemory:
        return SimChipMemory(self.name)

    def streams(self) -> SimChipStreams:
        return SimChipStreams(self.name)

    def rng(self) -> CPURNG:
        return CPURNG(self.name)

    def collectives(self) -> SimChipCollectives:
        return SimChipCollectives(self.name)


plugin = SimChipBackend()
