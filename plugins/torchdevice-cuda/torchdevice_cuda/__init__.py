"""torchdevice backend ``cuda``: NVIDIA GPUs (and AMD GPUs on ROCm builds) through ``torch.cuda``.

``torch.cuda`` has every function of the five families, so every operation is
the same-named ``torch.cuda`` function (``native``), built by the shared base
:class:`torchdevice.torch_backend.TorchNamespaceBackend`:

* discovery: ``is_available``/``_is_compiled`` (availability and why not),
  ``device_count``, ``get_device_properties`` (name, total memory, compute
  capability, SM count), ``is_bf16_supported`` asked with the device current;
* memory: the caching allocator's figures (``memory_allocated`` ...
  ``get_per_process_memory_fraction``);
* streams: ``torch.cuda.Stream``/``Event`` themselves, ``current_stream``,
  ``default_stream``, ``set_stream``, ``synchronize``, ``current_device``;
* RNG: the per-device generators (``manual_seed`` seeds the current device);
* collectives: ``torch.cuda.comm`` itself (:class:`torchdevice.collectives.NativeCUDAComm`)
  and ``nccl`` for torch.distributed (RCCL on ROCm builds).

ROCm builds of torch expose AMD GPUs as ``torch.cuda``; availability says so.
"""
from __future__ import annotations

from torchdevice.backend import Availability
from torchdevice.collectives import NativeCUDAComm
from torchdevice.torch_backend import TorchNamespaceBackend

__version__ = "1.0.0"
__all__ = ["CudaBackend", "CudaCollectives", "plugin"]


class CudaCollectives(NativeCUDAComm):
    """``torch.cuda.comm`` itself, and NCCL for torch.distributed."""

    dist_backend = "nccl"


class CudaBackend(TorchNamespaceBackend):
    name = "cuda"
    device_type = "cuda"
    priority = 100
    description = "NVIDIA CUDA / AMD ROCm GPUs through torch.cuda"
    namespace = "cuda"
    label = "CUDA"

    def availability(self) -> Availability:
        found = super().availability()
        import torch

        hip = getattr(torch.version, "hip", None)
        if found.available and hip:
            return Availability(True, f"{found.reason} (ROCm/HIP {hip} build)", found.automatic)
        return found

    def collectives(self) -> CudaCollectives:
        return CudaCollectives(self.name)


plugin = CudaBackend()
