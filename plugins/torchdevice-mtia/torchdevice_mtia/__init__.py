"""torchdevice backend ``mtia``: Meta MTIA accelerators through ``torch.mtia``.

Built on :class:`torchdevice.torch_backend.TorchNamespaceBackend`. ``torch.mtia``
has the stream and RNG families whole (``Stream``/``Event`` are the generic
``torch.Stream``/``torch.Event``), and only part of the memory family:

* ``memory_allocated``, ``max_memory_allocated``, ``reset_peak_memory_stats``,
  ``empty_cache`` -- native.
* ``memory_stats`` -- translated: ``torch.mtia.memory_stats`` as is, plus
  CUDA's ``allocated_bytes.all.current``/``.peak`` keys read from its
  ``"dram"`` entry (``allocated_bytes``/``peak_bytes``), where present.
* ``memory_reserved``, ``max_memory_reserved``, ``reset_accumulated_memory_stats``,
  ``mem_get_info``, ``set/get_per_process_memory_fraction`` -- unsupported:
  the MTIA runtime reports no reserved figure, no free/total memory and no
  fraction through torch; they raise UnsupportedError saying what exists.
* properties -- ``torch.mtia.get_device_properties`` returns a dict (the
  runtime's ``MTIADeviceProp``: ``name``, ``total_memory``); the capability is
  ``torch.mtia.get_device_capability``. A missing name is reported as
  ``"MTIA device <index>"`` and a missing total memory as ``0`` (unknown),
  never estimated.
* collectives: none -- open-source torch.distributed has no MTIA engine
  (``dist_backend`` is ``None``).
"""
from __future__ import annotations

from torchdevice.backend import DeviceProperties, translated, unsupported
from torchdevice.torch_backend import TorchMemory, TorchNamespaceBackend, uses

__version__ = "1.0.0"
__all__ = ["MTIABackend", "MTIAMemory", "plugin"]

_NO_RESERVED = "the MTIA runtime reports no reserved figure through torch; use memory_stats()"


class MTIAMemory(TorchMemory):
    """``torch.mtia``'s memory functions; the rest unsupported (see the module docstring)."""

    memory_reserved = unsupported("memory_reserved", _NO_RESERVED)
    max_memory_reserved = unsupported("max_memory_reserved", _NO_RESERVED)
    reset_accumulated_memory_stats = unsupported(
        "reset_accumulated_memory_stats", "torch.mtia keeps no accumulated counters; reset_peak_memory_stats() exists"
    )
    mem_get_info = unsupported("mem_get_info", "torch.mtia reports no free/total memory; see memory_stats()")
    set_per_process_memory_fraction = unsupported(
        "set_per_process_memory_fraction", "torch.mtia has no per-process memory fraction"
    )
    get_per_process_memory_fraction = unsupported(
        "get_per_process_memory_fraction", "torch.mtia has no per-process memory fraction"
    )

    @uses("memory_stats")
    @translated("<namespace>.memory_stats plus CUDA's allocated_bytes.all.current/peak from its 'dram' entry")
    def memory_stats(self, index: int) -> dict:
        stats = dict(self.ns.memory_stats(index))
        dram = stats.get("dram")
        if isinstance(dram, dict):
            for source, key in (("allocated_bytes", "current"), ("peak_bytes", "peak")):
                if source in dram:
                    stats[f"allocated_bytes.all.{key}"] = int(dram[source])
        return stats


class MTIABackend(TorchNamespaceBackend):
    name = "mtia"
    device_type = "mtia"
    priority = 70
    description = "Meta MTIA accelerators through torch.mtia"
    namespace = "mtia"
    label = "MTIA"
    dist_backend = None
    memory_class = MTIAMemory

    def device_properties(self, index: int) -> DeviceProperties:
        raw = self.ns.get_device_properties(index)
        get = raw.get if isinstance(raw, dict) else lambda key, default=None: getattr(raw, key, default)
        major, minor = self.ns.get_device_capability(index)
        return DeviceProperties(
            name=str(get("name", None) or f"MTIA device {index}"),
            total_memory=int(get("total_memory", 0) or 0),
            major=int(major),
            minor=int(minor),
            multi_processor_count=int(get("multi_processor_count", 0) or 0),
            bf16_supported=self.bf16_supported(index),
            type=self.name,
            raw=raw,
        )


plugin = MTIABackend()
