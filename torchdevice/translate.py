"""Turning translation on and off: :func:`patch`, :func:`unpatch`, :func:`patched`.

While patched, code written for ``cuda`` (or ``mps``, ``xpu``, ``mtia``) runs
on the active backend. The work is split by concern; each module below has an
``install(patcher, target)`` that patches torch through the shared
:class:`~torchdevice._patching.Patcher`, so :func:`unpatch` restores every
touched attribute exactly (identity):

* :mod:`torchdevice.devices` -- device strings and objects wherever a device
  enters torch (``torch.device``, factories, ``.to``, modules, ``torch.load``,
  generators, default device, pinned memory);
* :mod:`torchdevice.namespaces` -- ``torch.cuda``/``mps``/``xpu``/``mtia``
  fronting the active backend;
* :mod:`torchdevice.amp` -- autocast and GradScaler for the source device types;
* :mod:`torchdevice.distributed` -- ``init_process_group("nccl")`` and friends.

The :class:`~torchdevice.router.Target` passed to installers is the active
backend's snapshot with the translation options set
(:meth:`~torchdevice.router.Target.translating`), made again when
:func:`torchdevice.use` changes backend (translation is then re-installed).

The *source family* (:attr:`Target.source`) is the device type the program is
written for: ``cuda`` unless ``TORCHDEVICE_SOURCE`` or ``patch(source=...)``
(``torchdevice run --source``) names ``mps``, ``xpu`` or ``mtia``. Every
source namespace is translated, but only the source family's claims a device
(``is_available()``), as on a real machine with one kind of accelerator.
"""
from __future__ import annotations

import contextlib
import gc
import os
import threading
from types import ModuleType
from typing import Any, Callable, Iterator, cast

from . import boundary, router
from ._patching import Patcher
from .errors import ConfigError
from .router import Target
from .vocabulary import SOURCE_FAMILIES

SOURCE_TYPES = SOURCE_FAMILIES  # its old name here: the families whose code torchdevice translates


ENV_REPORT_AVAILABLE = "TORCHDEVICE_REPORT_AVAILABLE"
ENV_SOURCE = "TORCHDEVICE_SOURCE"

#: The source family when neither ``TORCHDEVICE_SOURCE`` nor ``patch(source=...)`` names one.
DEFAULT_SOURCE = "cuda"

#: backend name -> ``install(patcher, target)`` run after the installers when that backend is the
#: target: for a backend computing in its own tensor type (mlx registers one on import). Changes
#: are staged until every installer has run: read what you wrap with ``patcher.get(obj, name)``.
TRANSLATION_HOOKS: dict[str, Callable[[Patcher, Target], None]] = {}


_lock = threading.RLock()
_patcher: Patcher | None = None
_target: Target | None = None
_options: dict[str, Any] = {}
_imports: boundary.TorchImports | None = None


def installers() -> tuple[ModuleType, ...]:
    """The installer modules, in order; each has ``install(patcher, target)`` (and may have ``uninstall()``).

    Imported by the first :func:`patch`, not by ``import torchdevice``: they build the namespace
    table and import ``torch.distributed``, which a program that never translates does not pay for.
    """
    from . import amp, amp_rules, devices, distributed, namespaces

    return (devices, namespaces, amp, amp_rules, distributed, boundary)


def _report_available_default() -> bool:
    raw = os.environ.get(ENV_REPORT_AVAILABLE, "1").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{ENV_REPORT_AVAILABLE} must be 1 or 0 (true/false), got {raw!r}")


def check_source(value: Any, origin: str = "source") -> str:
    """``value`` as a source family (``cuda``, ``mps``, ``xpu``, ``mtia``; any case), or :class:`ConfigError`."""
    name = value.strip().lower() if isinstance(value, str) else value
    if name not in SOURCE_FAMILIES:
        raise ConfigError(origin, value, f"the source family must be one of {', '.join(SOURCE_FAMILIES)}")
    return name


def source_default() -> str:
    """The source family ``TORCHDEVICE_SOURCE`` names (checked), else :data:`DEFAULT_SOURCE`."""
    raw = os.environ.get(ENV_SOURCE, "")
    return check_source(raw, ENV_SOURCE) if raw.strip() else DEFAULT_SOURCE


def make_target(report_available: bool | None = None, source: str | None = None) -> Target:
    """The active backend as translation's target, with the options (None: their environment defaults)."""
    source = source_default() if source is None else check_source(source)
    backend = router.active()
    if report_available is None:
        report_available = _report_available_default()
    return backend.translating(report_available, source)


def target() -> Target | None:
    """The current translation target, or ``None`` when not patched."""
    return _target


def is_patched() -> bool:
    """Whether translation is on."""
    return _patcher is not None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while translation is installed.

    Installing allocates a few thousand small objects right after ``import torch`` created
    hundreds of thousands: that tips the collector into a full pass over torch's heap (~40 ms
    measured) that the program would otherwise meet later, at its own first collection. Held
    here, that pass is left where it would have happened without torchdevice. A collector the
    program turned off stays off.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def patch(*, report_available: bool | None = None, source: str | None = None) -> Target:
    """Turn translation on, targeting the active backend; idempotent.

    ``report_available`` decides what ``torch.cuda.is_available()`` (and
    ``device_count()``) say when the target has no accelerator (CPU, MLX on
    CPU): True by default so CUDA-only programs take their GPU path, which
    then runs on the target. Override with ``TORCHDEVICE_REPORT_AVAILABLE=0``.

    ``source`` is the family the program is written for (``"cuda"``,
    ``"mps"``, ``"xpu"``, ``"mtia"``; default ``TORCHDEVICE_SOURCE``, else
    ``"cuda"``): only ``torch.<source>.is_available()`` reports a device; the
    other translated namespaces still work when called but answer
    ``is_available()`` False and ``device_count()`` 0. A value outside those
    raises :class:`~torchdevice.errors.ConfigError` naming it.

    Called again with an option that differs from the current one, it
    re-installs translation (options not given keep their previous value).
    Returns the :class:`Target`.
    """
    global _patcher, _target, _imports
    with _lock, _gc_paused():
        if source is not None:
            source = check_source(source)
        if _patcher is not None:
            current = cast(Target, _target)  # set together with _patcher
            if (report_available is None or report_available == current.report_available) and (
                    source is None or source == current.source):
                return current
            if report_available is None:
                report_available = _options.get("report_available")
            if source is None:
                source = _options.get("source")
            _unpatch_locked()
        new_target = make_target(report_available, source)
        _options["report_available"], _options["source"] = report_available, source
        patcher = Patcher()
        patcher.stage()  # torch is changed only by the commit, all at once
        try:
            for module in installers():
                module.install(patcher, new_target)
            # a backend computing in its own tensor type (mlx) hooks factories and .to here
            extra = TRANSLATION_HOOKS.get(new_target.name)
            if extra is not None:
                extra(patcher, new_target)
        except BaseException:
            patcher.discard()
            _uninstall_installers()  # what an installer did outside the patcher (amp_rules' kernels)
            raise
        boundary.warm()  # torch's lazy caches, filled from torch's own objects before the commit
        patcher.commit()
        _patcher, _target = patcher, new_target
        _imports = boundary.install_imports(patcher)  # torch's modules imported from now on see torch
        # framework integrations: installed when their framework is imported (now, if it already is)
        from . import integrations

        integrations.activate(patcher, new_target)
        return new_target


def _unpatch_locked() -> None:
    global _patcher, _target, _imports
    boundary.uninstall_imports(_imports)
    _imports = None
    if _patcher is not None:
        from . import integrations, trace

        trace.quiet = frozenset()

        integrations.deactivate()
        _patcher.restore()
        _uninstall_installers()
    _patcher, _target = None, None


def _uninstall_installers() -> None:
    for module in installers():
        uninstall = getattr(module, "uninstall", None)
        if uninstall is not None:
            uninstall()


def unpatch() -> None:
    """Turn translation off and restore every patched attribute of torch exactly; idempotent."""
    with _lock:
        _unpatch_locked()


@contextlib.contextmanager
def patched(*, report_available: bool | None = None, source: str | None = None) -> Iterator[Target]:
    """Context manager: translation on inside, and back to the previous state after.

    Example::

        with torchdevice.patched():
            x = torch.ones(3, device="cuda")   # on the active backend
    """
    was = is_patched()
    target = patch(report_available=report_available, source=source)
    try:
        yield target
    finally:
        if not was:
            unpatch()


def _on_backend_change() -> None:
    # use() switched backends: re-install against the new one.
    with _lock:
        if _patcher is not None:
            options = dict(_options)
            _unpatch_locked()
            patch(**options)


router.on_change(_on_backend_change)
