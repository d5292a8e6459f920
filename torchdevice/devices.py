"""Device translation: wherever a device enters torch, map source devices to the target.

Installed by :func:`torchdevice.translate.patch`. A *source* device is one of
``cuda``, ``mps``, ``xpu``, ``mtia`` other than the target's own type; it maps
to the active backend's device with its index kept (``"cuda:1"`` → ``mps:1``),
except that a ``cpu`` target has no indices (CPU tensors report
``device(type='cpu')``), so there ``"cuda:0"`` → ``cpu`` once the index is
checked. An index beyond the device count raises
:class:`~torchdevice.errors.InvalidDeviceError` (a ``torch.AcceleratorError``,
as CUDA raises). ``"cpu"`` is never moved.

Where devices enter, and what is patched:

* ``torch.device`` -- replaced by a class whose metaclass maps on construction
  and forwards ``isinstance``/``issubclass``/``|`` (typing) to the real class,
  so ``torch.device | None`` and every ``isinstance(x, torch.device)`` keep
  working; pickles of devices name ``torch.device`` (a ``copyreg`` entry);
* factories taking ``device=`` (``torch.zeros``, ``torch.tensor``, ...,
  ``*_like``), ``Tensor.new_*``, ``torch.Generator(device=)``,
  ``torch.set_default_device``;
* ``Tensor.to`` / ``.cuda()`` / ``.xpu()`` / ``.mtia()``, ``Tensor.is_cuda`` and
  friends (True for tensors on the target device: they are where "cuda"
  tensors of the program live); ``nn.Module.to`` / ``.cuda()`` / ``.xpu()`` /
  ``.mtia()`` / ``.to_empty()``;
* ``torch.load`` -- ``map_location`` strings, devices and dict values are
  mapped; with no ``map_location``, storages saved on a source device are
  restored on the target;
* pinned memory on a ``cpu`` target: ``Tensor.pin_memory()`` returns the
  tensor (host memory is already where the device reads it), and neither
  ``DataLoader(pin_memory=True)`` nor a factory's ``pin_memory=True``
  (``torch.empty(..., pin_memory=True)``, as safetensors stages a ``device="cuda"``
  load) pins.

Hot paths do one dict lookup (a cache from device argument to mapped device,
rebuilt on every install) and, only when tracing is on, note the call site.
"""
from __future__ import annotations

import copyreg
import functools
import operator
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn
import torch.utils._device
import torch.utils.data

from . import trace
from .boundary import in_torch
from .errors import InvalidDeviceError
from .vocabulary import RealDevice as _Device

if TYPE_CHECKING:
    from torch.types import Device

    from ._patching import Patcher
    from .translate import Target

    _Fn = Callable[..., Any]  #: a torch function or method, and its wrapper

_Generator = torch.Generator  # the real class, captured before any patch

#: torch functions taking ``device=`` that are patched (those present in this torch).
FACTORIES = (
    "arange", "as_tensor", "asarray", "bartlett_window", "blackman_window", "empty",
    "empty_like", "empty_permuted", "empty_quantized", "empty_strided", "eye", "from_file",
    "full", "full_like", "hamming_window", "hann_window", "kaiser_window", "linspace",
    "logspace", "normal", "ones", "ones_like", "rand", "rand_like", "randint",
    "randint_like", "randn", "randn_like", "randperm", "range", "scalar_tensor",
    "sparse_bsc_tensor", "sparse_bsr_tensor", "sparse_compressed_tensor",
    "sparse_coo_tensor", "sparse_csc_tensor", "sparse_csr_tensor", "tensor",
    "tril_indices", "triu_indices", "zeros", "zeros_like",
)
TENSOR_NEW = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")

# Caches hold and are asked only for arguments of these exact types: 1 == 1.0 == True ==
# np.int64(1) hash alike, so a value-keyed lookup of another type would get another's answer.
_CACHEABLE = frozenset({str, int, _Device})
_cache: dict[object, object] = {}  # device argument -> mapped real torch.device (or the argument itself)
_device_cache: dict[object, torch.device] = {}  # torch.device(arg) -> the real torch.device it returns
_translated: set[object] = set()  # keys of _cache that were source devices (for tracing)
_target: Target = None  # type: ignore[assignment]  # set by install(), before any mapping
_saved_pickler: Callable[[Any], Any] | None = None
#: The one device object a source device maps to on a non-indexed target (reset by install).
host_target = _Device("cpu")


# -- mapping ---------------------------------------------------------------------------


def _mapped_index(index: int | None) -> torch.device:
    """The real target device for source index ``index`` (None: the current device)."""
    t = _target
    if index is not None and not 0 <= index < t.device_count:
        raise InvalidDeviceError(index, t.device_count, t.name)
    if not t.indexed:  # one object, so a backend can tell a translated device from a typed "cpu"
        return host_target
    return _Device(t.device_type) if index is None else _Device(t.device_type, index)


def ordinal(device: Any) -> int | None:
    """``device`` as a bare device ordinal (int, IntEnum, numpy integer), else None.

    A bare ordinal is the accelerator's (``torch.device(0)`` is ``cuda:0``), so translation maps
    it as a source device. bool, float and tensors are not ordinals: torch rejects them
    (TypeError) or reads them as something else, so they are left to torch.
    """
    cls = type(device)
    if cls is bool or cls.__name__ == "bool_" or isinstance(device, torch.Tensor):
        return None
    try:
        return operator.index(device)
    except TypeError:
        return None


def _map_ordinal(index: int) -> torch.device:
    if index < 0:
        raise RuntimeError(f"Device index must not be negative, got {index}")  # as torch says
    if index >= 2**63:
        return _Device("cpu", index)  # torch's own overflow error
    return _mapped_index(index)  # a bare ordinal means the accelerator's


def _compute(device: object) -> tuple[object, bool]:
    if isinstance(device, _Device):
        real = device
    elif isinstance(device, (str, bytes)):
        real = _Device(device.decode() if isinstance(device, bytes) else str.__str__(device))
    else:
        index = ordinal(device)
        if index is None:
            return device, False  # not a device argument we know: leave it to torch
        return _map_ordinal(index), True
    if real.type in _target.sources:
        return _mapped_index(real.index), True
    return real if isinstance(device, _Device) else device, False


def map_device(device: object) -> object:
    """Return ``device`` translated for the current target (unchanged when not a source device)."""
    cacheable = type(device) in _CACHEABLE
    if cacheable:
        try:
            return _cache[device]
        except KeyError:
            pass
    mapped, translated = _compute(device)
    if cacheable and len(_cache) < 4096:
        _cache[device] = mapped
        if translated:
            _translated.add(device)
    return mapped


def _note(device: object, api: str) -> None:
    try:
        if device in _translated:
            trace.note(api, "translated")
    except TypeError:
        pass


# torch.compile: dynamo traces the program's code, ours included. It calls map_device at trace
# time and bakes the mapped device into the graph (assume_constant_result's marker, set without
# importing dynamo), and wrappers give it a plain version to trace (``_torchdynamo_inline``):
# tracing the caches would guard on their contents and recompile as they grow.
map_device._dynamo_marked_constant = True  # type: ignore[attr-defined]


# -- torch.device and torch.Generator replacements ------------------------------------------


class _ProxyMeta(type):
    """Metaclass of the stand-ins for C types that cannot be subclassed or patched."""

    _real: type

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._real)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._real)

    def __or__(cls, other: Any) -> Any:
        return cls._real | other

    def __ror__(cls, other: Any) -> Any:
        return other | cls._real

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls._real, name)

    def __repr__(cls) -> str:
        return repr(cls._real)

    # torch code reading ``torch.device`` at run time compares it with the class it captured at
    # import (torch.fx: ``obj != torch.device``), which is torch's own (torchdevice.boundary)
    def __eq__(cls, other: object) -> bool:
        return other is cls or other is cls._real

    def __ne__(cls, other: object) -> bool:
        return not (other is cls or other is cls._real)

    def __hash__(cls) -> int:
        return hash(cls._real)


class _DeviceMeta(_ProxyMeta):
    def __call__(cls, *args: Any, **kwargs: Any) -> torch.device:
        single = not kwargs and len(args) == 1
        if single and args[0] is host_target:
            return host_target  # torch.device(dev) of the object a source device mapped to stays that object
        if single and type(args[0]) in _CACHEABLE:
            try:
                result = _device_cache[args[0]]
            except KeyError:
                pass
            else:
                if trace.active:
                    _note(args[0], "torch.device")
                return result
        if single and ordinal(args[0]) is not None:
            # torch.device(0) / torch.device(local_rank): the accelerator's ordinal
            if trace.active:
                trace.note("torch.device", "translated")
            real = _map_ordinal(ordinal(args[0]))  # type: ignore[arg-type]  # not None: tested above
            if type(args[0]) is int and len(_device_cache) < 4096:
                _device_cache[args[0]] = real
            return real
        real = _Device(*args, **kwargs)
        translated = real.type in _target.sources
        if translated:
            if trace.active:
                trace.note("torch.device", "translated")
            real = _mapped_index(real.index)
        if single and type(args[0]) in _CACHEABLE and len(_device_cache) < 4096:
            _device_cache[args[0]] = real
        return real


class device(metaclass=_DeviceMeta):
    """Stand-in for ``torch.device`` while translating (see :mod:`torchdevice.devices`)."""

    _real = _Device


class _GeneratorMeta(_ProxyMeta):
    def __call__(cls, device: Device = "cpu", *args: Any, **kwargs: Any) -> torch.Generator:
        if trace.active:
            _note(device, "torch.Generator")
        return _Generator(map_device(device), *args, **kwargs)


class Generator(metaclass=_GeneratorMeta):
    """Stand-in for ``torch.Generator`` while translating."""

    _real = _Generator


for _proxy in (device, Generator):
    _proxy.__module__ = "torch"
    _proxy.__qualname__ = _proxy.__name__ = _proxy._real.__name__
    _proxy.__doc__ = _proxy._real.__doc__


def _reduce_device(dev: torch.device) -> tuple[type, tuple[str] | tuple[str, int]]:
    # pickle names the class by "torch.device": the stand-in while patched, torch's own class while
    # torch's machinery runs unpatched (torchdevice.boundary)
    return (torch.device, (dev.type,) if dev.index is None else (dev.type, dev.index))


# -- wrappers -------------------------------------------------------------------------------


def _factory(fn: _Fn, api: str, unpin: bool = False) -> _Fn:
    """A factory taking ``device=``; with ``unpin`` (a host target), ``pin_memory=True`` is a no-op as
    ``Tensor.pin_memory()`` is: loaders staging host buffers for a CUDA copy (safetensors' ``load_file(device=
    "cuda")``, ``torch.empty(..., device="cpu", pin_memory=True)``) would otherwise fail without an accelerator."""
    cache, cacheable = _cache, _CACHEABLE

    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        dev = kwargs.get("device")
        if dev is not None:
            if dev.__class__ in cacheable:
                try:
                    kwargs["device"] = cache[dev]
                except KeyError:
                    kwargs["device"] = map_device(dev)
            else:
                kwargs["device"] = map_device(dev)
            if trace.active:
                _note(dev, api)
        if unpin and kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
            if trace.active:
                trace.note(f"{api.partition('(')[0]}(pin_memory=True)", "no-op")
        return fn(*args, **kwargs)

    def traced(*args: Any, **kwargs: Any) -> Any:
        dev = kwargs.get("device")
        if dev is not None:
            kwargs["device"] = map_device(dev)  # called at trace time: a constant (see _for_dynamo)
        if unpin and kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        return fn(*args, **kwargs)

    factory._torchdynamo_inline = traced  # type: ignore[attr-defined]
    return factory


def _positional_device(fn: _Fn, api: str) -> _Fn:
    """Wrap a method whose first positional argument or ``device=`` may be a device (``.to``)."""
    cache = _cache
    Device = _Device

    @functools.wraps(fn)
    def to(self: torch.Tensor | torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if args:
            first = args[0]
            cls = first.__class__
            if cls is str or cls is Device or cls is int:
                try:
                    mapped = cache[first]
                except KeyError:
                    mapped = map_device(first)
            elif isinstance(first, (str, bytes)) or ordinal(first) is not None:
                mapped = map_device(first)  # str/int subclasses (enums), numpy scalars, bytes
            else:
                mapped = first  # a dtype, a tensor, or a type torch rejects itself
            if mapped is not first:
                args = (mapped, *args[1:])
                if trace.active:
                    _note(first, api)
        dev = kwargs.get("device")
        if dev is not None:
            kwargs["device"] = map_device(dev)
            if trace.active:
                _note(dev, api)
        return fn(self, *args, **kwargs)

    return to


def _move_method(source: str, kind: str, to: _Fn) -> _Fn:
    """``Tensor.cuda(device=None, ...)`` / ``Module.cuda(device=None)`` as a ``.to`` to the target."""
    api = f"{kind}.{source}()"

    def move(self: torch.Tensor | torch.nn.Module, device: Device = None, *args: Any, **kwargs: Any) -> Any:
        if trace.active:
            trace.note(api, "translated")
        if device is None:
            target = map_device(source)
        elif isinstance(device, int) and not isinstance(device, bool):
            target = map_device(device)
        else:
            target = map_device(_Device(device))
        if kind == "Module":
            return to(self, target)
        non_blocking = kwargs.pop("non_blocking", args[0] if args else False)
        return to(self, target, non_blocking=non_blocking, **kwargs)

    move.__name__ = source
    move.__doc__ = f"Translated ``{kind}.{source}()``: moves to the active torchdevice backend."
    return move


def _is_source_property(source: str, device_type: str, real: Any) -> property:
    api = f"Tensor.is_{source}"
    real_get = real.__get__

    def getter(self: torch.Tensor) -> bool:
        # all of torch's own code sees the truth (torchdevice.boundary): it routes `is_cuda`
        # tensors into CUDA-only kernels, on the program's behalf too.
        if in_torch(sys._getframe(1).f_code.co_filename):
            return real_get(self)
        if trace.active:
            trace.note(api, "translated")
        return self.device.type == device_type

    return property(
        getter,
        doc=f"Translated ``Tensor.is_{source}``: True on the target device ({device_type}) for "
        "user code; torch's own code sees the real value.",
    )


def _record_stream_noop(self: torch.Tensor, stream: object) -> None:
    """Translated ``Tensor.record_stream``: a no-op on a host-synchronous target.

    It tells a caching allocator not to reuse the memory before ``stream``'s
    work is done; on a host target that work is done when its call returns.
    """
    if trace.active:
        trace.note("Tensor.record_stream", "no-op")


def _keeping_ties(to: _Fn, device_type: str) -> _Fn:
    """``Module.to`` that keeps shared parameters shared on a PrivateUse1 target.

    torch moves a parameter in place (``param.data = moved``) only between device types whose
    tensors it deems shallow-copy compatible: CPU, CUDA, MPS, HIP, XPU, HPU, MTIA. Onto a
    PrivateUse1 device it makes a new Parameter per module instead, so a weight two modules share
    (BERT's decoder bias, tied embeddings) stops being shared and one of them never gets a
    gradient. On CUDA it stays shared: for such a target the move swaps each parameter's contents
    in place instead (torch's own ``set_swap_module_params_on_conversion``), keeping every identity.
    """
    if device_type != torch._C._get_privateuse1_backend_name():
        return to

    @functools.wraps(to)
    def to_keeping_ties(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        before = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            return to(self, *args, **kwargs)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)

    return to_keeping_ties


def _module_to_empty(fn: _Fn) -> _Fn:
    @functools.wraps(fn)
    def to_empty(self: torch.nn.Module, *, device: Device, recurse: bool = True) -> torch.nn.Module:
        return fn(self, device=map_device(device), recurse=recurse)

    return to_empty


def _load(fn: _Fn) -> _Fn:
    sources = _target.sources

    def restore_on_target(storage: Any, location: str) -> Any:
        if location.partition(":")[0] in sources:
            mapped = map_device(location)
            return torch.serialization.default_restore_location(storage, str(mapped))
        return None  # torch's default restore

    @functools.wraps(fn)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if map_location is None:
            map_location = restore_on_target
        elif isinstance(map_location, (str, _Device)):
            map_location = map_device(map_location)
            if isinstance(map_location, _Device):
                map_location = str(map_location)
        elif isinstance(map_location, dict):
            map_location = _remap_table(map_location, sources)
        if trace.active:
            trace.note("torch.load(map_location=)", "translated")
        return fn(f, map_location, *args, **kwargs)

    return load


def _remap_table(table: dict, sources: Collection[str]) -> Callable[[Any, str], Any]:
    """``map_location={"cuda:1": "cuda:0"}`` as a function: a location the table misses (a
    checkpoint saved from another rank's device) goes to the target, as with no table."""
    table = {k: str(map_device(v)) if isinstance(v, (str, _Device)) else v for k, v in table.items()}

    def restore(storage: Any, location: str) -> Any:
        found = table.get(location, location)
        if isinstance(found, str) and found.partition(":")[0] in sources:
            found = str(map_device(found))
        return torch.serialization.default_restore_location(storage, found)

    return restore


def _set_default_device(fn: _Fn) -> _Fn:
    @functools.wraps(fn)
    def set_default_device(device: Device) -> None:
        if trace.active:
            _note(device, "torch.set_default_device")
        return fn(None if device is None else map_device(device))

    return set_default_device


def _pin_memory_noop(self: torch.Tensor, device: Device = None) -> torch.Tensor:
    """Translated ``Tensor.pin_memory()``: a no-op on a CPU target (host memory is the device's)."""
    if trace.active:
        trace.note("Tensor.pin_memory", "no-op")
    return self


def _dataloader_init(fn: _Fn) -> _Fn:
    @functools.wraps(fn)
    def __init__(self: torch.utils.data.DataLoader, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
            if trace.active:
                trace.note("DataLoader(pin_memory=True)", "no-op")
        elif len(args) > 7 and args[7]:
            args = (*args[:7], False, *args[8:])
        return fn(self, *args, **kwargs)

    return __init__


# -- install -----------------------------------------------------------------------------


def install(patcher: Patcher, target: Target) -> None:
    """Patch every place a device enters torch (see the module docstring)."""
    global _target, _saved_pickler, host_target
    _target = target
    host_target = _Device(target.device_type)
    _cache.clear()
    _device_cache.clear()
    _translated.clear()
    for name in ("cpu", _Device("cpu"), target.device_type):
        map_device(name)
    for source in target.sources:  # warm the cache for the common spellings (device 0's where there is one)
        indexed = (f"{source}:0", _Device(source, 0), 0) if target.device_count else ()
        for spelling in (source, _Device(source), *indexed):
            map_device(spelling)

    patcher.set(torch, "device", device)
    patcher.set(torch, "Generator", Generator)
    _saved_pickler = copyreg.dispatch_table.get(_Device)
    copyreg.pickle(_Device, _reduce_device)

    # torch's device context (`with torch.device("meta")`, set_default_device) recognises the
    # real factories by identity in a set cached on first use: build it before they are wrapped.
    torch.utils._device._device_constructors()
    host = target.device_type == "cpu"  # pinned memory is a no-op there
    for name in FACTORIES:
        fn = getattr(torch, name, None)
        if fn is not None:
            patcher.set(torch, name, _factory(fn, f"torch.{name}(device=)", host))
    for name in TENSOR_NEW:
        patcher.set(torch.Tensor, name, _factory(getattr(torch.Tensor, name), f"Tensor.{name}(device=)", host))
    tensor_to = patcher.set(torch.Tensor, "to", _positional_device(torch.Tensor.to, "Tensor.to"))
    module_to = _keeping_ties(torch.nn.Module.to, target.device_type)  # what .cuda() calls, the target mapped
    patcher.set(torch.nn.Module, "to", _keeping_ties(_positional_device(torch.nn.Module.to, "Module.to"), target.device_type))
    patcher.set(torch.nn.Module, "to_empty", _module_to_empty(torch.nn.Module.to_empty))
    for source in target.sources:
        if hasattr(torch.Tensor, source):
            patcher.set(torch.Tensor, source, _move_method(source, "Tensor", tensor_to))
        if hasattr(torch.nn.Module, source):
            patcher.set(torch.nn.Module, source, _move_method(source, "Module", module_to))
        if hasattr(torch.Tensor, f"is_{source}"):
            real = vars(torch._C.TensorBase)[f"is_{source}"]
            patcher.set(torch.Tensor, f"is_{source}", _is_source_property(source, target.device_type, real))

    patcher.set(torch, "load", _load(torch.load))
    patcher.set(torch, "set_default_device", _set_default_device(torch.set_default_device))
    if target.device_type == "cpu":
        patcher.set(torch.Tensor, "pin_memory", _pin_memory_noop)
        patcher.set(torch.Tensor, "record_stream", _record_stream_noop)
        loader = torch.utils.data.DataLoader
        patcher.set(loader, "__init__", _dataloader_init(loader.__init__))


def uninstall() -> None:
    """Undo what :func:`install` did outside attributes (the copyreg entry)."""
    if _saved_pickler is None:
        copyreg.dispatch_table.pop(_Device, None)
    else:
        copyreg.dispatch_table[_Device] = _saved_pickler
    _cache.clear()
    _device_cache.clear()
    _translated.clear()
