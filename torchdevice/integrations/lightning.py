"""PyTorch Lightning and Fabric on the translation target.

Lightning picks ``CUDAAccelerator`` for ``accelerator="gpu"|"cuda"|"auto"``
because ``torch.cuda.is_available()`` is True under translation, and then its
own code checks ``device.type == "cuda"`` in many places (``setup_device``
first of all). This integration lets Lightning resolve the accelerator as it
always does, then, where the result is CUDA, puts in its place an accelerator
*for the target*: a subclass of Lightning's ``CPUAccelerator`` (``MPSAccelerator``
on an MPS target) that answers like CUDA's where the program can tell:

* ``devices=`` is parsed as CUDA parses it, against the translated
  ``torch.cuda.device_count()`` (``"auto"``: all of them; more than there are
  raises Lightning's own error); the parallel devices are the target's;
* ``setup_device`` sets the translated current device and gives Lightning's
  ``torch.set_float32_matmul_precision`` hint when the translated capability is
  Ampere-class (8.0 and up), as CUDA's accelerator does;
* the precision plugin is the one CUDA gets, ``MixedPrecision(..., "cuda")``:
  its ``torch.autocast("cuda", dtype)`` and ``GradScaler("cuda")`` run for real
  on the target through :mod:`torchdevice.amp` (``16-mixed`` is float16, as
  Lightning asks for it explicitly; ``bf16-mixed`` is bfloat16);
* DDP uses the backend's distributed engine, :func:`torchdevice.dist_backend`;
* the Trainer's "GPU available: True (cuda), used: ..." line says the GPU is
  used, translated, instead of warning that it is not.

The devices Lightning places the model and batches on (``fabric.device``, the strategy's
``root_device``) are the very objects translation returns for ``cuda:N``, so they hold what the
program's own ``cuda`` tensors hold (MLX tensors on the mlx backend, not plain host tensors); so is
``LightningModule.device`` after the module is moved there (Lightning's ``_DeviceDtypeModuleMixin.to`` records
a re-parsed, plain device otherwise), so ``torch.ones(..., device=self.device)`` in a step is a device tensor.

Checkpoints hold the target's tensors (plain CPU tensors on a CPU target), so
they load with plain ``torch.load``.
"""
from __future__ import annotations

import importlib
import os
from typing import Any

from . import Integration, current_target

_PL_CONNECTORS = ("lightning.pytorch.trainer.connectors.accelerator_connector",
                  "pytorch_lightning.trainer.connectors.accelerator_connector")
_FABRIC_CONNECTORS = ("lightning.fabric.connector", "lightning_fabric.connector")
_SETUPS = ("lightning.pytorch.trainer.setup", "pytorch_lightning.trainer.setup")
#: where ``LightningModule.device`` / ``DeviceDtypeModuleMixin.device`` is recorded (``to`` re-parses its device)
_MIXINS = ("lightning.fabric.utilities.device_dtype_mixin", "lightning_fabric.utilities.device_dtype_mixin")


def _packages(module_name: str) -> tuple[str, str]:
    """(the package, its Fabric package) of a watched module."""
    if module_name.startswith("lightning."):
        pkg = "lightning.fabric" if module_name.startswith("lightning.fabric") else "lightning.pytorch"
        return pkg, "lightning.fabric"
    pkg = "lightning_fabric" if module_name.startswith("lightning_fabric") else "pytorch_lightning"
    return pkg, "lightning_fabric"


def _local_index() -> int:
    """The device index of this process: Lightning's launchers export LOCAL_RANK."""
    import torch

    try:
        index = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        index = 0
    return index if 0 <= index < torch.cuda.device_count() else 0


def _plain_device(target: Any, index: int) -> Any:
    """The target's device ``index`` as a plain ``torch.device`` (translation off)."""
    from ..vocabulary import RealDevice

    return RealDevice(target.device_type, index) if target.indexed else RealDevice(target.device_type)


def make_accelerator(base: type, cuda_cls: Any, fabric_cuda: Any, target: Any) -> type:
    """Lightning's accelerator for CUDA-written code on ``target``, derived from ``base``."""
    import torch

    device_type = target.device_type

    def _device(index: int) -> Any:
        """Where translation puts the program's ``cuda:index``: the very device object, as a backend that
        tells its devices from the host's by identity (mlx: tensors placed there are MLX tensors) needs."""
        if current_target() is None:
            return _plain_device(target, index)  # translation off: nothing to map
        from .. import devices

        return devices.map_device(f"cuda:{index}")

    class TranslatedCUDAAccelerator(base):  # type: ignore[misc, valid-type]
        __doc__ = (f"Lightning's accelerator for CUDA-written code translated by torchdevice to backend "
                   f"{target.name!r} ({device_type}): CUDA's device parsing and hints, the target's devices.")

        def setup_device(self, device: torch.device) -> None:
            if device.type != device_type:
                raise ValueError(f"Device should be {device_type} (CUDA translated by torchdevice), got {device} instead.")
            index = device.index if device.index is not None else _local_index()
            fabric_cuda._check_cuda_matmul_precision(index)  # answered from the translated capability
            torch.cuda.set_device(index)

        def teardown(self) -> None:
            torch.cuda.empty_cache()

        @staticmethod
        def parse_devices(devices: Any) -> Any:
            return cuda_cls.parse_devices(devices)  # CUDA's rules, against the translated device count

        @staticmethod
        def get_parallel_devices(devices: Any) -> list[torch.device]:
            if not isinstance(devices, list):
                devices = cuda_cls.parse_devices(devices) or []
            return [_device(i) for i in devices]

        @staticmethod
        def auto_device_count() -> int:
            return torch.cuda.device_count()

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def name() -> str:
            return "cuda"

    TranslatedCUDAAccelerator.__qualname__ = TranslatedCUDAAccelerator.__name__
    TranslatedCUDAAccelerator.__module__ = __name__
    return TranslatedCUDAAccelerator


_PACKAGES = ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
_classes: dict[str, tuple[tuple, type]] = {}  # package -> (the target it was made for, its accelerator class)


def _class_name(pkg: str) -> str:
    """The module attribute naming ``pkg``'s translated accelerator class (what a pickle refers to)."""
    return "TranslatedCUDAAccelerator_" + pkg.replace(".", "_")


def accelerator_class(pkg: str, target: Any) -> type:
    """The translated accelerator class of Lightning package ``pkg`` (``"lightning.pytorch"``...) for
    ``target``: one class per package and target, reachable as a module attribute so that a Trainer
    or Fabric holding one pickles (``strategy="ddp_spawn"``) and unpickles in the spawned process."""
    key = (target.name, target.device_type, target.indexed)
    cached = _classes.get(pkg)
    if cached is not None and cached[0] == key:
        return cached[1]
    _, fabric_pkg = _packages(pkg + ".")
    accelerators = importlib.import_module(pkg + ".accelerators")
    base = accelerators.MPSAccelerator if target.device_type == "mps" else accelerators.CPUAccelerator
    fabric_cuda = importlib.import_module(fabric_pkg + ".accelerators.cuda")
    cls = make_accelerator(base, accelerators.CUDAAccelerator, fabric_cuda, target)
    cls.__qualname__ = _class_name(pkg)  # __name__ stays TranslatedCUDAAccelerator
    _classes[pkg] = (key, cls)
    return cls


def __getattr__(name: str) -> Any:
    """The accelerator classes by their pickled names, made on demand (a spawned process unpickling)."""
    for pkg in _PACKAGES:
        if name == _class_name(pkg):
            target = current_target()  # (not translate.target(): translate imports this package)
            if target is None:
                raise AttributeError(f"{__name__}.{name}: a Lightning accelerator translated by torchdevice cannot "
                                     "be unpickled while translation is off (run the program with torchdevice run)")
            return accelerator_class(pkg, target)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LightningIntegration(Integration):
    name = "lightning"
    framework = "PyTorch Lightning and Fabric (lightning, pytorch_lightning, lightning_fabric)"
    modules = _PL_CONNECTORS + _FABRIC_CONNECTORS + _SETUPS + _MIXINS

    def install(self, patcher: Any, target: Any, module: Any) -> None:
        if "cuda" not in target.sources:
            return  # a real CUDA target: Lightning's own CUDA accelerator is right
        if module.__name__ in _SETUPS:
            self._install_setup(patcher, target, module)
        elif module.__name__ in _MIXINS:
            self._install_mixin(patcher, module)
        else:
            self._install_connector(patcher, target, module)

    def _install_connector(self, patcher: Any, target: Any, module: Any) -> None:
        pkg, _ = _packages(module.__name__)
        connector = module._AcceleratorConnector if hasattr(module, "_AcceleratorConnector") else module._Connector
        cuda_cls = module.CUDAAccelerator
        translated = accelerator_class(pkg, target)
        single_device = module.SingleDeviceStrategy

        orig_init_acc = patcher.get(connector, "_set_parallel_devices_and_init_accelerator")

        def _set_parallel_devices_and_init_accelerator(self: Any) -> None:
            flag = self._accelerator_flag
            if (isinstance(flag, str) and flag == "cuda") or type(flag) is cuda_cls:
                # what Lightning chose for "gpu", "cuda" or "auto" (or a CUDAAccelerator() passed in)
                self._accelerator_flag = translated()
            return orig_init_acc(self)

        orig_choose = patcher.get(connector, "_choose_strategy")

        def _choose_strategy(self: Any) -> Any:
            if (isinstance(self._accelerator_flag, translated) and len(self._parallel_devices) == 1
                    and getattr(self, "_num_nodes_flag", 1) <= 1):
                return single_device(device=self._parallel_devices[0])
            return orig_choose(self)

        orig_lazy = patcher.get(connector, "_lazy_init_strategy")

        def _lazy_init_strategy(self: Any) -> None:
            strategy = self.strategy
            if (isinstance(self.accelerator, translated) and hasattr(strategy, "_process_group_backend")
                    and strategy._process_group_backend is None):
                from .. import api

                strategy._process_group_backend = api.dist_backend()  # the backend's engine, as NCCL on CUDA
            return orig_lazy(self)

        for name, fn in (("_set_parallel_devices_and_init_accelerator", _set_parallel_devices_and_init_accelerator),
                         ("_choose_strategy", _choose_strategy), ("_lazy_init_strategy", _lazy_init_strategy)):
            fn.__qualname__ = f"{connector.__name__}.{name}"
            fn.__doc__ = f"{connector.__name__}.{name}, adapted to the translation target (torchdevice)"
            patcher.set(connector, name, fn)

    def _install_setup(self, patcher: Any, target: Any, module: Any) -> None:
        pkg, _ = _packages(module.__name__)
        translated = accelerator_class(pkg, target)
        orig = patcher.get(module, "_log_device_info")
        rank_zero_info = module.rank_zero_info
        xla = module.XLAAccelerator

        def _log_device_info(trainer: Any) -> None:
            if not isinstance(trainer.accelerator, translated):
                return orig(trainer)
            rank_zero_info(f"GPU available: True (cuda), used: True (translated by torchdevice to backend "
                           f"{target.name!r}, {target.device_type})")
            rank_zero_info(f"TPU available: {xla.is_available()}, using: 0 TPU cores")

        _log_device_info.__doc__ = "lightning's _log_device_info; a translated GPU counts as used (torchdevice)"
        patcher.set(module, "_log_device_info", _log_device_info)


    @staticmethod
    def _install_mixin(patcher: Any, module: Any) -> None:
        """``LightningModule.device`` is the device the module was moved to, as the program's ``cuda`` maps it.

        The mixin's ``to`` records the device through ``torch._C._nn._parse_to``, which makes a new, plain
        device: on a target whose translated device is one host object (mlx: ``torchdevice.devices.host_target``,
        what makes placements MLX tensors) ``self.device`` was a plain ``cpu`` device, so
        ``torch.ones(2, device=self.device)`` in a ``training_step`` gave a host tensor, not a device one.
        """
        from .. import devices

        mixin = module._DeviceDtypeModuleMixin
        update = module._update_properties
        orig_to = patcher.get(mixin, "to")

        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig_to(self, *args, **kwargs)
            dev = kwargs.get("device", args[0] if args else None)
            # the translated device object itself (compared by identity: it equals a plain cpu device), or a
            # source device naming it ("cuda", "cuda:0", 0)
            if dev is devices.host_target or (isinstance(dev, (str, int)) and not isinstance(dev, bool)
                                              and devices.map_device(dev) is devices.host_target):
                update(self, device=devices.host_target)
            return out

        to.__qualname__ = f"{mixin.__name__}.to"
        to.__doc__ = f"{mixin.__name__}.to; the translated device recorded as given (torchdevice)"
        patcher.set(mixin, "to", to)
