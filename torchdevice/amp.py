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

import torch
import torch.amp.autocast_mode as _autocast_mode
import torch.amp.grad_scaler as _grad_scaler
import torch.cuda.amp as _cuda_amp

from . import trace
from .backend import STATUS_ATTR, Status

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


def _init_relocating_warnings(init, *args) -> None:
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


def _tag(fn, status: Status, note: str):
    setattr(fn, STATUS_ATTR, (status, note))
    return fn


def _known_to_torch(device_type: str) -> str:
    """``device_type``, or ``privateuseone`` for a PrivateUse1 backend's name before it loads and renames it."""
    try:
        torch.device(device_type)
    except RuntimeError:
        return "privateuseone"
    return device_type


def status_for(target) -> dict[str, tuple[Status, str]]:
    """How each AMP API is honoured when translating to ``target`` (no patching needed)."""
    tt = target.device_type
    known = _known_to_torch(tt)
    available = torch._C._is_autocast_available(known)
    default = _implicit_dtype() or (torch.get_autocast_dtype(known) if available else None)
    if available:
        ac = (Status.TRANSLATED, f"runs torch.autocast({tt!r}); no dtype given -> {default}, an explicit dtype is kept")
    else:
        ac = (Status.UNSUPPORTED, f"backend {target.backend!r} ({tt}) has no autocast: runs disabled, with a warning")
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


def install(patcher, target) -> None:
    """Patch torch's AMP entry points through ``patcher`` to run on ``target`` (see the module docstring)."""
    sources = target.sources
    tt = target.device_type
    if not sources:
        return
    implicit = _implicit_dtype()
    available = torch._C._is_autocast_available(tt)
    STATUS.clear()
    STATUS.update(status_for(target))
    default_desc = str(implicit or (torch.get_autocast_dtype(tt) if available else None))

    def _src(device_type) -> bool:
        return device_type.__class__ is str and device_type.partition(":")[0] in sources

    # -- autocast ------------------------------------------------------------------
    autocast_cls = _autocast_mode.autocast
    base_init = autocast_cls.__init__
    ac_how = (
        f"translated: torch.autocast({tt!r}), default dtype {default_desc}" if available
        else f"unsupported: backend {target.backend!r} has no autocast; runs disabled"
    )
    warned: list[bool] = []

    supported = _supported_dtypes(tt) if available else ()

    def _target_args(device_type, dtype, enabled):
        if not available:
            if enabled and not warned:
                warned.append(True)
                trace.warn(
                    f"torchdevice: autocast({device_type!r}) runs disabled: the active backend "
                    f"{target.backend!r} ({tt}) has no autocast; the program computes in full precision",
                    RuntimeWarning,
                )
            return device_type, dtype, False
        if dtype is torch.float32:
            # CUDA accepts float32 (its ops then compute in float32) where CPU autocast warns and
            # turns itself off: the same numbers, so turn it off quietly
            return tt, dtype, False
        if dtype is None:
            dtype = implicit
        if enabled and dtype is not None and dtype not in supported:
            # torch would warn from inside its autocast, located in this file: say it at the program's line
            _warn_unsupported_dtype(device_type, dtype, target.backend, tt, supported)
            return tt, dtype, False
        return tt, dtype, enabled

    @functools.wraps(base_init)
    def autocast_init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if _src(device_type):
            asked = dtype, enabled
            device_type, dtype, enabled = _target_args(device_type, dtype, enabled)
            if trace.active:
                trace.note("torch.autocast", _handled(ac_how, asked, dtype, enabled))
        elif enabled and dtype is not None and dtype not in _FAST and device_type != "cuda":
            # a device type not translated, with a dtype torch's autocast refuses: torch warns from the
            # frame above its __init__, which is now this wrapper; say it at the program's line instead
            _init_relocating_warnings(base_init, self, device_type, dtype, enabled, cache_enabled)
            return
        base_init(self, device_type, dtype, enabled, cache_enabled)

    patcher.set(autocast_cls, "__init__", _tag(autocast_init, *STATUS["torch.autocast"]))

    cuda_autocast = _cuda_amp.autocast
    if "cuda" in sources and "__init__" in vars(cuda_autocast):
        cuda_how = ac_how.replace("translated:", "translated: torch.cuda.amp.autocast ->", 1)

        @functools.wraps(vars(cuda_autocast)["__init__"])
        def cuda_autocast_init(self, enabled=True, dtype=None, cache_enabled=True):
            # dtype defaults to None (not CUDA's float16) so the target's default applies
            asked = dtype, enabled
            device_type, dtype, enabled = _target_args("cuda", dtype, enabled)
            if trace.active:
                trace.note("torch.cuda.amp.autocast", _handled(cuda_how, asked, dtype, enabled))
            base_init(self, device_type, dtype, enabled, cache_enabled)

        patcher.set(cuda_autocast, "__init__", _tag(cuda_autocast_init, *STATUS["torch.cuda.amp.autocast"]))

    # custom_fwd / custom_bwd take the device type when decorating: map it there.
    orig_fwd, orig_bwd = _autocast_mode.custom_fwd, _autocast_mode.custom_bwd

    @functools.wraps(orig_fwd)
    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        if _src(device_type) and available:
            if trace.active:
                trace.note("torch.amp.custom_fwd", ac_how)
            device_type = tt
        return orig_fwd(fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(orig_bwd)
    def custom_bwd(bwd=None, *, device_type):
        if _src(device_type) and available:
            if trace.active:
                trace.note("torch.amp.custom_bwd", ac_how)
            device_type = tt
        if bwd is None:
            return functools.partial(custom_bwd, device_type=device_type)
        return orig_bwd(bwd, device_type=device_type)

    for mod in (torch.amp, _autocast_mode):
        patcher.set(mod, "custom_fwd", _tag(custom_fwd, *STATUS["torch.amp.custom_fwd"]))
        patcher.set(mod, "custom_bwd", _tag(custom_bwd, *STATUS["torch.amp.custom_bwd"]))

    # -- GradScaler ----------------------------------------------------------------
    scaler_cls = _grad_scaler.GradScaler
    scaler_init = scaler_cls.__init__
    gs_how = f"translated: torch.amp.GradScaler({tt!r}), real loss scaling"

    @functools.wraps(scaler_init)
    def scaler_init_wrapper(self, device="cuda", init_scale=2.0**16, growth_factor=2.0,
                            backoff_factor=0.5, growth_interval=2000, enabled=True):
        if _src(device):
            if trace.active:
                trace.note("torch.amp.GradScaler", gs_how)
            device = tt
        scaler_init(self, device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    patcher.set(scaler_cls, "__init__", _tag(scaler_init_wrapper, *STATUS["torch.amp.GradScaler"]))

    cuda_scaler = _cuda_amp.GradScaler
    if "cuda" in sources and "__init__" in vars(cuda_scaler):
        orig_cuda_scaler_init = vars(cuda_scaler)["__init__"]
        deprecation = getattr(orig_cuda_scaler_init, "__deprecated__", None)
        cuda_gs_how = gs_how.replace("translated:", "translated: torch.cuda.amp.GradScaler ->", 1)

        @functools.wraps(orig_cuda_scaler_init)
        def cuda_scaler_init(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                             growth_interval=2000, enabled=True):
            if deprecation:  # what torch says on CUDA too
                trace.warn(deprecation, FutureWarning)
            if trace.active:
                trace.note("torch.cuda.amp.GradScaler", cuda_gs_how)
            scaler_init(self, tt, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

        patcher.set(cuda_scaler, "__init__", _tag(cuda_scaler_init, *STATUS["torch.cuda.amp.GradScaler"]))

    # -- state queries and setters -------------------------------------------------
    if available:
        _install_queries(patcher, target, _src, available)


def _install_queries(patcher, target, _src, available) -> None:
    tt = target.device_type
    legacy_gpu = "cuda" in target.sources  # the no-argument forms mean CUDA
    how = f"translated: answers for device type {tt!r}"
    orig = {name: getattr(torch, name) for name in (
        "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype",
        "get_autocast_gpu_dtype", "set_autocast_gpu_dtype",
    )}
    o_is, o_set, o_get, o_setd = (orig[n] for n in (
        "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype"))

    def is_autocast_enabled(device_type=_NOARG):
        """torch.is_autocast_enabled, with translated device types (torchdevice)."""
        if device_type is _NOARG:
            if not legacy_gpu:
                return o_is()
            device_type = "cuda"
        if _src(device_type):
            if trace.active:
                trace.note("torch.is_autocast_enabled", how)
            device_type = tt
        return o_is(device_type)

    def set_autocast_enabled(*args, **kwargs):
        """torch.set_autocast_enabled, with translated device types (torchdevice)."""
        try:
            if len(args) + len(kwargs) == 1 and "device_type" not in kwargs:
                if not legacy_gpu:  # the legacy form set_autocast_enabled(enabled) means CUDA
                    return o_set(*args, **kwargs)
                device_type, enabled = "cuda", (args[0] if args else kwargs["enabled"])
            else:
                device_type = args[0] if args else kwargs["device_type"]
                enabled = args[1] if len(args) > 1 else kwargs["enabled"]
        except (IndexError, KeyError):
            return o_set(*args, **kwargs)  # torch's own error for bad arguments
        if _src(device_type):
            if trace.active:
                trace.note("torch.set_autocast_enabled", how)
            device_type = tt
        return o_set(device_type, enabled)

    def get_autocast_dtype(device_type):
        """torch.get_autocast_dtype, with translated device types (torchdevice)."""
        if _src(device_type):
            if trace.active:
                trace.note("torch.get_autocast_dtype", how)
            device_type = tt
        return o_get(device_type)

    def set_autocast_dtype(device_type, dtype):
        """torch.set_autocast_dtype, with translated device types (torchdevice)."""
        if _src(device_type):
            if trace.active:
                trace.note("torch.set_autocast_dtype", how)
            device_type = tt
        return o_setd(device_type, dtype)

    def get_autocast_gpu_dtype():
        """torch.get_autocast_gpu_dtype (CUDA's autocast dtype), translated (torchdevice)."""
        if trace.active:
            trace.note("torch.get_autocast_gpu_dtype", how)
        return o_get(tt)

    def set_autocast_gpu_dtype(dtype):
        """torch.set_autocast_gpu_dtype (CUDA's autocast dtype), translated (torchdevice)."""
        if trace.active:
            trace.note("torch.set_autocast_gpu_dtype", how)
        return o_setd(tt, dtype)

    o_avail = _autocast_mode.is_autocast_available

    @functools.wraps(o_avail)
    def is_autocast_available(device_type: str) -> bool:
        if _src(device_type):
            if trace.active:
                trace.note("torch.amp.is_autocast_available", how)
            device_type = tt
        return o_avail(device_type)

    new = {
        "is_autocast_enabled": is_autocast_enabled,
        "set_autocast_enabled": set_autocast_enabled,
        "get_autocast_dtype": get_autocast_dtype,
        "set_autocast_dtype": set_autocast_dtype,
    }
    if legacy_gpu:
        new["get_autocast_gpu_dtype"] = get_autocast_gpu_dtype
        new["set_autocast_gpu_dtype"] = set_autocast_gpu_dtype
    for name, fn in new.items():
        fn.__name__ = fn.__qualname__ = name
        patcher.set(torch, name, _tag(fn, *STATUS[f"torch.{name}"]))
    _tag(is_autocast_available, *STATUS["torch.amp.is_autocast_available"])
    patcher.set(torch.amp, "is_autocast_available", is_autocast_available)
    # autocast_mode's own global stays: autocast.__init__ calls it with the mapped type already.

    if legacy_gpu and available:
        common = _cuda_amp.common

        def amp_definitely_not_available() -> bool:
            """False: autocast('cuda') runs on the translation target (torchdevice)."""
            return False

        _tag(amp_definitely_not_available, *STATUS["torch.cuda.amp.common.amp_definitely_not_available"])
        patcher.set(common, "amp_definitely_not_available", amp_definitely_not_available)
        if "amp_definitely_not_available" in vars(_cuda_amp):
            patcher.set(_cuda_amp, "amp_definitely_not_available", amp_definitely_not_available)
