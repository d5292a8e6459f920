"""AMP for translated code: autocast and GradScaler run real mixed precision on the target.

On a machine without CUDA, ``torch.autocast("cuda")`` and
``torch.amp.GradScaler("cuda")`` warn and disable themselves, so CUDA-written
training silently runs in full precision without loss scaling. While
translation is on, the source device types (``cuda``, and ``mps``/``xpu``/
``mtia`` where they are not the target) are mapped to the target's device
type instead, so the program gets the target's real autocast and a
GradScaler that really scales:

* ``torch.autocast(dev)`` = ``torch.amp.autocast(dev)``, its subclasses
  ``torch.cuda.amp.autocast(...)`` and the ones dynamo makes, and
  ``torch.amp.custom_fwd/custom_bwd(device_type=dev)``;
* ``torch.amp.GradScaler(dev)`` (``"cuda"`` is its default device) and
  ``torch.cuda.amp.GradScaler(...)``;
* the autocast state queries and setters that take a device type, including
  the legacy no-argument forms that mean CUDA: ``torch.is_autocast_enabled``,
  ``torch.set_autocast_enabled``, ``torch.get_autocast_dtype``,
  ``torch.set_autocast_dtype``, ``torch.get_autocast_gpu_dtype``,
  ``torch.set_autocast_gpu_dtype``, ``torch.amp.is_autocast_available``.

The classes are patched in place (their ``__init__``), never replaced, so
``isinstance(x, torch.autocast)``, ``issubclass``, pickling of scaler state
and ``torch.cuda.amp.GradScaler``'s deprecation warning behave as before.
:func:`torchdevice.unpatch` restores the original ``__init__`` and functions
(identity).

Which dtype: an explicit ``dtype=`` is honoured (torch 2.13's CPU autocast
supports both float16 and bfloat16). When the program gives none, CUDA would
use its implicit float16; translated code uses the *target's* autocast default
instead (``torch.get_autocast_dtype(target)``: bfloat16 on CPU), because
bfloat16 is the CPU's mixed-precision type (fp32's exponent range, native on
AVX512-BF16/AMX, and about as fast as fp16 without them) and is what a hand
port to CPU writes. ``TORCHDEVICE_AMP_DTYPE=float16|bfloat16`` overrides that
implicit choice (read when translation is turned on).

``dtype=torch.float32`` turns the region off silently, as CUDA computes it in
float32 anyway. A dtype the target's autocast refuses (``float64`` on CPU, which
CUDA would cast to) runs the region disabled with a warning at the program's
line, instead of torch's warning located inside torchdevice.

If the target has no autocast at all, ``autocast(dev)`` runs disabled with one
clear warning naming the backend, rather than pretending. Every warning here is
located at the program's line (:func:`torchdevice.trace.warn`).

One difference remains by construction: on the CPU backend the translated
CUDA autocast *is* the CPU autocast, so a nested ``torch.autocast("cpu",
enabled=False)`` (which on a GPU machine leaves CUDA autocast alone) turns the
translated region's mixed precision off for its body.
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import torch
import torch.amp.autocast_mode as _autocast_mode
import torch.amp.grad_scaler as _grad_scaler
import torch.cuda.amp as _cuda_amp

from . import amp_rules, trace
from .backend import STATUS_ATTR, Status

if TYPE_CHECKING:
    from ._patching import Patcher
    from .router import Target

_F = TypeVar("_F", bound=Callable[..., Any])

ENV_AMP_DTYPE = "TORCHDEVICE_AMP_DTYPE"

_DTYPES = {
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}

_NOARG = object()

#: API name -> (status, note) for the current target; filled by :func:`install`.
STATUS: dict[str, tuple[Status, str]] = {}


def _implicit_dtype() -> torch.dtype | None:
    raw = os.environ.get(ENV_AMP_DTYPE, "").strip().lower()
    if not raw:
        return None
    try:
        return _DTYPES[raw]
    except KeyError:
        # only AMP's implicit dtype is affected: the rest of translation goes on
        warnings.warn_explicit(
            f"torchdevice: {ENV_AMP_DTYPE}={raw!r} is not valid: use float16 or bfloat16 (or fp16, bf16, half); "
            "the target's default AMP dtype is used", RuntimeWarning, "<torchdevice>", 0, module="torchdevice.amp")
        return None


_FAST = (torch.bfloat16, torch.float16)  # what torch's autocast takes on a device without its own list


def _handled(how: str, asked: tuple, dtype: torch.dtype | None, enabled: bool) -> str:
    """What one translated autocast did, for ``run --report``: ``how`` (the row's "translated:
    torch.autocast('cpu'), default dtype X") with the dtype the program passed (or the default taken) and
    whether the region runs enabled, and why not; ``asked`` is the program's ``(dtype, enabled)``."""
    if not how.startswith("translated:"):
        return how  # no autocast on the target: the row says it runs disabled
    call, _, default = how.partition(", default dtype ")
    asked_dtype, asked_enabled = asked
    given = f"dtype {asked_dtype} passed" if asked_dtype is not None else f"default dtype {dtype or default}"
    if enabled:
        state = "enabled"
    elif not asked_enabled:
        state = "disabled (enabled=False passed)"
    elif asked_dtype is torch.float32:
        state = "disabled: float32 computes as without autocast (CUDA's result; CPU autocast would warn)"
    else:
        state = f"disabled: {dtype} is not an autocast dtype of the target"
    return f"{call}, {given}, {state}"


def _supported_dtypes(device_type: str) -> tuple[torch.dtype, ...]:
    """The dtypes ``torch.autocast(device_type)`` accepts without turning itself off (torch's own rule)."""
    if device_type == torch._C._get_privateuse1_backend_name():
        module = getattr(torch, device_type, None)
        if module is not None and hasattr(module, "get_amp_supported_dtype"):
            return tuple(module.get_amp_supported_dtype())
    return _FAST


def _init_relocating_warnings(init: Callable[..., None], *args: Any) -> None:
    """``init(*args)`` with the warnings it raises re-raised at the program's line (rare path only:
    ``catch_warnings`` swaps process-wide state)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init(*args)
    for w in caught:
        trace.warn(str(w.message), w.category)


def _warn_unsupported_dtype(device_type: str, dtype: torch.dtype, backend: str, target_type: str,
                            supported: tuple[torch.dtype, ...]) -> None:
    trace.warn(
        f"torchdevice: autocast({device_type!r}, dtype={dtype}) runs disabled: the {backend!r} backend's "
        f"autocast ({target_type}) supports only {', '.join(map(str, supported))}; the region computes in "
        "its tensors' own dtypes", UserWarning)


def _tag(fn: _F, status: Status, note: str) -> _F:
    setattr(fn, STATUS_ATTR, (status, note))
    return fn


def _known_to_torch(device_type: str) -> str:
    """``device_type``, or ``privateuseone`` for a PrivateUse1 backend's name before it loads and renames it."""
    try:
        torch.device(device_type)
    except RuntimeError:
        return "privateuseone"
    return device_type


def status_for(target: Target) -> dict[str, tuple[Status, str]]:
    """How each AMP API is honoured when translating to ``target`` (no patching needed)."""
    tt = target.device_type
    known = _known_to_torch(tt)
    available = torch._C._is_autocast_available(known)
    default = _implicit_dtype() or (torch.get_autocast_dtype(known) if available else None)
    if available:
        ac = (Status.TRANSLATED, f"runs torch.autocast({tt!r}); no dtype given -> {default}, an explicit dtype is kept")
    else:
        ac = (Status.UNSUPPORTED, f"backend {target.name!r} ({tt}) has no autocast: runs disabled, with a warning")
    gs = (Status.TRANSLATED, f"runs torch.amp.GradScaler({tt!r}): real loss scaling and inf/NaN checks")
    q = (Status.TRANSLATED, f"answers for device type {tt!r}")
    return {
        "torch.autocast": ac,
        "torch.amp.autocast": ac,
        "torch.cuda.amp.autocast": ac,
        "torch.amp.custom_fwd": ac,
        "torch.amp.custom_bwd": ac,
        "torch.cuda.amp.custom_fwd": ac,
        "torch.cuda.amp.custom_bwd": ac,
        "torch.amp.GradScaler": gs,
        "torch.cuda.amp.GradScaler": gs,
        "torch.is_autocast_enabled": q,
        "torch.set_autocast_enabled": q,
        "torch.get_autocast_dtype": q,
        "torch.set_autocast_dtype": q,
        "torch.get_autocast_gpu_dtype": q,
        "torch.set_autocast_gpu_dtype": q,
        "torch.amp.is_autocast_available": q,
        "torch.cuda.amp.common.amp_definitely_not_available": (
            Status.TRANSLATED, f"False when the target {tt!r} has autocast"),
    }


class _Plan:
    """What every AMP wrapper of one :func:`install` reads: the target and what its autocast can do."""

    def __init__(self, target: Target) -> None:
        self.sources = target.sources
        self.device_type = tt = target.device_type
        self.backend = target.name
        self.implicit = _implicit_dtype()
        self.available = torch._C._is_autocast_available(tt)
        self.supported = _supported_dtypes(tt) if self.available else ()
        #: the no-argument forms (``torch.is_autocast_enabled()``, the ``*_gpu_dtype`` pair) mean CUDA
        self.legacy_gpu = "cuda" in self.sources
        default = self.implicit or (torch.get_autocast_dtype(tt) if self.available else None)
        self.autocast_how = (
            f"translated: torch.autocast({tt!r}), default dtype {default}" if self.available
            else f"unsupported: backend {target.name!r} has no autocast; runs disabled")
        self.scaler_how = f"translated: torch.amp.GradScaler({tt!r}), real loss scaling"
        self.query_how = f"translated: answers for device type {tt!r}"
        self._warned = False  # the one "no autocast" warning of this install

    def is_source(self, device_type: Any) -> bool:
        """Whether ``device_type`` (a str, ``"cuda:1"`` included) is one of the translated source types."""
        return device_type.__class__ is str and device_type.partition(":")[0] in self.sources

    def mapped(self, api: str, device_type: Any) -> Any:
        """``device_type``, or the target's device type for a source type (noted as ``api`` when tracing)."""
        if self.is_source(device_type):
            if trace.active:
                trace.note(api, self.query_how)
            return self.device_type
        return device_type

    def autocast_args(self, device_type: str, dtype: torch.dtype | None,
                      enabled: bool) -> tuple[str, torch.dtype | None, bool]:
        """``(device_type, dtype, enabled)`` for torch's autocast of a region written for source ``device_type``."""
        tt = self.device_type
        if not self.available:
            if enabled and not self._warned:
                self._warned = True
                trace.warn(
                    f"torchdevice: autocast({device_type!r}) runs disabled: the active backend "
                    f"{self.backend!r} ({tt}) has no autocast; the program computes in full precision",
                    RuntimeWarning,
                )
            return device_type, dtype, False
        if dtype is torch.float32:
            # CUDA accepts float32 (its ops then compute in float32) where CPU autocast warns and
            # turns itself off: the same numbers, so turn it off quietly
            return tt, dtype, False
        if dtype is None:
            dtype = self.implicit
        if enabled and dtype is not None and dtype not in self.supported:
            # torch would warn from inside its autocast, located in this file: say it at the program's line
            _warn_unsupported_dtype(device_type, dtype, self.backend, tt, self.supported)
            return tt, dtype, False
        return tt, dtype, enabled


def _set(patcher: Patcher, owner: object, name: str, fn: Callable[..., Any], api: str) -> None:
    """``owner.name = fn`` through ``patcher``, ``fn`` tagged with the status of ``api``."""
    patcher.set(owner, name, _tag(fn, *STATUS[api]))


def install(patcher: Patcher, target: Target) -> None:
    """Patch torch's AMP entry points through ``patcher`` to run on ``target`` (see the module docstring)."""
    if not target.sources:
        return
    plan = _Plan(target)
    STATUS.clear()
    STATUS.update(status_for(target))
    _install_autocast(patcher, plan)
    _install_custom_fwd_bwd(patcher, plan)
    _install_scalers(patcher, plan)
    if plan.available:
        _install_queries(patcher, plan)


# -- autocast ------------------------------------------------------------------


def _install_autocast(patcher: Patcher, plan: _Plan) -> None:
    """``torch.autocast.__init__`` (every spelling: it is one class) and ``torch.cuda.amp.autocast.__init__``."""
    base_init = _autocast_mode.autocast.__init__
    _set(patcher, _autocast_mode.autocast, "__init__", _autocast_init(plan, base_init), "torch.autocast")
    cuda_autocast = _cuda_amp.autocast
    if plan.legacy_gpu and "__init__" in vars(cuda_autocast):
        wrapper = _cuda_autocast_init(plan, base_init, vars(cuda_autocast)["__init__"])
        _set(patcher, cuda_autocast, "__init__", wrapper, "torch.cuda.amp.autocast")


def _autocast_init(plan: _Plan, base_init: Callable[..., None]) -> Callable[..., None]:
    is_source, autocast_args, how = plan.is_source, plan.autocast_args, plan.autocast_how  # read once: every region

    @functools.wraps(base_init)
    def autocast_init(self: Any, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True,
                      cache_enabled: bool | None = None) -> None:
        if is_source(device_type):
            asked = dtype, enabled
            device_type, dtype, enabled = autocast_args(device_type, dtype, enabled)
            amp_rules.refresh()  # rules of a library the program imported since (torchvision's C++ kernels)
            if trace.active:
                trace.note("torch.autocast", _handled(how, asked, dtype, enabled))
        elif enabled and dtype is not None and dtype not in _FAST and device_type != "cuda":
            # a device type not translated, with a dtype torch's autocast refuses: torch warns from the
            # frame above its __init__, which is now this wrapper; say it at the program's line instead
            _init_relocating_warnings(base_init, self, device_type, dtype, enabled, cache_enabled)
            return
        base_init(self, device_type, dtype, enabled, cache_enabled)

    return autocast_init


def _cuda_autocast_init(plan: _Plan, base_init: Callable[..., None],
                        cuda_init: Callable[..., None]) -> Callable[..., None]:
    how = plan.autocast_how.replace("translated:", "translated: torch.cuda.amp.autocast ->", 1)

    @functools.wraps(cuda_init)
    def cuda_autocast_init(self: Any, enabled: bool = True, dtype: torch.dtype | None = None,
                           cache_enabled: bool = True) -> None:
        # dtype defaults to None (not CUDA's float16) so the target's default applies
        asked = dtype, enabled
        device_type, dtype, enabled = plan.autocast_args("cuda", dtype, enabled)
        amp_rules.refresh()
        if trace.active:
            trace.note("torch.cuda.amp.autocast", _handled(how, asked, dtype, enabled))
        base_init(self, device_type, dtype, enabled, cache_enabled)

    return cuda_autocast_init


def _install_custom_fwd_bwd(patcher: Patcher, plan: _Plan) -> None:
    """``custom_fwd``/``custom_bwd`` take the device type when decorating: map it there."""
    custom_fwd = _custom_fwd(plan, _autocast_mode.custom_fwd)
    custom_bwd = _custom_bwd(plan, _autocast_mode.custom_bwd)
    for module in (torch.amp, _autocast_mode):
        _set(patcher, module, "custom_fwd", custom_fwd, "torch.amp.custom_fwd")
        _set(patcher, module, "custom_bwd", custom_bwd, "torch.amp.custom_bwd")


def _decorating_type(plan: _Plan, api: str, device_type: str) -> str:
    """The device type a ``custom_fwd``/``custom_bwd`` decoration uses (the target's, for a source type)."""
    if plan.is_source(device_type) and plan.available:
        if trace.active:
            trace.note(api, plan.autocast_how)
        return plan.device_type
    return device_type


def _custom_fwd(plan: _Plan, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def custom_fwd(fwd: Callable[..., Any] | None = None, *, device_type: str,
                   cast_inputs: torch.dtype | None = None) -> Any:
        device_type = _decorating_type(plan, "torch.amp.custom_fwd", device_type)
        return original(fwd, device_type=device_type, cast_inputs=cast_inputs)

    return custom_fwd


def _custom_bwd(plan: _Plan, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def custom_bwd(bwd: Callable[..., Any] | None = None, *, device_type: str) -> Any:
        device_type = _decorating_type(plan, "torch.amp.custom_bwd", device_type)
        if bwd is None:
            return functools.partial(custom_bwd, device_type=device_type)
        return original(bwd, device_type=device_type)

    return custom_bwd


# -- GradScaler ----------------------------------------------------------------


def _install_scalers(patcher: Patcher, plan: _Plan) -> None:
    """``torch.amp.GradScaler.__init__`` and ``torch.cuda.amp.GradScaler.__init__``."""
    scaler_init = _grad_scaler.GradScaler.__init__
    _set(patcher, _grad_scaler.GradScaler, "__init__", _scaler_init(plan, scaler_init), "torch.amp.GradScaler")
    cuda_scaler = _cuda_amp.GradScaler
    if plan.legacy_gpu and "__init__" in vars(cuda_scaler):
        wrapper = _cuda_scaler_init(plan, scaler_init, vars(cuda_scaler)["__init__"])
        _set(patcher, cuda_scaler, "__init__", wrapper, "torch.cuda.amp.GradScaler")


def _scaler_init(plan: _Plan, scaler_init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(scaler_init)
    def scaler_init_wrapper(self: Any, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                            backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        if plan.is_source(device):
            if trace.active:
                trace.note("torch.amp.GradScaler", plan.scaler_how)
            device = plan.device_type
        scaler_init(self, device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    return scaler_init_wrapper


def _cuda_scaler_init(plan: _Plan, scaler_init: Callable[..., None],
                      cuda_init: Callable[..., None]) -> Callable[..., None]:
    deprecation = getattr(cuda_init, "__deprecated__", None)
    how = plan.scaler_how.replace("translated:", "translated: torch.cuda.amp.GradScaler ->", 1)
    tt = plan.device_type

    @functools.wraps(cuda_init)
    def cuda_scaler_init(self: Any, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                         backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        if deprecation:  # what torch says on CUDA too
            trace.warn(deprecation, FutureWarning)
        if trace.active:
            trace.note("torch.cuda.amp.GradScaler", how)
        scaler_init(self, tt, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    return cuda_scaler_init


# -- state queries and setters -------------------------------------------------

def _install_queries(patcher: Patcher, plan: _Plan) -> None:
    """The autocast state functions of ``torch`` and ``torch.amp.is_autocast_available`` (target with autocast)."""
    original = {name: getattr(torch, name) for name in _QUERIES}
    for name, make in _QUERIES.items():
        if name.endswith("_gpu_dtype") and not plan.legacy_gpu:
            continue
        fn = make(plan, original)
        fn.__name__ = fn.__qualname__ = name
        _set(patcher, torch, name, fn, f"torch.{name}")
    available = _is_autocast_available(plan, _autocast_mode.is_autocast_available)
    _set(patcher, torch.amp, "is_autocast_available", available, "torch.amp.is_autocast_available")
    # autocast_mode's own global stays: autocast.__init__ calls it with the mapped type already.
    if plan.legacy_gpu:
        fn = _tag(amp_definitely_not_available, *STATUS["torch.cuda.amp.common.amp_definitely_not_available"])
        patcher.set(_cuda_amp.common, "amp_definitely_not_available", fn)
        if "amp_definitely_not_available" in vars(_cuda_amp):
            patcher.set(_cuda_amp, "amp_definitely_not_available", fn)


def amp_definitely_not_available() -> bool:
    """False: autocast('cuda') runs on the translation target (torchdevice)."""
    return False


_Originals = dict[str, Callable[..., Any]]


def _is_autocast_enabled(plan: _Plan, original: _Originals) -> Callable[..., bool]:
    is_enabled = original["is_autocast_enabled"]

    def is_autocast_enabled(device_type: object = _NOARG) -> bool:
        """torch.is_autocast_enabled, with translated device types (torchdevice)."""
        if device_type is _NOARG:
            if not plan.legacy_gpu:
                return is_enabled()
            device_type = "cuda"
        return is_enabled(plan.mapped("torch.is_autocast_enabled", device_type))

    return is_autocast_enabled


def _enabled_arguments(legacy_gpu: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(device_type, enabled)`` of a call of ``torch.set_autocast_enabled``; None for a call torch
    takes as it is (the legacy one-argument form off CUDA) or refuses (wrong arguments: torch's own error)."""
    try:
        if len(args) + len(kwargs) == 1 and "device_type" not in kwargs:
            if not legacy_gpu:  # the legacy form set_autocast_enabled(enabled) means CUDA
                return None
            return "cuda", (args[0] if args else kwargs["enabled"])
        return (args[0] if args else kwargs["device_type"]), (args[1] if len(args) > 1 else kwargs["enabled"])
    except (IndexError, KeyError):
        return None


def _set_autocast_enabled(plan: _Plan, original: _Originals) -> Callable[..., None]:
    set_enabled = original["set_autocast_enabled"]

    def set_autocast_enabled(*args: Any, **kwargs: Any) -> None:
        """torch.set_autocast_enabled, with translated device types (torchdevice)."""
        found = _enabled_arguments(plan.legacy_gpu, args, kwargs)
        if found is None:
            return set_enabled(*args, **kwargs)
        device_type, enabled = found
        return set_enabled(plan.mapped("torch.set_autocast_enabled", device_type), enabled)

    return set_autocast_enabled


def _get_autocast_dtype(plan: _Plan, original: _Originals) -> Callable[..., torch.dtype]:
    get_dtype = original["get_autocast_dtype"]

    def get_autocast_dtype(device_type: str) -> torch.dtype:
        """torch.get_autocast_dtype, with translated device types (torchdevice)."""
        return get_dtype(plan.mapped("torch.get_autocast_dtype", device_type))

    return get_autocast_dtype


def _set_autocast_dtype(plan: _Plan, original: _Originals) -> Callable[..., None]:
    set_dtype = original["set_autocast_dtype"]

    def set_autocast_dtype(device_type: str, dtype: torch.dtype) -> None:
        """torch.set_autocast_dtype, with translated device types (torchdevice)."""
        return set_dtype(plan.mapped("torch.set_autocast_dtype", device_type), dtype)

    return set_autocast_dtype


def _get_autocast_gpu_dtype(plan: _Plan, original: _Originals) -> Callable[..., torch.dtype]:
    get_dtype, tt = original["get_autocast_dtype"], plan.device_type

    def get_autocast_gpu_dtype() -> torch.dtype:
        """torch.get_autocast_gpu_dtype (CUDA's autocast dtype), translated (torchdevice)."""
        if trace.active:
            trace.note("torch.get_autocast_gpu_dtype", plan.query_how)
        return get_dtype(tt)

    return get_autocast_gpu_dtype


def _set_autocast_gpu_dtype(plan: _Plan, original: _Originals) -> Callable[..., None]:
    set_dtype, tt = original["set_autocast_dtype"], plan.device_type

    def set_autocast_gpu_dtype(dtype: torch.dtype) -> None:
        """torch.set_autocast_gpu_dtype (CUDA's autocast dtype), translated (torchdevice)."""
        if trace.active:
            trace.note("torch.set_autocast_gpu_dtype", plan.query_how)
        return set_dtype(tt, dtype)

    return set_autocast_gpu_dtype


#: ``torch``'s autocast state functions -> the maker of each one's translated form; the ``*_gpu_dtype``
#: pair (CUDA's dtype, no device argument) is patched only where CUDA is a source type
_QUERIES: dict[str, Callable[[_Plan, _Originals], Callable[..., Any]]] = {
    "is_autocast_enabled": _is_autocast_enabled,
    "set_autocast_enabled": _set_autocast_enabled,
    "get_autocast_dtype": _get_autocast_dtype,
    "set_autocast_dtype": _set_autocast_dtype,
    "get_autocast_gpu_dtype": _get_autocast_gpu_dtype,
    "set_autocast_gpu_dtype": _set_autocast_gpu_dtype,
}


def _is_autocast_available(plan: _Plan, original: Callable[[str], bool]) -> Callable[[str], bool]:
    @functools.wraps(original)
    def is_autocast_available(device_type: str) -> bool:
        return original(plan.mapped("torch.amp.is_autocast_available", device_type))

    return is_autocast_available
