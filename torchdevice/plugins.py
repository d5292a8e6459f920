"""Finding and loading backend plugins, and calling their hooks in isolation.

Plugins are entry points of group ``torchdevice``. ``TORCHDEVICE_PLUGINS``
(a comma-separated list of entry-point names) loads only those;
``TORCHDEVICE_DISABLE_PLUGINS`` blocks the ones it names. The built-in CPU
backend always loads, through the same hooks.

A plugin that fails to import, fails validation, or raises inside a hook is
recorded as a :class:`Problem` and skipped; it never stops the others. That is
why hooks are called one implementation at a time here rather than through
pluggy's own loop, which stops at the first exception.

Discovery is bounded: importing a plugin and asking it ``torchdevice_backends``
and ``torchdevice_availability`` each get ``TORCHDEVICE_PLUGIN_TIMEOUT``
seconds (default 10, ``0``: no limit); a plugin that takes longer is
interrupted and reported like one that raised. The limit is a ``SIGALRM``
timer, so it applies on POSIX systems, in the main thread, when no other
timer is running, and only to code that returns to the Python interpreter
(a hang inside a C call cannot be interrupted, nor can ``os._exit``: block
such a plugin with ``TORCHDEVICE_DISABLE_PLUGINS``).

The loader API, used by this module and by the integration loader
(:mod:`torchdevice.integrations`, entry-point group ``torchdevice.integrations``):
:func:`load_entry_point` imports and registers one entry point's plugin within
:func:`deadline`, reporting a failure; :func:`record` turns an exception a
plugin raised into a :class:`Problem`; :func:`core_info` is the
:class:`PluginInfo` of a plugin that is part of torchdevice itself;
:func:`entry_points`, :func:`blocked`, :func:`register` and :func:`call_each`
find, filter, add and ask plugins.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import signal
import sys
import threading
import traceback
from importlib.metadata import EntryPoint
from types import FrameType
from typing import Any, Callable, Collection, Iterable, Iterator, NamedTuple, NoReturn

import pluggy

from . import hookspecs

GROUP = "torchdevice"
BUILTIN = "cpu"
ENV_TIMEOUT = "TORCHDEVICE_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT = 10.0
#: hooks a plugin is asked at discovery, bounded by ENV_TIMEOUT (resolution hooks may
#: legitimately initialise a device, which can take long)
BOUNDED_HOOKS = frozenset({"torchdevice_backends", "torchdevice_availability"})


class Problem(NamedTuple):
    """Something a plugin did wrong: failed to ``import``, failed ``validate``, or raised in a hook."""

    plugin: str
    stage: str
    error: str
    detail: str = ""

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} ({self.stage}): {self.error}"


class PluginInfo(NamedTuple):
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


def record(plugin: str, stage: str, exc: BaseException) -> Problem:
    """Record ``exc``, raised by ``plugin`` at ``stage`` (``"import"``, a hook's name ...), as a
    :class:`Problem` carrying its traceback; once, as :func:`report` does."""
    error = f"{type(exc).__name__}: {exc}"
    return report(Problem(plugin, stage, error, "".join(traceback.format_exception(exc))))


def _env_names(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


class PluginTimeout(BaseException):
    """Raised into a plugin that overran ``TORCHDEVICE_PLUGIN_TIMEOUT`` (a BaseException, so a
    plugin's ``except Exception`` does not swallow it)."""


_timeout_warned = False


def timeout() -> float:
    """Seconds a plugin may take per bounded discovery step (``TORCHDEVICE_PLUGIN_TIMEOUT``); 0: none."""
    global _timeout_warned
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
        if not value >= 0 or value == float("inf"):
            raise ValueError
        return value
    except ValueError:
        if not _timeout_warned:
            _timeout_warned = True
            import warnings

            warnings.warn_explicit(
                f"torchdevice: {ENV_TIMEOUT}={raw!r} is not a number of seconds >= 0 (0: no limit); "
                f"using {DEFAULT_TIMEOUT:g}", RuntimeWarning, "<torchdevice>", 0, module="torchdevice.plugins")
        return DEFAULT_TIMEOUT


@contextlib.contextmanager
def deadline(what: str) -> Iterator[None]:
    """Interrupt the block with :class:`PluginTimeout` after :func:`timeout` seconds, where a
    SIGALRM timer can be used (main thread, POSIX, no timer of the program's running); ``what``
    names the step in the timeout's message (``"importing plugin 'x'"``)."""
    seconds = timeout()
    if (not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def overran(signum: int, frame: FrameType | None) -> NoReturn:
        raise PluginTimeout(f"{what} took longer than {seconds:g} s ({ENV_TIMEOUT}); interrupted")

    previous = signal.signal(signal.SIGALRM, overran)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _call(plugin: str, hook: str, impl: pluggy.HookImpl, kwargs: dict[str, Any]) -> Any:
    """One implementation's result; discovery hooks under a deadline, and the backend list
    materialised inside it (a generator failing or hanging half-way fails here)."""
    if hook not in BOUNDED_HOOKS:
        return impl.function(*[kwargs[arg] for arg in impl.argnames])
    # the built-in backend is torchdevice's own code, which answers at once: arming a timer for it would cost
    # activation more than the answer does
    bound = contextlib.nullcontext() if impl.plugin is _builtin else deadline(f"plugin {plugin!r}'s {hook}")
    with bound:
        result = impl.function(*[kwargs[arg] for arg in impl.argnames])
        if hook == "torchdevice_backends" and result is not None:
            result = _spec_list(result)
        return result


_builtin: object = None  # the built-in CPU plugin object, once registered


def _load_builtin() -> None:
    global _builtin
    if not pm.has_plugin(BUILTIN) and not pm.is_blocked(BUILTIN):
        from .cpu import plugin as cpu_plugin

        pm.register(cpu_plugin, name=BUILTIN)
        _builtin = cpu_plugin
        plugin_info[BUILTIN] = core_info(BUILTIN)


def core_info(name: str) -> PluginInfo:
    """The :class:`PluginInfo` of a plugin that is part of torchdevice itself (distribution
    ``torchdevice``, the core's version): the built-in CPU backend, the built-in integrations."""
    from . import __version__  # the package itself: already initialised, nothing is loaded

    return PluginInfo(name, "torchdevice", __version__)


_entry_point_cache: tuple[tuple[str, ...], list[EntryPoint]] | None = None
#: a section header of one of torchdevice's entry-point groups (``[torchdevice]``, ``[torchdevice.integrations]``)
_OUR_SECTION = re.compile(r"^\s*\[torchdevice[\].]", re.MULTILINE)


def entry_points(*, group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``, from one metadata scan per ``sys.path``.

    ``importlib.metadata`` reads every installed distribution; activation asks for two groups
    (backends, integrations), so the scan is kept while ``sys.path`` is unchanged.
    """
    global _entry_point_cache
    key = tuple(sys.path)
    if _entry_point_cache is None or _entry_point_cache[0] != key:
        _entry_point_cache = (key, _scan())
    return [ep for ep in _entry_point_cache[1] if ep.group == group]


def _scan() -> list[EntryPoint]:
    """The entry points of torchdevice's groups as ``importlib.metadata.entry_points()`` lists them
    (one distribution per name, the first found on ``sys.path``), parsing only the distributions whose
    ``entry_points.txt`` has such a group: parsing every group of every installed distribution (console
    scripts, pytest plugins ...) cost activation about a third more."""
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = dist._normalized_name  # type: ignore[attr-defined]  # entry_points()'s own key for "one per name"
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and _OUR_SECTION.search(text):
            found += [ep for ep in dist.entry_points if ep.group == GROUP or ep.group.startswith(GROUP + ".")]
    return found


def load_only(name: str) -> bool:
    """Load the built-in backend and the one allowed entry point called ``name`` (nothing else);
    False when there is no such entry point (a full :func:`load` is then needed)."""
    if _loaded:
        return True
    _load_builtin()
    _check_env_names()
    if name == BUILTIN:
        return True
    eps = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not eps:
        return False
    _load_entry_points(eps)
    return True


def load() -> None:
    """Register the built-in CPU backend and every allowed entry point, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    _load_builtin()
    _load_entry_points(entry_points(group=GROUP))
    _check_env_names()


_env_checked = False


def _check_env_names() -> None:
    global _env_checked
    if not _env_checked:
        _env_checked = True
        _warn_unknown(_env_names("TORCHDEVICE_PLUGINS"), "TORCHDEVICE_PLUGINS")
        _warn_unknown(_env_names("TORCHDEVICE_DISABLE_PLUGINS"), "TORCHDEVICE_DISABLE_PLUGINS")


def _load_entry_points(eps: Iterable[EntryPoint]) -> None:
    allow = _env_names("TORCHDEVICE_PLUGINS")
    block = _env_names("TORCHDEVICE_DISABLE_PLUGINS") or set()
    for ep in eps:
        if (allow is not None and ep.name not in allow) or ep.name in block:
            continue
        if pm.has_plugin(ep.name) or pm.is_blocked(ep.name) or ep.name in plugin_info:
            continue
        load_entry_point(ep)


def load_entry_point(ep: EntryPoint, kind: str = "plugin") -> bool:
    """Import the plugin of entry point ``ep`` within :func:`deadline` and :func:`register` it under
    the entry point's name (no change notification: the caller is discovering); whether it was.

    A plugin that fails to import (stage ``"import"``, a hanging import included) or to register
    (``"validate"``: a misspelled hookimpl) is recorded as a :class:`Problem`, with its
    :class:`PluginInfo`, and never raises, except ``KeyboardInterrupt``. ``kind`` names it in the
    timeout's message (``"importing integration plugin 'x' took longer ..."``).
    """
    dist = getattr(ep, "dist", None)
    info = PluginInfo(ep.name, dist.name if dist else None, dist.version if dist else None)
    stage = "import"
    try:
        with deadline(f"importing {kind} {ep.name!r}"):
            plugin = ep.load()
        stage = "validate"  # e.g. a misspelled hookimpl, caught by check_pending()
        register(plugin, name=ep.name, info=info, notify=False)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a broken (or exiting) plugin is reported, never fatal
        plugin_info[ep.name] = info
        record(ep.name, stage, exc)
        return False
    return True


def blocked() -> set[str]:
    """Entry-point names that ``TORCHDEVICE_DISABLE_PLUGINS`` blocks."""
    return _env_names("TORCHDEVICE_DISABLE_PLUGINS") or set()


def _warn_unknown(names: set[str] | None, var: str) -> None:
    """A name in ``var`` that is no entry point (a typo) is reported, not silently ignored."""
    if not names:
        return
    known = {ep.name for ep in entry_points(group=GROUP)} | {BUILTIN}
    unknown = sorted(names - known)
    if unknown:
        import warnings

        warnings.warn_explicit(
            f"torchdevice: {var} names {', '.join(map(repr, unknown))}, which no installed plugin provides; "
            f"installed entry points: {', '.join(sorted(known))}",
            RuntimeWarning, "<torchdevice>", 0, module="torchdevice.plugins",
        )


def register(plugin: object, name: str | None = None, info: PluginInfo | None = None, notify: bool = True) -> str:
    """Register a plugin object (module or instance with hookimpls); return its name.

    Raises ``pluggy.PluginValidationError`` if a hook implementation does not
    match its spec (misspelled hook, unknown argument).
    """
    registered = pm.register(plugin, name=name)
    if registered is None:  # pluggy's answer for a blocked name
        raise ValueError(f"plugin name {name!r} is blocked (TORCHDEVICE_DISABLE_PLUGINS); it was not registered")
    name = registered
    try:
        pm.check_pending()
    except pluggy.PluginValidationError:
        pm.unregister(plugin)
        raise
    plugin_info[name] = info or PluginInfo(name, None, None)
    _check_marked(plugin, name)
    if notify:
        _changed()
    return name


#: the hooks of :mod:`torchdevice.hookspecs`, by name
HOOK_NAMES = tuple(sorted(n for n in vars(hookspecs) if n.startswith("torchdevice_")))


def unmarked_hooks(plugin: object) -> list[str]:
    """Hook names that ``plugin`` defines as plain callables, without ``@hookimpl``: pluggy never calls them
    (a ``Backend`` subclass overriding ``torchdevice_backends`` undecorated loses that hook)."""
    implemented = {caller.name for caller in pm.get_hookcallers(plugin) or ()}
    found = []
    for hook in HOOK_NAMES:
        try:
            if hook not in implemented and callable(getattr(plugin, hook, None)):
                found.append(hook)
        except Exception:  # an odd plugin object's __getattr__: not ours to report
            continue
    return found


def _check_marked(plugin: object, name: str) -> None:
    """Report a registered plugin that implements no hook, or defines hook-named functions without ``@hookimpl``
    (it registers fine, then silently declares nothing)."""
    unmarked = unmarked_hooks(plugin)
    lack = f": {', '.join(unmarked)} {'lacks' if len(unmarked) == 1 else 'lack'} the marker" if unmarked else ""
    if not pm.get_hookcallers(plugin):
        report(Problem(name, "register", f"implements no torchdevice hook (did you forget @hookimpl?){lack}"))
    elif unmarked:
        report(Problem(name, "register", f"defines {', '.join(unmarked)} without @hookimpl, "
                                         "so torchdevice never calls it (did you forget @hookimpl?)"))


def unregister(name: str) -> None:
    """Remove a registered plugin by name."""
    pm.unregister(name=name)
    plugin_info.pop(name, None)
    _changed()


_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after a plugin is registered or unregistered (the router subscribes: it
    caches hook results, which a new plugin set invalidates)."""
    _listeners.append(listener)


def _changed() -> None:
    for listener in list(_listeners):
        listener()


def call_each(hook: str, errors: list[Problem] | None = None, skip: Collection[str] = frozenset(),
              **kwargs: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(plugin_name, result)`` for every implementation, in pluggy's call order.

    Plugins named in ``skip`` are not called. An implementation that raises
    is recorded as a Problem (also appended to ``errors`` when given) and
    skipped.
    """
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        if impl.plugin_name in skip:
            continue
        try:
            result = _call(impl.plugin_name, hook, impl, kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            problem = record(impl.plugin_name, hook, exc)
            if errors is not None:
                errors.append(problem)
            continue
        yield impl.plugin_name, result


def _spec_list(result: Any) -> list[Any]:
    """``torchdevice_backends``' result as a list; a single spec, a str or a number is an error."""
    from .backend import BackendSpec

    if isinstance(result, (BackendSpec, str, bytes, int, float)) or not hasattr(result, "__iter__"):
        raise TypeError(f"torchdevice_backends must return a list of BackendSpec, got {result!r}")
    return list(result)


def call_owner(hook: str, plugin: str, errors: list[Problem] | None = None,
               **kwargs: Any) -> tuple[str, Any] | tuple[None, None]:
    """Return the result of ``plugin``'s own implementation of ``hook``, or ``(None, None)``
    when that plugin has none (then the caller may ask the others). Errors as in :func:`call_each`."""
    for impl in getattr(pm.hook, hook).get_hookimpls():
        if impl.plugin_name != plugin:
            continue
        try:
            return plugin, _call(plugin, hook, impl, kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            problem = record(plugin, hook, exc)
            if errors is not None:
                errors.append(problem)
            return plugin, None
    return None, None


def call_first(hook: str, errors: list[Problem] | None = None, skip: Collection[str] = frozenset(),
               **kwargs: Any) -> tuple[str, Any] | tuple[None, None]:
    """Return ``(plugin_name, result)`` of the first non-None result, or ``(None, None)``."""
    for plugin, result in call_each(hook, errors, skip, **kwargs):
        if result is not None:
            return plugin, result
    return None, None

