"""Tests of torchdevice-mtia.

* ``TestMTIAStandIn``: stand-in tests, not hardware-verified: the plugin over a
  recording copy of ``torch.mtia``'s names (which lack the reserved/free
  memory functions), proving the calls, conversions and holes.
* ``TestMTIAOnThisBuild``: real tests on this machine's torch (a CPU build):
  unavailable, never selected, and ``torchdevice info`` says why.
"""
from __future__ import annotations

import torchdevice_mtia
from torchdevice.testing import Expect, NamespaceContract, UnavailableHere
from torchdevice_mtia import MTIABackend

_DRAM = {"dram": {"allocated_bytes": 10, "peak_bytes": 20}, "other": 1}


class TestMTIAStandIn(NamespaceContract):
    backend_class = MTIABackend
    namespace = "mtia"
    overrides = {
        "memory.memory_stats": Expect(
            "memory.memory_stats", (1,), (("memory_stats", (1,)),), {"memory_stats": _DRAM},
            {**_DRAM, "allocated_bytes.all.current": 10, "allocated_bytes.all.peak": 20}, "translated",
        ),
    }
    unsupported_ops = frozenset({
        "memory.memory_reserved", "memory.max_memory_reserved", "memory.reset_accumulated_memory_stats",
        "memory.mem_get_info", "memory.set_per_process_memory_fraction", "memory.get_per_process_memory_fraction",
    })

    def test_standin_memory_stats_without_dram(self):
        """stand-in, not hardware-verified: stats without a 'dram' entry pass through unchanged."""
        backend, _ = self.make({"memory_stats": {}})
        assert backend.memory().memory_stats(0) == {}

    def test_standin_properties_from_dict_and_capability(self):
        """stand-in, not hardware-verified: the properties dict, get_device_capability, is_bf16_supported."""
        backend, standin = self.make({"get_device_capability": (3, 1)})
        props = backend.device_properties(1)
        assert (props.name, props.total_memory, props.capability) == ("MTIA stand-in device", 16 << 30, (3, 1))
        assert props.bf16_supported is True and isinstance(props.raw, dict)
        assert [(c.name, c.args) for c in standin.calls[:2]] == [
            ("get_device_properties", (1,)), ("get_device_capability", (1,))]

    def test_standin_properties_missing_fields_are_not_invented(self):
        """stand-in, not hardware-verified: no name -> a label with the index; no total memory -> 0 (unknown)."""
        backend, _ = self.make({"get_device_properties": {}})
        props = backend.device_properties(0)
        assert (props.name, props.total_memory) == ("MTIA device 0", 0)

    def test_standin_streams_are_torch_stream(self):
        """stand-in, not hardware-verified: Stream/Event are the namespace's (torch.Stream/torch.Event)."""
        backend, standin = self.make()
        streams = backend.streams()
        assert streams.Stream is standin.Stream and streams.Event is standin.Event

    def test_standin_no_collective_engine(self):
        """stand-in, not hardware-verified: no torch.distributed engine for MTIA."""
        assert self.make()[0].collectives().dist_backend is None


class TestMTIAOnThisBuild(UnavailableHere):
    plugin = torchdevice_mtia.plugin
    distribution = "torchdevice-mtia"
    reason = "built without MTIA support"
