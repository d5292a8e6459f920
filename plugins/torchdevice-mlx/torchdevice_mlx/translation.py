"""Making translated code's tensors MLX-backed (installed by ``torchdevice.translate.patch``).

With the mlx backend active and translation on, a factory or ``Tensor.new_*`` given a source
device (``torch.zeros(..., device="cuda")``, ``device=0``), ``Tensor.to("cuda")`` / ``.to(0)``,
``.cuda()`` and ``Module.to("cuda")``/``.cuda()`` return
:class:`~torchdevice_mlx.tensor.MLXTensor`. A *source* device is a string or
``torch.device`` naming a translated type, a bare ordinal (the accelerator's, as
``torch.device(0)`` is ``cuda:0``), or the device object translation
returned for one (:data:`torchdevice.devices.host_target`: identity tells it
from a program's own ``torch.device("cpu")``, which stays a plain host tensor).
Under a translated default device (``torch.set_default_device("cuda")``,
``with torch.device("cuda"):``) factories given no device return MLXTensors too.
A placement MLX cannot hold (sparse, quantized, nested), by a factory or a move
(``.to("cuda")``, ``.cuda()``, a module's sparse buffer), stays on the host: it
warns once per API (:class:`HostPlacementWarning`) and is counted
(:func:`host_placements`, a ``run --report`` section).
``MLXTensor.cpu()`` / ``.to("cpu")`` return plain host tensors. Moves are
autograd functions, so gradients flow across them. ``torch.compile`` of an
``nn.Module`` with ``backend="mlx"`` or torch's default compiles it with MLX
(:mod:`torchdevice_mlx.compile`).
"""
from __future__ import annotations

import functools
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.utils._device
from torch._ops import OpOverload

from .bridge import to_mlx
from .layout import from_host
from .tensor import MLXTensor

#: a tensor class (Module.to's moves keep a Parameter a Parameter)
_T = TypeVar("_T", bound=torch.Tensor)

_sources: frozenset = frozenset()


class HostPlacementWarning(UserWarning):
    """A translated program placed a tensor on its device and it stayed a plain host tensor (torch on the CPU)."""


_left: Counter = Counter()  # api -> how many tensors placed on the translated device stayed on the host
_left_lock = threading.Lock()


def host_placements() -> dict[str, int]:
    """Placements on the translated device that gave plain host tensors, not MLX ones (api -> count)."""
    with _left_lock:
        return dict(_left)


def reset_host_placements() -> None:
    with _left_lock:
        _left.clear()


def _left_on_host(api: str, t: torch.Tensor, stacklevel: int = 3) -> None:
    """Count (and warn once per api) a tensor placed on the translated device that stays on the host."""
    with _left_lock:
        first = api not in _left
        _left[api] += 1
    if first:
        warnings.warn(f"torchdevice mlx: {api} made a {t.layout} tensor for the program's device that MLX cannot hold; "
                      "it stays a plain host tensor and its ops run in torch on the CPU", HostPlacementWarning,
                      stacklevel=stacklevel)


try:  # `torchdevice run --report` lists them (a core without the hook just has no section)
    from torchdevice import trace as _trace

    _trace.add_section("mlx: device placements left on the host (plain CPU tensors)", host_placements)
except (ImportError, AttributeError):
    pass


def _holdable(t: torch.Tensor) -> bool:
    """Whether MLX can hold ``t``'s data (a dense tensor)."""
    return t.layout == torch.strided and not t.is_quantized and not t.is_nested


def _placed(out: Any, api: str) -> Any:
    """A factory's result for the translated device: an MLXTensor, or noted as left on the host."""
    if not isinstance(out, torch.Tensor) or isinstance(out, MLXTensor):
        return out
    if not _holdable(out):
        _left_on_host(api, out)
        return out
    wrapped = MLXTensor(to_mlx(out))
    return wrapped.requires_grad_() if out.requires_grad else wrapped


def is_source(dev: object) -> bool:
    """Whether device argument ``dev`` asks for the translated (MLX) device: a source device's name
    or ``torch.device``, a bare ordinal (``device=0``, ``.to(rank)``: the accelerator's, as
    ``torch.device(0)`` is ``cuda:0``), or the device object translation returned for one."""
    if dev is None:
        return False
    from torchdevice import devices

    if dev is devices.host_target:
        return True
    if isinstance(dev, bytes):
        dev = dev.decode()
    if isinstance(dev, str):
        return dev.split(":")[0] in _sources
    if isinstance(dev, torch.device):
        return dev.type in _sources
    return devices.ordinal(dev) is not None


class ToMLX(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return MLXTensor(to_mlx(x))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.torch_cpu() if isinstance(grad, MLXTensor) else grad


class FromMLX(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: MLXTensor) -> torch.Tensor:
        return x.torch_cpu()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return ToMLX.apply(grad)


def to_mlx_tensor(t: torch.Tensor, api: str = "Tensor.to(device)") -> torch.Tensor:
    """``t`` as an MLXTensor (itself if it is one); autograd flows through the move. A tensor MLX cannot hold
    (sparse, quantized, nested) stays on the host, noted as placed there by ``api`` (a warning once, counted),
    as a factory's does."""
    if isinstance(t, MLXTensor) or not isinstance(t, torch.Tensor):
        return t
    if not _holdable(t):
        _left_on_host(api, t, stacklevel=4)  # above this function and the patched move: the program's line
        return t
    if not t.requires_grad or not torch.is_grad_enabled():
        return from_host(t)  # in t's dense layout: a channels_last tensor stays channels_last, as natively
    return ToMLX.apply(t)


def _factory(fn: Callable[..., Any], api: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        return _placed(out, api) if is_source(kwargs.get("device")) else out
    return factory


def _device_context(inner: Callable[..., Any]) -> Callable[..., Any]:
    """``DeviceContext.__torch_function__`` (``torch.set_default_device("cuda")``, ``with torch.device("cuda")``):
    a factory given no device under a translated default device gives an MLXTensor."""
    @functools.wraps(inner)
    def __torch_function__(self: Any, func: OpOverload, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        from torchdevice import devices

        injected = not (kwargs or {}).get("device") and self.device is devices.host_target
        out = inner(self, func, types, args, kwargs)
        if injected and func in torch.utils._device._device_constructors():
            return _placed(out, f"torch.{getattr(func, '__name__', func)} under a default device")
        return out
    return __torch_function__


def _tensor_to(inner: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(inner)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = inner(self, *args, **kwargs)
        dev = kwargs.get("device", args[0] if args else None)
        return to_mlx_tensor(out, "Tensor.to(device)") if is_source(dev) else out
    return to


def _mlx_to(self: MLXTensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``MLXTensor.to``: a dtype change stays in MLX; an explicit host device leaves it."""
    dev = kwargs.get("device", args[0] if args and not isinstance(args[0], (torch.dtype, torch.Tensor)) else None)
    copy = kwargs.pop("copy", False)
    if len(args) >= 3 or (len(args) == 2 and not isinstance(args[1], torch.dtype)):
        # to(dtype, non_blocking, copy) / to(device, dtype, non_blocking, copy) / to(tensor, non_blocking, copy)
        flags = args[1:] if not isinstance(args[1], torch.dtype) else args[2:]
        copy = copy or bool(flags[1:2] and flags[1])
        args = args[:len(args) - len(flags)] + tuple(flags[:1])
    device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    out: torch.Tensor = self
    if dtype is not None and dtype != self.dtype:
        out = torch.Tensor.to(out, dtype)  # the real method: an aten._to_copy on MLX (its layout kept)
    elif copy:
        out = torch.Tensor.clone(out)  # copy=True: never the tensor itself (batch_norm's decomposition relies on it)
    if memory_format is not None and memory_format is not torch.preserve_format \
            and not out.is_contiguous(memory_format=memory_format):
        out = torch.Tensor.contiguous(out, memory_format=memory_format)  # to(memory_format=torch.channels_last)
    if dev is not None and not is_source(dev) and device is not None and device.type == "cpu":
        out = FromMLX.apply(out)
    return out


def _mlx_cpu(self: MLXTensor, memory_format: torch.memory_format | None = torch.preserve_format) -> torch.Tensor:
    return FromMLX.apply(self)


def _tensor_move(source: str) -> Callable[..., torch.Tensor]:
    """``Tensor.cuda`` (``Tensor.<source>``) while translating to mlx."""
    api = f"Tensor.{source}()"

    def move(self: torch.Tensor, device: torch.device | str | None = None, non_blocking: bool = False,
             memory_format: torch.memory_format | None = torch.preserve_format) -> torch.Tensor:
        return to_mlx_tensor(self, api)
    move.__name__ = move.__qualname__ = source
    return move


def module_to_mlx(module: torch.nn.Module) -> torch.nn.Module:
    """Make every parameter and buffer of ``module`` MLX-backed, in place; returns ``module``.

    Done by hand rather than through ``Module._apply``: that assigns ``param.data`` when it
    cannot tell the new type is incompatible, leaving a Parameter with no real storage.
    """
    moved: dict[int, Any] = {}  # id(old) -> new: a tensor shared by two modules (tied weights) stays shared

    def move(old: _T, make: Callable[[_T], _T]) -> _T:
        new = moved.get(id(old))
        if new is None:
            if not _holdable(old):  # a sparse buffer ...: stays on the host, as a factory's placement does
                _left_on_host("Module.to(device)", old, stacklevel=5)
                new = moved[id(old)] = old
            else:
                new = moved[id(old)] = make(old)
        return new

    def new_param(param: torch.nn.Parameter) -> torch.nn.Parameter:
        out = torch.nn.Parameter(from_host(param.detach()), requires_grad=param.requires_grad)
        out.__dict__.update(param.__dict__)  # attributes programs set on parameters (sharding, no-decay marks ...)
        return out

    for mod in module.modules(remove_duplicate=False):
        for name, param in list(mod._parameters.items()):
            if param is not None and not isinstance(param, MLXTensor):
                mod._parameters[name] = move(param, new_param)
        for name, buf in list(mod._buffers.items()):
            if buf is not None and not isinstance(buf, MLXTensor):
                mod._buffers[name] = move(buf, from_host)
    return module


def _module_move(self: torch.nn.Module, device: torch.device | str | None = None) -> torch.nn.Module:
    return module_to_mlx(self)


def _module_to(inner: Callable[..., Any]) -> Callable[..., Any]:
    # torch's Module.to re-parses its device (a new object), so the source is recognised here
    @functools.wraps(inner)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = inner(self, *args, **kwargs)
        dev = kwargs.get("device", args[0] if args else None)
        return module_to_mlx(out) if is_source(dev) else out
    return to


#: torch.compile backends an nn.Module is compiled with by MLX under the mlx backend: "mlx", and torch's
#: default, inductor, which cannot compile MLX tensors (the program asked for its device's compiler)
MLX_COMPILE_BACKENDS = ("mlx", "inductor")


def _compile(inner: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(inner)
    def compile(model: Any = None, **kwargs: Any) -> Any:  # model: a module or a function, or None
        if model is None:  # @torch.compile(backend=...) as a decorator factory
            return lambda fn: compile(fn, **kwargs)
        backend = kwargs.get("backend", "inductor")
        if isinstance(model, torch.nn.Module) and backend in MLX_COMPILE_BACKENDS and not kwargs.get("disable"):
            from .compile import compile_module

            return compile_module(model, **kwargs)
        from .compile import hide_dispatch_from_dynamo, register_dynamo_backend

        hide_dispatch_from_dynamo()  # dynamo may meet MLX tensors: it must not trace torchdevice's dispatch
        if backend == "mlx":
            register_dynamo_backend()
        return inner(model, **kwargs)
    return compile


def install(patcher: Any, target: Any) -> None:
    """Wrap factories and moves so source devices give MLXTensor (see the module docstring)."""
    from torchdevice import devices

    global _sources
    _sources = frozenset(target.sources)
    # wrap what the core's translation installs (staged, so read through the patcher)
    for name in devices.FACTORIES:  # every factory whose device= translation maps
        fn = patcher.get(torch, name)
        if fn is not None:
            patcher.set(torch, name, _factory(fn, f"torch.{name}(device=)"))
    context = torch.utils._device.DeviceContext
    patcher.set(context, "__torch_function__", _device_context(patcher.get(context, "__torch_function__")))
    for name in devices.TENSOR_NEW:  # host_tensor.new_zeros(..., device="cuda")
        patcher.set(torch.Tensor, name, _factory(patcher.get(torch.Tensor, name), f"Tensor.{name}(device=)"))
    patcher.set(torch, "compile", _compile(patcher.get(torch, "compile")))
    patcher.set(torch.Tensor, "to", _tensor_to(patcher.get(torch.Tensor, "to")))
    patcher.set(torch.nn.Module, "to", _module_to(patcher.get(torch.nn.Module, "to")))
    for source in target.sources:
        if hasattr(torch.Tensor, source):
            patcher.set(torch.Tensor, source, _tensor_move(source))
        if hasattr(torch.nn.Module, source):
            patcher.set(torch.nn.Module, source, _module_move)


# An MLXTensor leaves MLX on an explicit host device whether or not translation is on (methods set at run time:
# they are this module's, above the class's).
for _name, _method in (("to", _mlx_to), ("cpu", _mlx_cpu)):
    setattr(MLXTensor, _name, _method)
