"""The hooks a torchdevice backend plugin implements.

A plugin is any object or module registered under the entry-point group
``torchdevice`` (or passed to :func:`torchdevice.plugins.register`). It
implements some of the hooks below with ``@torchdevice.hookimpl``; most plugins
subclass :class:`torchdevice.backend.Backend`, which implements all of them.

Five families, one hook each (the operation families of :mod:`torchdevice.backend`):

* device discovery: :func:`torchdevice_backends`, :func:`torchdevice_availability`,
  :func:`torchdevice_device_count`, :func:`torchdevice_device_properties`;
* memory: :func:`torchdevice_memory`;
* streams/events (and the per-thread current device): :func:`torchdevice_streams`;
* RNG: :func:`torchdevice_rng`;
* collectives: :func:`torchdevice_collectives`.

and one more, not about a backend: :func:`torchdevice_integrations`, the
framework integrations (Lightning, accelerate ...) a plugin contributes.

Every hook is called at discovery or resolution time only -- never on a hot
path. The router caches what the hooks return and calls them again only after
:func:`torchdevice.use` or a plugin (un)registration. Every hook but
:func:`torchdevice_backends` takes the backend's ``name`` and is ``firstresult``:
an implementation returns ``None`` for backends that are not its own, and the
first non-``None`` result wins (so a plugin marked ``tryfirst=True`` can
override one family of another plugin's backend).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import pluggy

if TYPE_CHECKING:  # the hooks' argument and result types (backend imports this module for hookimpl)
    from .backend import Availability, BackendSpec, CollectiveOps, DeviceProperties, MemoryOps, RNGOps, StreamOps

PROJECT = "torchdevice"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- device discovery ---------------------------------------------------------


@hookspec
def torchdevice_backends() -> Sequence[BackendSpec] | None:
    """Declare the backends this plugin provides.

    Called once per discovery, for every plugin. Returns a list of
    :class:`torchdevice.backend.BackendSpec` (name, torch device type, priority,
    description). All results are collected; the first result does not win.
    Two plugins declaring the same name is reported as a conflict: the one
    registered first keeps it, and the later one is never asked about it.
    """


@hookspec(firstresult=True)
def torchdevice_availability(name: str) -> Availability | None:
    """Say whether backend ``name`` can run on this machine, and why not.

    Called once per discovery for each declared backend. Returns a
    :class:`torchdevice.backend.Availability` (``available``, ``reason``), or
    ``None`` if ``name`` is not this plugin's. First result wins. Must not
    raise for a missing driver or library: return ``Availability(False, why)``.
    """


@hookspec(firstresult=True)
def torchdevice_device_count(name: str) -> int | None:
    """Return how many devices backend ``name`` has (an ``int``).

    Called once, when an available backend is first resolved; the count is
    cached for the life of the process, as CUDA caches its own. First result
    wins; ``None`` means "not my backend".
    """


@hookspec(firstresult=True)
def torchdevice_device_properties(name: str, index: int) -> DeviceProperties | None:
    """Return a :class:`torchdevice.backend.DeviceProperties` for device ``index``.

    Gives the device's name, total memory, compute capability and the
    backend's raw property object. Called at most once per (backend, index)
    and cached. First result wins; ``None`` means "not my backend".
    """


# -- memory -------------------------------------------------------------------


@hookspec(firstresult=True)
def torchdevice_memory(name: str) -> MemoryOps | None:
    """Return the :class:`torchdevice.backend.MemoryOps` of backend ``name``.

    Called once when the backend is resolved; the object is cached and its
    methods (``memory_allocated``, ``max_memory_allocated``, ``memory_stats``,
    ``empty_cache`` ...) are called directly from then on. First result wins.
    """


# -- streams and events ---------------------------------------------------------


@hookspec(firstresult=True)
def torchdevice_streams(name: str) -> StreamOps | None:
    """Return the :class:`torchdevice.backend.StreamOps` of backend ``name``.

    It owns execution state: the per-thread current device, the ``Stream`` and
    ``Event`` classes, the current and default stream, and ``synchronize``.
    Called once when the backend is resolved and cached. First result wins.
    """


# -- random numbers -------------------------------------------------------------


@hookspec(firstresult=True)
def torchdevice_rng(name: str) -> RNGOps | None:
    """Return the :class:`torchdevice.backend.RNGOps` of backend ``name``.

    Seeding, initial seed, and generator state get/set per device. Called
    once when the backend is resolved and cached. First result wins.
    """


# -- collectives ----------------------------------------------------------------


@hookspec(firstresult=True)
def torchdevice_collectives(name: str) -> CollectiveOps | None:
    """Return the :class:`torchdevice.backend.CollectiveOps` of backend ``name``.

    Declares which ``torch.distributed`` backend (``"gloo"``, ``"nccl"``,
    ``"xccl"`` ...) carries this backend's tensors, and implements the
    single-process multi-device collectives of ``torch.cuda.comm``. Called
    once when the backend is resolved and cached. First result wins.
    """


# -- framework integrations -------------------------------------------------------


@hookspec
def torchdevice_integrations() -> Sequence[Integration] | None:
    """Declare framework integrations: objects adapting a framework's own CUDA checks to the target.

    Called when translation turns on (:func:`torchdevice.patch`), for every
    plugin; all results are collected (a list each). An integration has a
    ``name`` (str), a ``framework`` (str, for ``torchdevice info``), ``modules``
    (a tuple of module names) and ``install(patcher, target, module)``, called
    once per watched module when it has been imported while translation is on;
    it changes objects only through ``patcher.set`` so that ``unpatch()`` undoes
    it. See :class:`torchdevice.integrations.Integration`. Nothing is imported
    until the program imports a watched module. The first plugin to declare a
    name keeps it; a plugin's integration replaces a built-in one (lightning,
    accelerate, transformers) of the same name. A plugin that is only an
    integration registers under the entry-point group
    ``torchdevice.integrations`` instead of ``torchdevice`` (a worked example:
    docs/plugins.md, "Framework integrations").
    """


# -- what torchdevice_integrations returns --------------------------------------
# Defined beside the hooks: it is the hook's contract. The machinery that collects, watches and installs
# integrations is torchdevice.integrations (which re-exports it as torchdevice.integrations.Integration).


class Integration:
    """Base class of a framework integration (subclassing is optional: the attributes are what counts).

    ``install`` is called once for each of :attr:`modules`, when that module has been imported while
    translation is on; it changes the framework only through ``patcher.set(obj, name, value)``, so that
    :func:`torchdevice.unpatch` gives every touched attribute back exactly.
    """

    #: short unique lowercase name, e.g. ``"lightning"``
    name: str = ""
    #: what it adapts, in words (``torchdevice info``)
    framework: str = ""
    #: modules whose import activates it (``install`` is called once per module)
    modules: tuple[str, ...] = ()

    def install(self, patcher: Any, target: Any, module: Any) -> None:
        """Adapt ``module`` (one of :attr:`modules`, just imported) to ``target`` through ``patcher``."""
        raise NotImplementedError
