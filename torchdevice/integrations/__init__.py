"""Framework integrations: make a framework's own CUDA decisions work on the translation target.

Most CUDA code is written through a framework (PyTorch Lightning, accelerate,
transformers' ``Trainer``) that asks ``torch.cuda.is_available()`` and then
checks ``device.type == "cuda"`` in its own code, or drops a feature when the
device is a CPU. Translating ``torch`` alone is not enough for those: an
*integration* adapts one framework to the target while translation is on.

An integration is an object with (see :class:`Integration`, which a third party
may subclass):

* ``name``: a short lowercase name (``"lightning"``), unique;
* ``framework``: what it adapts, in words, for ``torchdevice info``;
* ``modules``: the modules whose import activates it;
* ``install(patcher, target, module)``: called once for each of ``modules``
  when that module has finished importing while translation is on (at once for
  a module imported before translation turned on; when its import finishes for
  one still importing then, as zero-code translation turning on at an
  ``import torch`` inside the framework). It changes the framework
  through ``patcher.set(obj, name, value)`` only, so that
  :func:`torchdevice.unpatch` gives every touched attribute back exactly.

Integrations reach torchdevice through the ``torchdevice_integrations`` hook
(:mod:`torchdevice.hookspecs`): a backend plugin may implement it, and a
plugin that is only an integration declares its entry point in the group
``torchdevice.integrations`` (loaded when translation turns on, even when
``TORCHDEVICE_BACKEND`` names one backend). The built-in ones (lightning,
accelerate, transformers) come through the same hook, from
:mod:`torchdevice.integrations` registered as the plugin ``integrations``.

Nothing is imported for an integration: a post-import hook (a
``sys.meta_path`` finder, added by :func:`torchdevice.patch` and removed by
:func:`torchdevice.unpatch`) waits for the watched modules. An integration
that raises is reported (``torchdevice.problems()``, a warning) and never
breaks the program's import. ``TORCHDEVICE_DISABLE_INTEGRATIONS=name,...``
(or ``all``) turns integrations off by name.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
import threading
from typing import Any

from ..hookspecs import Integration, hookimpl
from ..importhooks import AfterImport

ENV_DISABLE = "TORCHDEVICE_DISABLE_INTEGRATIONS"
GROUP = "torchdevice.integrations"
PLUGIN_NAME = "integrations"

__all__ = ["Integration", "activate", "collect", "current_target", "deactivate", "is_active", "states"]


class _State:
    """What happened to one integration in this process."""

    def __init__(self, integration: Any, plugin: str) -> None:
        self.integration = integration
        self.plugin = plugin
        self.installed: list[str] = []  # modules adapted, in order
        self.error: str | None = None
        self.disabled = False

    def status(self) -> str:
        if self.disabled:
            return f"disabled ({ENV_DISABLE})"
        if self.error:
            return f"failed: {self.error}"
        if self.installed:
            return "active: " + ", ".join(self.installed)
        if _watcher is None:
            return "inactive (translation is off)"
        return "waiting for import of " + " or ".join(self.integration.modules)


_lock = threading.RLock()
_states: dict[str, _State] = {}
_watcher: _Watcher | None = None
_patcher: Any = None
_target: Any = None
_entry_points_loaded = False


def _disabled_names() -> set[str]:
    raw = os.environ.get(ENV_DISABLE, "")
    return {n.strip().lower() for n in raw.split(",") if n.strip()}


def _load_entry_points() -> None:
    """Register the plugins of the ``torchdevice.integrations`` entry-point group (once)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from .. import plugins

    block = plugins.blocked()
    for ep in plugins.entry_points(group=GROUP):
        if ep.name in block or plugins.pm.has_plugin(ep.name) or plugins.pm.is_blocked(ep.name):
            continue
        plugins.load_entry_point(ep, kind="integration plugin")  # bounded; a broken one is reported


def collect() -> dict[str, _State]:
    """Ask every plugin for its integrations (``torchdevice_integrations``); name -> state.

    In pluggy's call order (the plugin registered last first), the first plugin to declare a name
    keeps it, and a later one is reported as a problem; the built-in plugin is asked last, so a
    plugin declaring ``"lightning"`` replaces the built-in Lightning integration.
    """
    from .. import plugins

    with _lock:
        if not plugins.pm.has_plugin(PLUGIN_NAME) and not plugins.pm.is_blocked(PLUGIN_NAME):
            plugins.register(sys.modules[__name__], name=PLUGIN_NAME, notify=False,
                             info=plugins.core_info(PLUGIN_NAME))
        _load_entry_points()
        disabled = _disabled_names()
        results = list(plugins.call_each("torchdevice_integrations"))
        results.sort(key=lambda item: item[0] == PLUGIN_NAME)  # stable: the built-ins last
        # keyed by (plugin, name): a hook may return new objects on each call; what was installed stays known
        previous = {(s.plugin, n): s for n, s in _states.items()}
        found: dict[str, _State] = {}
        for plugin, result in results:
            if plugin == PLUGIN_NAME and result:
                result = _builtins(result)
            for integration in result or ():
                name = getattr(integration, "name", None)
                problem = None
                if not isinstance(name, str) or not name:
                    problem = f"integration {integration!r} has no name"
                elif not getattr(integration, "modules", None) or not callable(getattr(integration, "install", None)):
                    problem = f"integration {name!r} needs `modules` and `install(patcher, target, module)`"
                elif name in found:
                    if found[name].integration is not integration and plugin != PLUGIN_NAME:  # a replaced built-in: fine
                        plugins.report(plugins.Problem(plugin, "torchdevice_integrations", (
                            f"integration {name!r} is already provided by plugin {found[name].plugin!r}; "
                            "this declaration is skipped")))
                    continue
                if problem or not isinstance(name, str):
                    plugins.report(plugins.Problem(plugin, "torchdevice_integrations", problem or "no name"))
                    continue
                state = previous.get((plugin, name)) or _State(integration, plugin)
                state.disabled = "all" in disabled or name.lower() in disabled
                found[name] = state
        _states.clear()
        _states.update(found)
        return dict(_states)


_builtin_objects: dict[str, Any] = {}


def _builtins(result: list) -> list:
    """The built-in integrations as the same objects every time (their state survives a re-collect)."""
    for integration in result:
        _builtin_objects.setdefault(integration.name, integration)
    return [_builtin_objects[i.name] for i in result]


def states() -> list[tuple[str, str, str, str]]:
    """``(name, plugin, framework, status)`` for every known integration (``torchdevice info``)."""
    collect()
    return [(n, s.plugin, getattr(s.integration, "framework", "") or "", s.status()) for n, s in sorted(_states.items())]


def is_active(name: str) -> bool:
    """Whether integration ``name`` has adapted at least one of its modules in this process."""
    state = _states.get(name)
    return bool(state and state.installed)


def _install(state: _State, module: Any) -> None:
    if state.disabled or state.error or module.__name__ in state.installed:
        return
    from .. import plugins

    try:
        state.integration.install(_patcher, _target, module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # never break the program's import
        state.error = f"{type(exc).__name__}: {exc}"
        plugins.record(state.plugin, f"integration {state.integration.name!r}", exc)
        from .. import trace

        trace.warn(f"torchdevice: integration {state.integration.name!r} failed on {module.__name__}: "
                   f"{state.error}; the framework runs untranslated by it")
        return
    state.installed.append(module.__name__)


def _module_imported(module: Any) -> None:
    with _lock:
        if _watcher is None:
            return
        for state in list(_states.values()):
            if module.__name__ in state.integration.modules:
                _install(state, module)


class _Watcher(AfterImport):
    """Adapts each watched module once imported (:class:`torchdevice.importhooks.AfterImport`)."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(names, _module_imported)


class _FinishingSpec(importlib.machinery.ModuleSpec):
    """The class a still-initializing watched module's spec takes until its import finishes.

    Zero-code translation turns on inside ``import torch``, which may sit at the top of a watched
    module (``from accelerate import Accelerator`` first: ``accelerate.accelerator`` imports torch
    before it defines ``Accelerator``). Such a module is in ``sys.modules`` but half-made, and its
    loader is already running, so the loader cannot be wrapped. The import system marks the end by
    setting ``spec._initializing = False`` (``importlib._bootstrap._load_unlocked``): this class
    hears that, becomes a plain ``ModuleSpec`` again and adapts the module.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "_initializing" and not value:
            object.__setattr__(self, "__class__", importlib.machinery.ModuleSpec)
            with _lock:
                _finishing.pop(self.name, None)
            module = sys.modules.get(self.name)
            if module is not None and getattr(module, "__spec__", None) is self:  # not a failed import
                _module_imported(module)


_finishing: dict[str, Any] = {}  # module name -> its spec, while a _FinishingSpec


def _when_imported(module: Any) -> None:
    """Adapt ``module``, found in ``sys.modules`` at activation: now, or when its import finishes."""
    spec = getattr(module, "__spec__", None)
    if getattr(spec, "_initializing", False) and type(spec) is importlib.machinery.ModuleSpec:
        try:
            spec.__class__ = _FinishingSpec
        except TypeError:
            pass
        else:
            _finishing[module.__name__] = spec
            return
    _module_imported(module)


def activate(patcher: Any, target: Any) -> None:
    """Called by :func:`torchdevice.patch` after its commit: watch the integrations' modules, and
    adapt the ones already imported. Their changes go through ``patcher`` (undone by ``unpatch``)."""
    global _watcher, _patcher, _target
    with _lock:
        deactivate()
        try:
            collect()
        except Exception as exc:  # integrations are an extra: translation goes on without them
            from .. import trace

            trace.warn(f"torchdevice: framework integrations are off: {type(exc).__name__}: {exc}",
                       RuntimeWarning)
            return
        for state in _states.values():
            state.installed.clear()
            state.error = None
        names = {m for s in _states.values() if not s.disabled for m in s.integration.modules}
        if not names:
            return
        _patcher, _target = patcher, target
        _watcher = _Watcher(names)
        sys.meta_path.insert(0, _watcher)
        for name in sorted(names):
            module = sys.modules.get(name)
            if module is not None:
                _when_imported(module)


def current_target() -> Any:
    """The translation target the integrations are active for (None when translation is off or no
    integration watches a module); integrations read it at call time instead of importing
    :mod:`torchdevice.translate`, which imports this package."""
    return _target


def deactivate() -> None:
    """Called by :func:`torchdevice.unpatch`: stop watching (the patcher undoes the changes)."""
    global _watcher, _patcher, _target
    with _lock:
        if _watcher is not None:
            try:
                sys.meta_path.remove(_watcher)
            except ValueError:
                pass
        _watcher, _patcher, _target = None, None, None
        for spec in _finishing.values():  # still importing: nothing to adapt any more
            spec.__class__ = importlib.machinery.ModuleSpec
        _finishing.clear()
        for state in _states.values():
            state.installed.clear()


# -- the built-in integrations, registered like any plugin's ----------------------------------


@hookimpl
def torchdevice_integrations() -> list[Integration]:
    from .accelerate import AccelerateIntegration
    from .lightning import LightningIntegration
    from .transformers import TransformersIntegration

    return [LightningIntegration(), AccelerateIntegration(), TransformersIntegration()]
