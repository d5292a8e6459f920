"""The torchdevice plugin object for sim: :class:`SimBackend`, over ``torch.sim``.

Built on :class:`torchdevice.torch_backend.TorchNamespaceBackend`, the base of the cuda, xpu,
mtia and mps plugins: sim answers every family through the same code those plugins use on
hardware, which is what makes it their test bed on a machine without any.
"""
from __future__ import annotations

from typing import Any

from torchdevice.backend import Availability
from torchdevice.torch_backend import NAMESPACE_NAMES, NamespaceSleep, NamespaceView, TorchNamespaceBackend, TorchStreams

from . import _extension, claimed_by, config, load

__all__ = ["SimBackend", "SimStreams", "plugin"]


class SimStreams(NamespaceSleep, TorchStreams):
    """torch.sim's streams, and ``sleep``: ``torch.sim._sleep`` queues the wait on the current stream."""


class SimBackend(TorchNamespaceBackend):
    name = "sim"
    device_type = "sim"
    priority = 5
    description = "a simulated GPU: torch's PrivateUse1 device renamed 'sim' (selected only by name)"
    namespace = "sim"
    label = "sim"
    dist_backend = "simccl"
    streams_class = SimStreams
    extra_names = ("_sleep",)

    def __init__(self, namespace_module: Any = None):  # the namespace is built on first use, not at discovery
        self._namespace_module = namespace_module
        self._view: NamespaceView | None = None

    @property
    def ns(self) -> NamespaceView:  # type: ignore[override]
        if self._view is None:
            module = self._namespace_module if self._namespace_module is not None else load()
            self._view = NamespaceView(module, NAMESPACE_NAMES + tuple(self.extra_names), "torch.sim")
        return self._view

    def availability(self) -> Availability:
        """Available where sim can be built and loaded; never automatic. Never raises."""
        try:
            settings = config.read()
            other = claimed_by()
            if other is not None:
                return Availability(False, f"torch's PrivateUse1 device is claimed by {other!r}; sim needs it")
            binary_ready = (_extension.cache_root() / _extension.build_key()).is_dir()
            missing = [] if binary_ready else _extension.missing_tools()
            if missing:
                return Availability(False, f"building sim needs {' and '.join(missing)}")
        except Exception as exc:  # a bad variable or a broken toolchain must not break discovery
            return Availability(False, f"{type(exc).__name__}: {exc}")
        size = settings.memory / 1024**3
        return Availability(True, f"{settings.devices} simulated devices of {size:g} GiB each (asked for by name only)",
                            automatic=False)


plugin = SimBackend()
