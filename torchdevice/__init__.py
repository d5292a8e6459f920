"""torchdevice: run accelerator-specific PyTorch code on whatever accelerator is here.

The core is a router over pluggy plugins (:mod:`torchdevice.hookspecs`). Each
backend -- CUDA, MPS, XPU, MTIA, MLX, and the built-in CPU -- is declared by a
plugin (the CPU one by the built-in plugin, through the same hooks); the router
picks the highest-priority available one, or the one named by :func:`use` or
``TORCHDEVICE_BACKEND``. The functions re-exported here are a device-agnostic
API over the active backend (see :mod:`torchdevice.api`). ``docs/architecture.md``
maps the package's layers.
"""
from __future__ import annotations

from typing import Any, Literal

__version__ = "1.0.0"

from . import router as _router
from .api import *  # noqa: F401,F403  (the public device-agnostic API)
from .api import __all__ as _api_all
from .backend import (
    Availability,
    Backend,
    BackendSpec,
    CollectiveOps,
    DeviceProperties,
    MemoryOps,
    RNGOps,
    Status,
    StreamOps,
)
from .errors import (
    BackendNotFoundError,
    BackendUnavailableError,
    InvalidDeviceError,
    SensorUnavailableError,
    TorchDeviceError,
    UnsupportedError,
)
from .hookspecs import hookimpl
from .router import BackendRecord
from .translate import is_patched, patch, patched, unpatch


class use:
    """Make ``name`` the active backend; ``None`` returns to automatic selection.

    Takes precedence over ``TORCHDEVICE_BACKEND`` and priorities. An unknown
    or unavailable name raises, naming what is known and available. Works as
    a plain call or as a context manager that restores the previous choice::

        torchdevice.use("mlx")
        with torchdevice.use("cpu"):
            ...
    """

    def __init__(self, name: str | None):
        self._previous = _router.requested()
        _router.use(name)
        self.name = name

    def __enter__(self) -> "use":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        _router.use(self._previous)
        return False

    def __repr__(self) -> str:
        return f"torchdevice.use({self.name!r})"


def backends() -> list[BackendRecord]:
    """List every discovered backend, best priority first.

    Each :class:`~torchdevice.router.BackendRecord` gives the plugin,
    distribution and version, device type, priority, availability or why not,
    and whether it is selected. Plugins that failed to import are listed as
    unavailable with the error. Example::

        >>> [b.name for b in torchdevice.backends() if b.available]
        ['cpu']
    """
    try:
        _router.active()  # marks the selected record
    except TorchDeviceError:
        pass  # reported through the records themselves (e.g. TORCHDEVICE_BACKEND=nope)
    records = _router.discover().values()
    return sorted(records, key=lambda r: (r.priority is None, -(r.priority or 0), r.name))


def problems() -> list:
    """Return every :class:`~torchdevice.plugins.Problem` recorded while loading plugins or calling hooks."""
    from . import plugins

    _router.discover()
    return list(plugins.problems)


def __getattr__(name: str) -> Any:
    # Stream and Event are the active backend's classes; looked up, not cached, so use() switches them.
    if name in ("Stream", "Event"):
        return getattr(_router.active().streams, name)
    raise AttributeError(f"module 'torchdevice' has no attribute {name!r}")


__all__ = [
    "use", "backends", "problems", "hookimpl", "Backend", "BackendSpec", "Availability",
    "DeviceProperties", "MemoryOps", "StreamOps", "RNGOps", "CollectiveOps", "Status",
    "TorchDeviceError", "BackendNotFoundError", "BackendUnavailableError", "UnsupportedError",
    "SensorUnavailableError", "InvalidDeviceError", "Stream", "Event", "patch", "unpatch", "patched", "is_patched", *_api_all,
]


_ready = True  # zero-code activation waits for this when `import torchdevice` imported torch


def _is_command() -> bool:
    """Whether this process is the ``torchdevice`` command (console script or ``python -m``)."""
    import os
    import sys

    return os.path.basename(sys.argv[0]) == "torchdevice" or list(getattr(sys, "orig_argv", ()))[1:3] == [
        "-m", "torchdevice"]


def _run_pending_autoload() -> None:
    try:
        import _torchdevice_autoload
    except ImportError:  # running from a source tree without the entry-point shim
        return
    if _torchdevice_autoload.pending:
        _torchdevice_autoload.pending = False
        if _is_command():
            return  # the command reports selection errors itself (once); `run` turns translation on
        from . import autoload

        autoload.hook()


_run_pending_autoload()
