"""Autocast rules written for the source device type, applied on the target's autocast key.

A library registers its ops' autocast rules for the GPU it was written for: a C++ kernel for
``AutocastCUDA`` (torchvision's ``roi_align``), or ``torch.library.register_autocast(op, "cuda", dtype)``
(and ``CustomOpDef.register_autocast``). Translated, ``torch.autocast("cuda")`` turns on the target's
autocast key (``AutocastPrivateUse1`` on sim, ``AutocastCPU`` on the cpu backend), where those ops
have no rule, so an fp16 activation meets an fp32 argument and the op refuses the mix.

While translation is on, each op outside ``aten`` with a kernel for the source's autocast key and none
for the target's gets one there (mirrored), both those registered before :func:`install` (a scan of
the dispatcher) and after: ``register_autocast`` and ``Library.impl`` are wrapped, and a C++ library
loaded later (torchvision imported by the program, its kernels registered as it loads) is found by
:func:`refresh`, which a translated ``torch.autocast`` calls as it starts. The mirrored kernel casts as the rule does:

* a rule registered from Python: its ``cast_inputs`` dtype, read from the registration (floating
  inputs cast to it, the op run with autocast off, as torch's own kernel does);
* a C++ kernel, whose rule cannot be read: the convention of the libraries that write them
  (torchvision's roi/deform ops): floating inputs run in float32, floating outputs are cast back to
  the dtype of the first floating input.

aten's ops keep the target's own lists (the CPU's on the cpu backend, CUDA's on sim).
:func:`uninstall` (at ``unpatch()``) removes every mirrored kernel.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import torch
from torch.amp.autocast_mode import _cast

from ._patching import Patcher
from .router import Target

_libraries: list[torch.library.Library] = []  # the mirrored kernels' registrations, destroyed by uninstall()
_mirrored: set[str] = set()
_FP32_CONVENTION = None  # the policy of a rule that cannot be read (a C++ kernel)
_keys: tuple[str, str, str, str] | None = None  # (source, source_key, target type, target_key) while installed
_scanned_at: tuple[int, int] = (0, 0)  # (modules imported, libraries loaded) at the last scan


def _key(device_type: str) -> str:
    return "Autocast" + torch._C._dispatch_key_for_device(device_type)


def _dispatch_key(name: str) -> torch._C.DispatchKey:
    """The key named ``name``, parsed by the dispatcher: Python's enum lacks some (``AutocastMTIA`` in torch 2.13)."""
    key = torch._C._parse_dispatch_key(name)
    if key is None:
        raise ValueError(f"torch's dispatcher has no dispatch key {name!r}")
    return key


def install(patcher: Patcher, target: Target) -> None:
    """Mirror the source's autocast rules onto the target's key, now and for rules registered later."""
    source, tt = target.source, target.device_type
    if tt == source or tt in target.sources or not torch._C._is_autocast_available(tt):
        return
    source_key, target_key = _key(source), _key(tt)
    if source_key == target_key:
        return
    global _keys
    _keys = (source, source_key, tt, target_key)
    _scan()
    patcher.set(torch.library, "register_autocast", _after(torch.library.register_autocast))
    opdef = torch._library.custom_ops.CustomOpDef
    patcher.set(opdef, "register_autocast", _method_after(opdef.register_autocast))
    patcher.set(torch.library.Library, "impl", _impl_after(torch.library.Library.impl))


def refresh() -> None:
    """Mirror the rules of libraries loaded since the last scan. Cheap when none was: the scan (about 0.5 ms)
    runs only when a module was imported or a library loaded (``torch.ops.load_library``) since."""
    if _keys is not None and _loaded() != _scanned_at:
        _scan()


def uninstall() -> None:
    global _keys
    _keys = None
    for library in _libraries:
        library._destroy()
    _libraries.clear()
    _mirrored.clear()


def _loaded() -> tuple[int, int]:
    return len(sys.modules), len(torch.ops.loaded_libraries)


def _scan() -> None:
    """Mirror every rule registered for the source's autocast key (outside aten and prims)."""
    global _scanned_at
    assert _keys is not None
    _scanned_at = _loaded()
    for name in torch._C._dispatch_get_registrations_for_dispatch_key(_keys[1]):
        if not name.startswith(("aten::", "prims::")):
            _mirror(name, *_keys)


def _after(register: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.library.register_autocast``, a rule for the source mirrored at once."""

    @functools.wraps(register)
    def register_autocast(op: Any, device_type: str, cast_inputs: torch.dtype, /, **kwargs: Any) -> Any:
        result = register(op, device_type, cast_inputs, **kwargs)
        if _keys is not None and device_type == _keys[0]:
            _mirror(_qualname(op), *_keys)
        return result

    return register_autocast


def _method_after(register: Callable[..., Any]) -> Callable[..., Any]:
    """``CustomOpDef.register_autocast``, a rule for the source mirrored at once."""

    @functools.wraps(register)
    def register_autocast(self: Any, device_type: str, cast_inputs: torch.dtype) -> Any:
        result = register(self, device_type, cast_inputs)
        if _keys is not None and device_type == _keys[0]:
            _mirror(self._qualname, *_keys)
        return result

    return register_autocast


def _impl_after(impl: Callable[..., Any]) -> Callable[..., Any]:
    """``Library.impl``, a kernel registered for the source's autocast key mirrored at once."""

    @functools.wraps(impl)
    def library_impl(self: Any, op_name: Any, fn: Any, dispatch_key: str = "", *args: Any, **kwargs: Any) -> Any:
        result = impl(self, op_name, fn, dispatch_key, *args, **kwargs)
        if _keys is not None and dispatch_key == _keys[1]:
            name = op_name.name() if isinstance(op_name, torch._ops.OpOverload) else f"{self.ns}::{op_name}"
            _mirror(name, *_keys)
        return result

    return library_impl


def _qualname(op: Any) -> str:
    if isinstance(op, str):
        return op
    if isinstance(op, torch._ops.OpOverload):
        return op.name()
    return str(getattr(op, "_qualname", op))


def _mirror(name: str, source: str, source_key: str, tt: str, target_key: str) -> None:
    """Give op ``name`` a kernel for ``target_key`` casting as its ``source_key`` rule does (module docstring)."""
    qualified = name if "." in name.partition("::")[2] else f"{name}.default"
    if qualified in _mirrored or torch._C._dispatch_has_kernel_for_dispatch_key(name, target_key):
        return
    namespace, _, opname = name.partition("::")
    if not hasattr(getattr(torch.ops, namespace), opname.partition(".")[0]):
        return  # a rule left registered for an op whose definition was dropped (its Library destroyed)
    op = torch._library.utils.lookup_op(qualified)
    dtype = _python_rule(op, source, source_key)
    library = torch.library.Library(namespace, "IMPL")
    library.impl(opname, _kernel(op, tt, target_key, dtype), target_key)
    _libraries.append(library)
    _mirrored.add(qualified)


def _python_rule(op: torch._ops.OpOverload, source: str, source_key: str) -> torch.dtype | None:
    """The ``cast_inputs`` of a rule registered from Python for ``source``; None for a C++ kernel."""
    opdef = torch._library.custom_ops.OPDEFS.get(op._schema.name)
    if opdef is not None and opdef._autocast_dtype.get(source) is not None:
        return opdef._autocast_dtype[source]
    impl = op.py_kernels.get(_dispatch_key(source_key))
    for cell in getattr(impl, "__closure__", None) or ():  # torch.library.register_autocast's closure
        if isinstance(cell.cell_contents, torch.dtype):
            return cell.cell_contents
    return _FP32_CONVENTION


def _kernel(op: torch._ops.OpOverload, tt: str, target_key: str, dtype: torch.dtype | None) -> Callable[..., Any]:
    exclude = torch._C.DispatchKeySet(_dispatch_key(target_key))

    def autocast_kernel(*args: Any, **kwargs: Any) -> Any:
        cast_to = dtype if dtype is not None else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            out = op(*_cast(args, tt, cast_to), **_cast(kwargs, tt, cast_to))
        if dtype is not None:
            return out
        first = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
        return out if first is None else _cast(out, tt, first.dtype)

    return autocast_kernel
