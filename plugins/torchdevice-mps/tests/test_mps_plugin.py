"""Tests of torchdevice-mps.

* ``TestMPSStandIn``: stand-in tests, not hardware-verified. The plugin runs
  over recording copies of ``torch.mps`` and ``torch.backends.mps`` that have
  exactly the names the installed torch has, so every hole (no Stream, no
  current_device, no peak figures ...) is met as on a Mac; the tests prove
  what each filled hole calls and what it returns.
* ``TestMPSOnThisBuild``: real tests on this machine's torch (a CPU build):
  unavailable, never selected, and ``torchdevice info`` says why.
"""
from __future__ import annotations

import pytest
import torch

import torchdevice_mps
from torchdevice.backend import Status, status_of
from torchdevice.collectives import DeviceComm
from torchdevice.errors import UnsupportedError
from torchdevice.testing import RETURNED, Expect, IntLike, NamespaceContract, StandIn, UnavailableHere
from torchdevice_mps import MPSBackend, MPSEvent, MPSStream

_STATE = torch.ones(3, dtype=torch.uint8)
_GEN = torch.Generator().manual_seed(42)


def _x(op, args, calls, returns=None, result=None, status="translated"):
    return Expect(op, args, calls, returns or {}, result, status)


class TestMPSStandIn(NamespaceContract):
    backend_class = MPSBackend
    namespace = "mps"
    index = 0
    devices = 1
    overrides = {
        "memory.memory_allocated": _x("memory.memory_allocated", (0,), (("current_allocated_memory", ()),),
                                      {"current_allocated_memory": IntLike(11)}, 11),
        "memory.memory_reserved": _x("memory.memory_reserved", (0,), (("driver_allocated_memory", ()),),
                                     {"driver_allocated_memory": IntLike(22)}, 22),
        "memory.memory_stats": _x(
            "memory.memory_stats", (0,),
            (("current_allocated_memory", ()), ("driver_allocated_memory", ()), ("recommended_max_memory", ())),
            {"current_allocated_memory": 1, "driver_allocated_memory": 2, "recommended_max_memory": 3},
            {"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2, "mps.current_allocated_memory": 1,
             "mps.driver_allocated_memory": 2, "mps.recommended_max_memory": 3}),
        "memory.mem_get_info": _x("memory.mem_get_info", (0,),
                                  (("recommended_max_memory", ()), ("driver_allocated_memory", ())),
                                  {"recommended_max_memory": 100, "driver_allocated_memory": 30}, (70, 100)),
        "memory.set_per_process_memory_fraction": _x("memory.set_per_process_memory_fraction", (0.25, 0),
                                                     (("set_per_process_memory_fraction", (0.25,)),)),
        "memory.reset_accumulated_memory_stats": _x("memory.reset_accumulated_memory_stats", (0,), (),
                                                    status="no-op"),
        "streams.current_device": _x("streams.current_device", (), (), result=0, status="emulated"),
        "streams.set_device": _x("streams.set_device", (0,), (), status="emulated"),
        "streams.synchronize": _x("streams.synchronize", (0,), (("synchronize", ()),)),
        "streams.current_stream": None,  # MPSStream objects: tested below
        "streams.default_stream": None,
        "streams.set_stream": None,
        "rng.manual_seed_all": _x("rng.manual_seed_all", (7,), (("manual_seed", (7,)),)),
        "rng.seed_all": _x("rng.seed_all", (), (("seed", ()),)),
        "rng.initial_seed": _x("rng.initial_seed", (), (("_get_default_mps_generator", ()),),
                               {"_get_default_mps_generator": _GEN}, 42),
        "rng.get_rng_state": _x("rng.get_rng_state", (0,), (("get_rng_state", ()),),
                                {"get_rng_state": _STATE}, RETURNED),
        "rng.set_rng_state": _x("rng.set_rng_state", (_STATE, 0), (("set_rng_state", (_STATE,)),)),
        "rng.default_generator": _x("rng.default_generator", (0,), (("_get_default_mps_generator", ()),),
                                    {"_get_default_mps_generator": _GEN}, RETURNED),
    }
    unsupported_ops = frozenset({
        "memory.max_memory_allocated", "memory.max_memory_reserved", "memory.reset_peak_memory_stats",
        "memory.get_per_process_memory_fraction",
    })

    def construct(self, standin, backends_returns=None):
        return MPSBackend(standin, StandIn("backends.mps", returns=backends_returns))

    def unbuilt(self):
        return self.construct(StandIn("mps", devices=0), {"is_built": False})

    def test_standin_holes_exist_in_real_torch_mps(self):
        """stand-in, not hardware-verified: the stand-in mirrors torch.mps, which lacks what the plugin fills."""
        standin = StandIn("mps")
        for name in ("current_device", "Stream", "memory_reserved", "max_memory_allocated",
                     "get_device_properties", "manual_seed_all", "initial_seed"):
            assert not hasattr(standin, name) and not hasattr(torch.mps, name)

    def test_standin_unbuilt_reason_says_macos(self):
        """stand-in, not hardware-verified: torch.backends.mps.is_built() False: unavailable, why."""
        found = self.unbuilt().availability()
        assert not found.available and "built without MPS" in found.reason and "macOS" in found.reason

    @pytest.mark.parametrize("macos14", [True, False])
    def test_standin_properties(self, macos14):
        """stand-in, not hardware-verified: name, core count, working-set budget, bf16 from macOS >= 14."""
        standin = StandIn("mps", devices=1, returns={"recommended_max_memory": IntLike(9 << 30)})
        backends = StandIn("backends.mps", returns={"is_macos_or_newer": macos14})
        props = MPSBackend(standin, backends).device_properties(0)
        assert (props.name, props.total_memory, props.multi_processor_count) == ("Apple stand-in GPU", 9 << 30, 10)
        assert type(props.total_memory) is int and props.capability is None
        assert props.bf16_supported is macos14
        assert backends.calls_to("is_macos_or_newer")[0].args == (14, 0)

    def test_standin_streams_are_handles_to_the_one_queue(self):
        """stand-in, not hardware-verified: Stream ops map onto torch.mps.synchronize and torch.mps.Event."""
        backend, standin = self.make()
        streams = backend.streams()
        default = streams.default_stream(0)
        assert isinstance(default, MPSStream) and default.stream_id == 0 and default.device == torch.device("mps", 0)
        assert streams.current_stream(0) == default
        stream = streams.Stream()
        standin.reset()
        stream.synchronize()
        assert stream.query() is True
        stream.wait_stream(default)
        assert [c.name for c in standin.calls] == ["synchronize", "Event", "Event.record", "Event.query"]
        streams.set_stream(stream)
        try:
            assert streams.current_stream(0) is stream
        finally:
            streams.set_stream(default)
        assert status_of(streams, "current_stream")[0] is Status.EMULATED

    def test_standin_events_are_torch_mps_events(self):
        """stand-in, not hardware-verified: Event wraps torch.mps.Event; timing needs enable_timing."""
        backend, standin = self.make()
        streams = backend.streams()
        assert streams.Event is MPSEvent
        start, end = MPSEvent(enable_timing=True), MPSEvent(enable_timing=True)
        start.record()
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) == 1.5 and end.query() is True
        assert [c.name for c in standin.calls] == [
            "Event", "Event", "Event.record", "Event.record", "Event.synchronize", "Event.elapsed_time", "Event.query"]
        assert standin.calls[0].kwargs == {"enable_timing": True}
        with pytest.raises(ValueError, match="enable_timing"):  # CUDA's exception class
            MPSEvent().elapsed_time(end)
        with pytest.raises(UnsupportedError):
            MPSEvent(interprocess=True)
        waiter = streams.Stream()
        standin.reset()
        waiter.wait_event(start)
        assert [c.name for c in standin.calls] == ["Event.wait"]

    def test_standin_collectives(self):
        """stand-in, not hardware-verified: torch.cuda.comm's six on mps tensors; gloo, as torch maps mps."""
        collectives = self.make()[0].collectives()
        assert isinstance(collectives, DeviceComm)
        assert (collectives.device_type, collectives.dist_backend) == ("mps", "gloo")


class TestMPSOnThisBuild(UnavailableHere):
    plugin = torchdevice_mps.plugin
    distribution = "torchdevice-mps"
    reason = "built without MPS support"
