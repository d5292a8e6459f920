"""Tests of torchdevice-xpu.

* ``TestXPUStandIn``: stand-in tests, not hardware-verified: the plugin over a
  recording copy of ``torch.xpu``'s names, proving the calls and conversions.
* ``TestXPUOnThisBuild``: real tests on this machine's torch (a CPU build):
  unavailable, never selected, and ``torchdevice info`` says why.
"""
from __future__ import annotations

import threading

import torchdevice_xpu
from torchdevice.collectives import DeviceComm
from torchdevice.testing import RETURNED, Expect, NamespaceContract, UnavailableHere
from torchdevice_xpu import XPUBackend

_STREAM = object()


class TestXPUStandIn(NamespaceContract):
    backend_class = XPUBackend
    namespace = "xpu"
    overrides = {
        # torch.xpu has no default_stream: the stream a fresh thread starts on
        "streams.default_stream": Expect(
            "streams.default_stream", (1,), (("current_stream", (1,)),), {"current_stream": _STREAM},
            RETURNED, "emulated",
        ),
    }

    def test_standin_default_stream_is_read_in_a_fresh_thread_and_cached(self):
        """stand-in, not hardware-verified: current_stream is asked in another thread, once per device."""
        backend, standin = self.make({"current_stream": lambda device=None: (device, threading.get_ident())})
        streams = backend.streams()
        first = streams.default_stream(1)
        assert first[0] == 1 and first[1] != threading.get_ident()
        assert streams.default_stream(1) is first
        assert len(standin.calls_to("current_stream")) == 1

    def test_standin_default_stream_error_reaches_the_caller(self):
        """stand-in, not hardware-verified: an error in the probing thread is raised in the caller's."""
        backend, _ = self.make({"current_stream": RuntimeError("no XPU stream")})
        try:
            backend.streams().default_stream(0)
        except RuntimeError as exc:
            assert "no XPU stream" in str(exc)
        else:
            raise AssertionError("the error was swallowed")

    def test_standin_properties(self):
        """stand-in, not hardware-verified: no (major, minor); SM count is gpu_subslice_count."""
        backend, standin = self.make()
        props = backend.device_properties(1)
        assert props.capability is None and props.major is None
        assert (props.name, props.total_memory, props.multi_processor_count) == ("XPU stand-in device", 16 << 30, 64)
        assert props.bf16_supported is True and props.raw.gpu_subslice_count == 64
        assert standin.calls_to("get_device_properties")[0].args == (1,)
        assert standin.calls_to("device")[0].args == (1,)

    def test_standin_collectives(self):
        """stand-in, not hardware-verified: torch.cuda.comm on xpu tensors, XCCL across processes."""
        collectives = self.make()[0].collectives()
        assert isinstance(collectives, DeviceComm)
        assert (collectives.device_type, collectives.dist_backend) == ("xpu", "xccl")


class TestXPUOnThisBuild(UnavailableHere):
    plugin = torchdevice_xpu.plugin
    distribution = "torchdevice-xpu"
    reason = "built without XPU support"
