"""torchdevice backend ``xpu``: Intel GPUs through ``torch.xpu``.

Built on :class:`torchdevice.torch_backend.TorchNamespaceBackend`: every
operation is the same-named ``torch.xpu`` function (``native``) except:

* ``default_stream`` -- ``torch.xpu`` has none. XPU keeps a current stream per
  thread, starting at the device's first stream; the default stream is that
  stream, read with ``torch.xpu.current_stream`` in a fresh thread that never
  set one (``emulated``, cached per device).
* properties -- ``_XpuDeviceProperties`` has no ``(major, minor)`` compute
  capability: ``major``/``minor`` are ``None`` (``get_device_capability``
  then raises UnsupportedError rather than inventing one) and the raw
  properties keep everything (``torch.xpu.get_device_capability`` returns a
  dict of features, not a version). ``multi_processor_count`` is
  ``gpu_subslice_count``, the figure torch's own Inductor uses as the XPU SM
  count.
* collectives: ``xccl``.
"""
from __future__ import annotations

from torchdevice.backend import DeviceProperties
from torchdevice.torch_backend import FirstThreadDefaultStream, TorchNamespaceBackend, TorchStreams

__version__ = "1.0.0"
__all__ = ["XPUBackend", "XPUStreams", "plugin"]


class XPUStreams(FirstThreadDefaultStream, TorchStreams):
    """``torch.xpu``'s streams; ``default_stream`` from a fresh thread's current stream."""


class XPUBackend(TorchNamespaceBackend):
    name = "xpu"
    device_type = "xpu"
    priority = 90
    description = "Intel GPUs through torch.xpu"
    namespace = "xpu"
    label = "XPU"
    dist_backend = "xccl"
    streams_class = XPUStreams

    def device_properties(self, index: int) -> DeviceProperties:
        raw = self.ns.get_device_properties(index)
        return DeviceProperties(
            name=str(raw.name),
            total_memory=int(raw.total_memory),
            multi_processor_count=int(getattr(raw, "gpu_subslice_count", 0) or 0),
            bf16_supported=self.bf16_supported(index),
            type=self.name,
            raw=raw,
        )


plugin = XPUBackend()
