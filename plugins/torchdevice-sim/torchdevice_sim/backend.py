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
    privateuse1 = True  # torch knows the device type "sim" once load() has renamed PrivateUse1
    streams_class = SimStreams
    extra_names = ("_sleep",)

    def __init__(self, namespace_module: Any = None):
        # The namespace is torchdevice_sim.runtime, which imports without building anything: its
        # functions reach the device once load() has run, which resolution does (device_count).
        # So discovery and `torchdevice matrix` read sim's operations without loading it.
        from . import runtime

        self._view = NamespaceView(namespace_module if namespace_module is not None else runtime,
                                   NAMESPACE_NAMES + tuple(self.extra_names), "torch.sim")

    @property
    def ns(self) -> NamespaceView:  # type: ignore[override]
        return self._view

    def device_count(self) -> int:
        """Loads sim (claims PrivateUse1, builds or loads the extension), then its device count: the
        devices ``CUDA_VISIBLE_DEVICES`` leaves visible, as the program translated onto sim would see on CUDA."""
        load(config.CUDA_VISIBLE_VAR)
        return super().device_count()

    def compatibility_markdown(self) -> str:
        """What ``torchdevice matrix`` adds about sim: which statuses it checks on a device type of its own."""
        return COMPATIBILITY

    def availability(self) -> Availability:
        """Available where sim can be built and loaded; never automatic. Never raises."""
        try:
            settings = config.read(config.CUDA_VISIBLE_VAR)
            other = claimed_by()
            if other is not None:
                return Availability(False, f"torch's PrivateUse1 device is claimed by {other!r}; sim needs it")
            missing = [] if _extension.binary().exists() else _extension.missing_tools()
            if missing:
                return Availability(False, f"building sim needs {' and '.join(missing)}")
        except Exception as exc:  # a bad variable or a broken toolchain must not break discovery
            return Availability(False, f"{type(exc).__name__}: {exc}")
        size = settings.memory / 1024**3
        seen = "" if settings.visible is None else f", {config.CUDA_VISIBLE_VAR} showing {list(settings.visible)}"
        return Availability(True, f"{settings.devices} simulated devices of {size:g} GiB each{seen} (asked for by name only)",
                            automatic=False)


COMPATIBILITY = """## Checked on a device type of its own: sim

`sim` (plugin `torchdevice-sim`) is a simulated GPU on torch's PrivateUse1 device, renamed `sim`: tensors
of their own device type, memory the CPU kernels refuse, one allocator per device with a capacity and
`torch.OutOfMemoryError`, asynchronous streams, events, one generator per device (CUDA's Philox state:
16 bytes, seed and offset). Translated, `CUDA_VISIBLE_DEVICES` selects and orders sim's devices as CUDA's
driver does (empty: none, `is_available()` False); `nn.DataParallel` runs over them (`torch.nn.parallel.comm`
is routed as `torch.cuda.comm` is); autocast rules libraries register for CUDA (`AutocastCUDA` kernels,
`torch.library.register_autocast(op, "cuda", ...)`, a library imported before translation or after)
apply on sim's and the CPU's autocast (`torchdevice.amp_rules`). Its statuses above are
checked by running them (`tox -e sim`: the plugin's tests, CUDA programs translated onto it, DDP on 2 ranks,
`torch.compile`).

The core suite's translation tests run with sim as their target too (`tox -e sim` sets
`TORCHDEVICE_TEST_TARGET=sim`; every core test that takes the `on_target` fixture, 301 of them, with
their expectations read from native sim code): device translation and its edges (`devices/test_devices`,
`devices/test_edges`, `devices/test_native_parity`, `test_unpatch`), the fronted
namespaces (`test_namespaces`, `test_source_family`, `test_device_properties`), `torch.cuda.comm`
(`test_comm`), `torch.distributed`'s backend argument (`distributed/test_nccl_programs`), AMP (`amp/test_autocast`), where
warnings point (`test_warning_sites`), memory figures (`test_memory`), and the events and streams of the
device-agnostic API (`test_api`, `test_logical_device_streams`), `torch.accelerator`
(`test_accelerator`), the import boundary and stand-ins torch's machinery sees (`test_boundary`,
`test_stand_ins`) and framework integrations (`test_integrations`); a test whose expectation holds on
the cpu backend only is skipped there with its reason (docs/testing.md).

The cuda, xpu, mtia and mps plugins are built on the same base as sim
(`torchdevice.torch_backend.TorchNamespaceBackend`), so these of their paths run on a real non-CPU device
type through sim: the memory, streams, RNG and collectives families read from a `torch.<namespace>`
module; its `Stream`/`Event` classes as `torch.cuda.Stream`/`Event`; the per-thread current device and
device guards (`torch.<namespace>.device`); per-device default generators (`default_generators[i]`,
seeding one device only); `torch.cuda.comm` over a device type that is not the CPU; device strings and
indices mapped onto a device type with several devices. Running sim found one bug there: the
`Stream`/`Event` rule read the class attribute, not the namespace's classes, so `torch.cuda.Event` was
reported unsupported on every namespace backend.

What sim cannot check are the vendors' own functions (`torch.xpu.memory_stats`, `torch.mtia.*`, MPS's
single device ...): those statuses are checked against recorded stand-ins of the namespaces only
(`torchdevice.testing.StandIn`), and on hardware only where docs/hardware.md records a run (one H100 run of
the cuda plugin)."""

plugin = SimBackend()
