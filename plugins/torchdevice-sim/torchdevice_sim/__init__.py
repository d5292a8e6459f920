"""torchdevice backend ``sim``: a simulated GPU, a real torch device type of its own.

sim is torch's PrivateUse1 device renamed ``sim`` -- the mechanism hardware vendors integrate
with (Ascend's ``torch_npu``, torch's own ``torch_openreg``). Its tensors are ``sim:N``
tensors, with memory the CPU kernels refuse, one allocator per device with a capacity and
CUDA's statistics, asynchronous streams (a worker thread per queue), events, one generator
per device, autocast, serialization and a process group. Its kernels are torch's CPU kernels,
run on the device's queue, so a program gets the CPU's numbers with a GPU's discipline.

``TORCHDEVICE_SIM_RACECHECK=1`` (or :func:`set_racecheck`) reports streams used without being ordered,
raising :class:`SimRaceError` (:mod:`torchdevice_sim.racecheck`).

It is never selected automatically: ``torchdevice run --backend sim``,
``TORCHDEVICE_BACKEND=sim`` or ``torchdevice.use("sim")``. Code written for sim itself calls
:func:`load` and then uses ``device="sim"`` and ``torch.sim`` (see :mod:`torchdevice_sim.runtime`).
The C++ half is built with torch's cpp_extension tooling on first use and cached
(:mod:`torchdevice_sim._extension`).
"""
from __future__ import annotations

import atexit
import sys
import threading
from types import ModuleType
from typing import Any

from . import config
from .racecheck import SimRaceError, racecheck_enabled, set_racecheck

__version__ = "1.0.0"
__all__ = ["load", "plugin", "SimBackend", "claimed_by", "SimRaceError", "set_racecheck", "racecheck_enabled"]

_lock = threading.Lock()
_loaded: ModuleType | None = None
_keep: list[Any] = []  # registrations that must stay alive (the fallback's library)
_visible: tuple[tuple[int, ...], str] = ((), "")  # the physical devices loaded, and the variable that named them


def claimed_by() -> str | None:
    """The name another plugin gave torch's PrivateUse1 device, or None if sim may claim it."""
    import torch

    from .runtime import DEVICE_TYPE

    name = torch._C._get_privateuse1_backend_name()
    return None if name in ("privateuseone", DEVICE_TYPE) else name


def load(visible_var: str = config.VISIBLE_VAR) -> ModuleType:
    """Claim PrivateUse1 as ``sim``, build/load the extension, and return ``torch.sim``; idempotent.

    The devices the process sees are those ``visible_var`` names (:mod:`.config`): sim's own variable
    natively, ``CUDA_VISIBLE_DEVICES`` where torchdevice loads sim to translate onto it. Raises
    RuntimeError if another PrivateUse1 backend (``torch_npu`` ...) holds the device type, or if sim was
    loaded already with other visible devices than ``visible_var`` names now (a process has one set, as
    a CUDA process reads its variable once), and ValueError for a bad variable.
    """
    global _loaded, _visible
    with _lock:
        if _loaded is not None:
            _check_same_devices(config.read(visible_var).physical, visible_var)
            return _loaded
        import torch

        other = claimed_by()
        if other is not None:
            raise RuntimeError(f"torch's PrivateUse1 device is already claimed by {other!r}: one process holds one "
                               "PrivateUse1 backend, so sim cannot load beside it")
        settings = config.read(visible_var)
        from . import _extension, _kernels, racecheck, runtime

        extension = _extension.load()
        if torch._C._get_privateuse1_backend_name() == "privateuseone":
            torch.utils.rename_privateuse1_backend(runtime.DEVICE_TYPE)
        extension.init(len(settings.physical), settings.memory, config.CLOCK_KHZ)
        runtime._bind(extension, settings.physical)
        _visible = (settings.physical, visible_var)
        racecheck._bind(extension)
        if not hasattr(torch, runtime.DEVICE_TYPE):
            torch._register_device_module(runtime.DEVICE_TYPE, runtime)
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
        _keep.append(_kernels.register(extension, runtime.DEVICE_TYPE))
        from . import distributed

        distributed.register()
        from . import parallel

        parallel.register()
        from . import compile as compile_support

        compile_support.register()
        if settings.racecheck:
            racecheck.set_racecheck(True)
        atexit.register(_drain, extension)
        _loaded = runtime
        return runtime


def _check_same_devices(physical: tuple[int, ...], visible_var: str) -> None:
    if physical != _visible[0]:
        raise RuntimeError(f"sim was loaded seeing its physical devices {list(_visible[0])} ({_visible[1]}); "
                           f"{visible_var} names {list(physical)} now: set it before sim is first loaded")


def _drain(extension: Any) -> None:
    """At exit, let queued work finish before the interpreter is torn down under the workers."""
    for index in range(extension.device_count()):
        try:
            extension.synchronize(index)
        except Exception as exc:  # an asynchronous failure nobody synchronized on: say so, then exit
            print(f"torchdevice-sim: work queued on sim:{index} failed: {exc}", file=sys.stderr)


def __getattr__(name: str) -> Any:
    if name in ("plugin", "SimBackend"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'torchdevice_sim' has no attribute {name!r}")
