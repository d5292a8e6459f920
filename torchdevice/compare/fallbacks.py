"""Python backend fallbacks under a dispatch mode: torch's trampoline needs a Python registration per op.

A plugin whose device kernels are one Python *fallback* (``Library("_", "IMPL").fallback(fn, dispatch_key=
"PrivateUse1")``, as sim's) works alone, but under a ``TorchDispatchMode`` torch crashes with
``func != nullptr INTERNAL ASSERT FAILED at python_dispatch.cpp`` wherever the fallback is reached while
the mode is on the stack and the Python key is skipped (``torch.tensor(..., device=...)`` copies its data
with the Python key excluded). With a mode on the stack, torch's Python kernel holder hands the call to a
trampoline that looks the op up in the table of Python ``impl`` registrations, and fallbacks are never
entered there.

:func:`cover` enters every op of a dispatch key that has no kernel of its own into that table: an
``impl`` registered and at once removed (the kernel goes, the table entry stays), whose function
redispatches to the key with the modes off, as the fallback runs when no mode is active. Ops never
reach it unless torch took that path; the fallback itself stays what runs.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

_COVERED: dict[str, set[str]] = {}  # dispatch key name -> qualified op names entered


def _redispatcher(key: str) -> Any:
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def redispatch(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], torch._C.DispatchKeySet):  # a fallback registered with_keyset
            args = args[1:]
        op, *rest = args
        with _disable_current_modes():
            return op.redispatch(keyset, *rest, **kwargs)

    return redispatch


#: backend keys a plugin may put a Python fallback on behind a C++ one on its own key (sim's C++ fallback on
#: PrivateUse1 runs the common ops and hands the rest to its Python fallback on PrivateUse2)
_SPARE_KEYS = ("PrivateUse2", "PrivateUse3")


def cover(device_type: str, names: list[str] | None = None) -> bool:
    """Enter the ops ``names`` (default: every op registered) lacking a kernel for ``device_type``'s
    dispatch key, and for each spare PrivateUse key with a fallback. False (nothing done) while the
    device's key has no fallback."""
    try:
        key = torch._C._dispatch_key_for_device(device_type)
    except RuntimeError:  # a name torch does not know (yet): only PrivateUse1 can be renamed
        key = "PrivateUse1"
    dispatch_key = getattr(torch._C.DispatchKey, key, None)
    if dispatch_key is None or not torch._C._dispatch_has_backend_fallback(dispatch_key):
        return False
    for spare in _SPARE_KEYS:
        if spare != key and torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, spare)):
            _cover_key(spare, names)
    _cover_key(key, names)
    return True


def _cover_key(key: str, names: list[str] | None) -> None:
    dispatch_key = getattr(torch._C.DispatchKey, key)
    done = _COVERED.setdefault(key, set())
    todo = [n for n in (torch._C._dispatch_get_all_op_names() if names is None else names)
            if n not in done and not torch._C._dispatch_has_kernel_for_dispatch_key(n, dispatch_key)]
    if not todo:
        return
    function = _redispatcher(key)
    libraries: dict[str, Any] = {}
    for name in todo:
        namespace, _, op = name.partition("::")
        library = libraries.get(namespace)
        if library is None:
            library = libraries[namespace] = torch._C._dispatch_library("IMPL", namespace, "")
        library.impl(op, dispatch_key, function)
    for library in libraries.values():
        library.reset()  # the kernels go; torch keeps the table entries
    done.update(todo)
