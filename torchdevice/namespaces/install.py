"""Installing the namespaces: :func:`install` builds every fronted object from the table and patches
``torch.<ns>`` (and its submodules, ``torch.backends.<ns>``, ``torch.cuda.nvtx``, ``torch.cuda.comm``,
``torch.get_device_module``) through the Patcher; :func:`uninstall`, :func:`installed`."""
from __future__ import annotations

import functools
from typing import Any, cast

import torch

from .. import boundary, comm
from .. import trace as _trace
from .._patching import Patcher
from ..router import Target
from . import accelerator, legacy
from .nvtx import _nvtx_state
from .rules import NATIVE, TRANSLATED, UNSUPPORTED
from .statuses import _ORIGINAL_NAMES, COMM_FUNCTIONS, api_status, comm_status
from .table import NAMESPACES, NVTX_SPECS, SPECS, SUBMODULES, Builder, Spec
from .wrapping import _raiser, _traced_class, _unsupported_class, _wrap, trace_stream_classes

_installed: dict[str, dict[str, Any]] | None = None


def _build(target: Target, ns: str, name: str, spec: Spec) -> Any:
    """The object ``torch.<ns>.<name>`` becomes; None for a native one (left untouched)."""
    api = f"torch.{ns}.{name}"
    status_, note = spec.rule(target, ns)
    if status_ is NATIVE and spec.build is None:
        return None
    if status_ is UNSUPPORTED or spec.build is None:
        if spec.kind == "value":
            return None  # an unsupported value attribute is left as torch has it
        if spec.kind == "class":
            return _unsupported_class(api, target.name, note, name)
        return _raiser(api, target.name, note, name.rpartition(".")[2])
    built = spec.build(target, ns, name.rpartition(".")[2])
    if spec.kind == "class":
        if name in ("Stream", "Event") or isinstance(built, legacy.LegacyTensorType):
            return built  # the backend's own classes, as they are; legacy types note their own construction
        return _traced_class(built, api, status_, note)
    if spec.kind == "value":
        return built
    return _wrap(api, status_, note, built, name.rpartition(".")[2])


def _install_backends_flags(patcher: Patcher, target: Target, ns: str, objects: dict[str, Any]) -> None:
    """``torch.backends.<ns>.is_built`` (and MPS's ``is_available``) agree with the fronted namespace.

    A program never sees ``is_available()`` True with ``is_built()`` False, a pair real torch
    never reports; torch's own code keeps the real flags (:mod:`torchdevice.boundary`).
    """
    flags = getattr(torch.backends, ns, None)
    if flags is None or "is_available" not in objects:
        return
    if ns == "mps" and hasattr(flags, "is_available"):
        # MPS-written code asks torch.backends.mps.is_available() before choosing "mps"
        status_, note = SPECS["is_available"].rule(target, ns)
        built = _wrap(f"torch.backends.{ns}.is_available", status_, note,
                      cast(Builder, SPECS["is_available"].build)(target, ns, "is_available"), "is_available")
        patcher.set(flags, "is_available", boundary.split(built, patcher.get(flags, "is_available")))
    real_is_built = patcher.get(flags, "is_built", None)
    if real_is_built is None:
        return
    available = target.available_for(ns)

    def is_built() -> bool:
        return available or bool(real_is_built())

    note = "True while the fronted is_available() is True (a build that reports a device is built for it); " \
        "otherwise torch's own answer; torch's own code always gets torch's answer"
    patcher.set(flags, "is_built", boundary.split(
        _wrap(f"torch.backends.{ns}.is_built", TRANSLATED, note, is_built, "is_built"), real_is_built))


def install(patcher: Patcher, target: Target) -> None:
    """Make every namespace in ``target.sources`` front the backend ``target`` (see the module docstring);
    the builders keep what they build in ``target.state``."""
    global _installed
    installed: dict[str, dict[str, Any]] = {}
    for ns in NAMESPACES:
        if ns not in target.sources:
            continue
        module = getattr(torch, ns)
        submodules = [m for m in (getattr(module, s, None) for s in SUBMODULES[ns]) if m is not None]
        objects: dict[str, Any] = {}
        # classes first: the builders of stream() and device_of close over them
        order = sorted(SPECS, key=lambda n: (SPECS[n].kind != "class", n != "device", n))
        for name in order:
            if name not in _ORIGINAL_NAMES[ns]:
                continue
            # The target's own namespace (cuda on CUDA): torch rewrites value attributes such as
            # default_generators when the device initialises, so they stay torch's own.
            native_value = SPECS[name].kind == "value" and getattr(getattr(target.rng, "ns", None), "module", None) is module
            obj = None if native_value else _build(target, ns, name, SPECS[name])
            target.state[f"{ns}.{name}"] = obj if obj is not None else getattr(module, name, None)
            if obj is not None:
                objects[name] = obj
        if ns == "mtia" and "classproperty" not in vars(module):
            # the catalog lists torch.mtia.classproperty, which torch 2.13 dropped: supply torch.cuda's helper
            from torch._utils import classproperty

            objects["classproperty"] = classproperty
        for name, obj in objects.items():
            sub, dot, leaf = name.partition(".")
            if dot:  # a submodule's own function ("memory._snapshot"): patched there only
                patcher.set(getattr(module, sub), leaf, obj)
                continue
            if name in boundary.MACHINE_QUERIES and callable(obj):
                obj = objects[name] = boundary.split(obj, patcher.get(module, name))
            patcher.set(module, name, obj)
            for sub in submodules:
                if name in vars(sub):
                    patcher.set(sub, name, obj)
        _install_backends_flags(patcher, target, ns, objects)
        if ns == target.source:
            trace_stream_classes(patcher, target, ns)
        if ns == "cuda":
            _install_nvtx(patcher, target)
            _install_comm(patcher, target)
            legacy.install(patcher, target, ns)
        installed[ns] = objects
    if target.sources:
        _install_get_device_module(patcher, target)
        accelerator.install(patcher, target)
    _installed = installed
    _trace.quiet = frozenset(  # the other families answer "not here", as on the source machine: not listed
        api for ns in target.sources if ns != target.source
        for api in ([f"torch.{ns}.{name}" for name in _trace.PROBES]
                    + [f"torch.backends.{ns}.{name}" for name in _trace.BACKEND_PROBES]))


def _install_get_device_module(patcher: Patcher, target: Target) -> None:
    """``torch.get_device_module("cuda")`` -> the fronted ``torch.cuda``, not the target's module.

    torch resolves the string through ``torch.device``, which translation maps
    to the target (``torch.cpu``, lacking RNG functions): ``torch.random.fork_rng()``
    (whose default device type is ``"cuda"``) would break.
    """
    original = torch.get_device_module
    sources = target.sources
    api = "torch.get_device_module"
    how = "{}: {}".format(*cast("tuple[object, str]", api_status(target, api)))

    def get_device_module(device: Any = None) -> Any:
        if device.__class__ is str:
            kind = device.partition(":")[0]
            if kind in sources:
                if _trace.active:
                    _trace.note(api, how)
                return getattr(torch, kind)
        return original(device)

    functools.update_wrapper(get_device_module, original)
    patcher.set(torch, "get_device_module", get_device_module)


def _install_nvtx(patcher: Patcher, target: Target) -> None:
    nvtx = torch.cuda.nvtx
    for name in ("range_push", "range_pop", "range_start", "range_end", "mark", "range"):
        spec = NVTX_SPECS[name]
        status_, note = spec.rule(target, "cuda")
        built = cast(Builder, spec.build)(target, "cuda", name)  # every nvtx row has a builder
        target.state[f"nvtx.{name}"] = built
        obj = _wrap(f"torch.cuda.nvtx.{name}", status_, note, built, name)
        patcher.set(nvtx, name, obj)


def _install_comm(patcher: Patcher, target: Target) -> None:
    """``torch.cuda.comm.<fn>`` -> :mod:`torchdevice.comm`'s function over the backend's collectives; and
    ``torch.nn.parallel.comm.<fn>``, where torch.cuda.comm's functions come from and ``nn.DataParallel``
    calls them (its scatter, gather and replication: ``torch._C._scatter`` ... exist in CUDA builds only)."""
    import torch.cuda.comm as cuda_comm
    import torch.nn.parallel.comm as parallel_comm
    for name in COMM_FUNCTIONS:
        impl = getattr(comm, name, None)
        if not callable(impl) or name not in vars(cuda_comm):
            continue
        api = f"torch.cuda.comm.{name}"
        status_, note = comm_status(target, name)
        if status_ is UNSUPPORTED:
            obj = _raiser(api, target.name, note, name)
        else:
            obj = _wrap(api, status_, note, impl, name)
        patcher.set(cuda_comm, name, obj)
        if vars(parallel_comm).get(name) is vars(cuda_comm)[name]:
            patcher.set(parallel_comm, name, obj)


def uninstall() -> None:
    """Forget the installed objects (the Patcher has already restored torch)."""
    global _installed
    _installed = None
    try:
        del _nvtx_state.stack
    except AttributeError:
        pass


def installed() -> dict[str, dict[str, Any]] | None:
    """What :func:`install` put in place, per namespace (None when not installed)."""
    return _installed
