"""Finding and loading backend plugins, and calling their hooks in isolation.

Plugins are entry points of group ``torchdevice``. ``TORCHDEVICE_PLUGINS``
(a comma-separated list of entry-point names) loads only those;
``TORCHDEVICE_DISABLE_PLUGINS`` blocks the ones it names. The built-in CPU
backend always loads, through the same hooks.

A plugin that fails to import, fails validation, or raises inside a hook is
recorded as a :class:`Problem` and skipped; it never stops the others. That is
why hooks are called one implementation at a time here rather than through
pluggy's own loop, which stops at the first exception.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from importlib.metadata import entry_points

import pluggy

from . import hookspecs

GROUP = "torchdevice"
BUILTIN = "cpu"


@dataclass(frozen=True)
class Problem:
    """Something a plugin did wrong: failed to ``import``, failed ``validate``, or raised in a hook."""

    plugin: str
    stage: str
    error: str
    detail: str = ""

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} ({self.stage}): {self.error}"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None


pm = pluggy.PluginManager(hookspecs.PROJECT)
pm.add_hookspecs(hookspecs)
problems: list[Problem] = []
plugin_info: dict[str, PluginInfo] = {}
_loaded = False


def report(problem: Problem) -> Problem:
    """Record a problem once: rediscovery (after use()) meets the same failures again."""
    for known in problems:
        if (known.plugin, known.stage, known.error) == (problem.plugin, problem.stage, problem.error):
            return known
    problems.append(problem)
    return problem


def _record(plugin: str, stage: str, exc: BaseException) -> Problem:
    error = f"{type(exc).__name__}: {exc}"
    return report(Problem(plugin, stage, error, "".join(traceback.format_exception(exc))))


def _env_names(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def load() -> None:
    """Register the built-in CPU backend and every allowed entry point, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from .cpu import plugin as cpu_plugin

    pm.register(cpu_plugin, name=BUILTIN)
    plugin_info[BUILTIN] = PluginInfo(BUILTIN, "torchdevice", _core_version())
    allow = _env_names("TORCHDEVICE_PLUGINS")
    block = _env_names("TORCHDEVICE_DISABLE_PLUGINS") or set()
    for ep in entry_points(group=GROUP):
        if (allow is not None and ep.name not in allow) or ep.name in block:
            continue
        if pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
            continue
        dist = getattr(ep, "dist", None)
        info = PluginInfo(ep.name, dist.name if dist else None, dist.version if dist else None)
        stage = "import"
        try:
            plugin = ep.load()
            stage = "validate"  # e.g. a misspelled hookimpl, caught by check_pending()
            register(plugin, name=ep.name, info=info, notify=False)
        except (Exception, SystemExit) as exc:  # a broken (or exiting) plugin is reported, never fatal
            plugin_info[ep.name] = info
            _record(ep.name, stage, exc)


def register(plugin, name: str | None = None, info: PluginInfo | None = None, notify: bool = True) -> str:
    """Register a plugin object (module or instance with hookimpls); return its name.

    Raises ``pluggy.PluginValidationError`` if a hook implementation does not
    match its spec (misspelled hook, unknown argument).
    """
    name = pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError:
        pm.unregister(plugin)
        raise
    plugin_info[name] = info or PluginInfo(name, None, None)
    if notify:
        _changed()
    return name


def unregister(name: str) -> None:
    """Remove a registered plugin by name."""
    pm.unregister(name=name)
    plugin_info.pop(name, None)
    _changed()


def _changed() -> None:
    from . import router  # the router caches hook results; a new plugin set invalidates them

    router.invalidate()


def call_each(hook: str, errors: list | None = None, skip=frozenset(), **kwargs):
    """Yield ``(plugin_name, result)`` for every implementation, in pluggy's call order.

    Plugins named in ``skip`` are not called. An implementation that raises
    is recorded as a Problem (also appended to ``errors`` when given) and
    skipped.
    """
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        if impl.plugin_name in skip:
            continue
        try:
            result = impl.function(*[kwargs[arg] for arg in impl.argnames])
        except (Exception, SystemExit) as exc:
            problem = _record(impl.plugin_name, hook, exc)
            if errors is not None:
                errors.append(problem)
            continue
        yield impl.plugin_name, result


def call_first(hook: str, errors: list | None = None, skip=frozenset(), **kwargs):
    """Return ``(plugin_name, result)`` of the first non-None result, or ``(None, None)``."""
    for plugin, result in call_each(hook, errors, skip, **kwargs):
        if result is not None:
            return plugin, result
    return None, None


def _core_version() -> str:
    from . import __version__

    return __version__
