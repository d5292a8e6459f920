"""Tests of torchdevice-cuda.

* ``TestCudaStandIn``: stand-in tests, not hardware-verified. They run the
  plugin over :class:`torchdevice.testing.StandIn` (a recording copy of
  ``torch.cuda``'s names) and prove which ``torch.cuda`` function each
  operation calls, with which arguments, and how the result is converted.
* ``TestCudaOnThisBuild``: real tests on this machine's torch (a CPU build, or a
  CUDA build on a machine without a GPU): the backend is unavailable, never
  selected, and ``torchdevice info`` says why (skipped where a GPU answers).
"""
from __future__ import annotations

import torch

import torchdevice_cuda
from torchdevice.collectives import NativeCUDAComm
from torchdevice.testing import NamespaceContract, StandIn, UnavailableHere
from torchdevice_cuda import CudaBackend


class TestCudaStandIn(NamespaceContract):
    backend_class = CudaBackend
    namespace = "cuda"

    def test_standin_properties(self):
        """stand-in, not hardware-verified: get_device_properties(1) fields, bf16 asked with device 1 current."""
        backend, standin = self.make()
        props = backend.device_properties(1)
        assert (props.name, props.total_memory, props.capability, props.multi_processor_count) == (
            "CUDA stand-in device", 16 << 30, (8, 0), 108)
        assert props.bf16_supported is True and props.type == "cuda"
        assert [c.name for c in standin.calls] == [
            "get_device_properties", "device", "device.__enter__", "is_bf16_supported", "device.__exit__"]
        assert standin.calls_to("device")[0].args == (1,)

    def test_standin_stream_and_event_are_torch_cuda_classes(self):
        """stand-in, not hardware-verified: torchdevice.Stream/Event on CUDA are torch.cuda's own classes."""
        backend, standin = self.make()
        streams = backend.streams()
        assert streams.Stream is standin.Stream and streams.Event is standin.Event

    def test_standin_collectives(self):
        """stand-in, not hardware-verified: torch.cuda.comm passed through, NCCL across processes."""
        collectives = self.make()[0].collectives()
        assert isinstance(collectives, NativeCUDAComm) and collectives.dist_backend == "nccl"

    def test_standin_rocm_build_reason(self, monkeypatch):
        """stand-in, not hardware-verified: on a ROCm build the reason names HIP."""
        monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
        found = self.make()[0].availability()
        assert found.available and "ROCm/HIP 6.2.0" in found.reason


class TestCudaOnThisBuild(UnavailableHere):
    plugin = torchdevice_cuda.plugin
    distribution = "torchdevice-cuda"
    # a CPU build lacks CUDA; a CUDA build (what `pip install torch` gets on Linux) without a GPU finds no device
    reason = "no CUDA device found" if torch.backends.cuda.is_built() else "built without CUDA support"


def test_standin_is_not_used_by_the_installed_plugin():
    """The installed plugin wraps the real torch.cuda, snapshotted when it was constructed."""
    assert torchdevice_cuda.plugin.ns.module is torch.cuda
    assert not isinstance(torchdevice_cuda.plugin.ns.module, StandIn)
