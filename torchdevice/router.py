"""Backend discovery and selection.

Selection order: :func:`use` > ``TORCHDEVICE_BACKEND`` > the highest-priority
backend that is available for automatic selection. ``TORCHDEVICE_PRIORITY``
(``"mlx=150,cuda=10"``) overrides declared priorities.

Hooks run here only: once at discovery, once when the active backend is
resolved. The result is a :class:`Target`, cached until :func:`use`
or a plugin (un)registration calls :func:`invalidate`. Everything on a hot
path reads that cached object.
"""
from __future__ import annotations

import os
import re
import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, cast

from . import plugins
from .backend import (
    Availability,
    BackendSpec,
    CollectiveOps,
    DeviceProperties,
    MemoryOps,
    RNGOps,
    Status,
    StreamOps,
    status_of,
)
from .errors import BackendNotFoundError, BackendUnavailableError, ConfigError, InvalidDeviceError, TorchDeviceError
from .vocabulary import SOURCE_FAMILIES, parse_index

if TYPE_CHECKING:
    from torch.types import Device

ENV_BACKEND = "TORCHDEVICE_BACKEND"
ENV_PRIORITY = "TORCHDEVICE_PRIORITY"


@dataclass(eq=False)  # a mutable record (selection, problems) compared by identity; no __eq__ to generate at import
class BackendRecord:
    """One discovered backend, as :func:`torchdevice.backends` reports it."""

    name: str
    plugin: str
    distribution: str | None
    version: str | None
    device_type: str | None
    priority: int | None
    available: bool
    reason: str
    automatic: bool = True
    selected: bool = False
    problems: list[str] = field(default_factory=list)
    description: str = ""  #: the plugin's one-line description of the backend

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def _other_families(device_type: str) -> frozenset[str]:
    """The source families translated to ``device_type``: every one but the device type itself."""
    return frozenset(t for t in SOURCE_FAMILIES if t != device_type)


@dataclass(eq=False)  # one object per resolution or per patch(): compared by identity
class Target:
    """A backend as the API, translation and the matrix see it: the one snapshot of a backend.

    :func:`active` resolves the active backend into one (its operation objects, asked of its
    plugin once) and caches it until :func:`use` or a plugin change; everything on a hot path
    reads that object. :func:`torchdevice.translate.patch` installs translation against a copy
    carrying the translation options (:meth:`translating`: ``report_available``, ``source``, and a
    fresh :attr:`state`); :mod:`torchdevice.matrix` builds one for every installed backend from
    its plugin's family hooks, whether or not its hardware is present (an operation family the
    plugin failed to give is then None). The status rules of :mod:`torchdevice.namespaces` read
    it (:meth:`op`), and the builders of the fronted functions close over it (:meth:`index`).
    """

    name: str  #: the backend's name, e.g. ``"cpu"``, ``"mlx"``, ``"cuda"``
    device_type: str  #: the torch device type its tensors live on
    device_count: int
    memory: MemoryOps
    streams: StreamOps
    rng: RNGOps
    collectives: CollectiveOps
    priority: int = 0
    owner: str = ""  #: the plugin that declared this backend (the one asked about it)
    #: source families translated to :attr:`device_type` (None: every one but the device type itself)
    sources: frozenset[str] = None  # type: ignore[assignment]  # filled in by __post_init__
    #: what ``torch.cuda.is_available()`` etc. answer on an accelerator-less target
    report_available: bool = True
    #: the family the program is written for: the only fronted namespace whose ``is_available()`` is True
    source: str = "cuda"
    #: device properties asked of the plugin so far, by index (shared by the copies :meth:`translating` makes)
    _properties: dict[int, DeviceProperties] = field(default_factory=dict)
    #: what one namespace install keeps: the objects built so far (``"cuda.device"``), for builders
    #: that need another one, and ``"sync_debug_mode"``; fresh in each copy :meth:`translating` makes
    state: dict[str, Any] = field(default_factory=dict)
    #: whether the target claims devices at all (before the source-family rule); set by __post_init__
    available: bool = field(init=False)
    #: ``index(device)``: a device argument as a valid index (the current device for ``None``)
    index: Callable[..., int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.sources is None:
            self.sources = _other_families(self.device_type)
        self.available = bool(self.report_available or self.indexed) and self.device_count > 0
        self.index = _indexer(self.name, self.device_count, self.streams)

    @property
    def indexed(self) -> bool:
        """Whether target devices carry an index (``cpu`` tensors have none)."""
        return self.device_type != "cpu"

    @property
    def backend(self) -> str:
        """Deprecated spelling of :attr:`name` (the translation snapshot's name before 1.x merged the
        snapshots): kept so integrations written against it keep working; warns once per call site."""
        warnings.warn("Target.backend is deprecated: use Target.name", DeprecationWarning, stacklevel=2)
        return self.name

    def translating(self, report_available: bool, source: str) -> Target:
        """This backend as translation's target: the options set, a fresh :attr:`state`, the properties
        asked so far shared."""
        return replace(self, report_available=report_available, source=source, state={})

    def available_for(self, ns: str) -> bool:
        """What ``torch.<ns>.is_available()`` answers: only the source family claims a device."""
        return self.available and ns == self.source

    def op(self, family: str, name: str) -> tuple[Status, str]:
        """``(Status, note)`` of operation ``name`` of ``family``, as the backend tags it."""
        ops = getattr(self, family)
        if ops is None:
            return Status.UNSUPPORTED, f"the backend provides no {family} operations"
        return status_of(ops, name)

    def properties(self, index: int) -> DeviceProperties:
        """Device ``index``'s properties, asked of the backend's plugin the first time (then kept), with
        what the plugin left empty filled in (:func:`torchdevice.capability.complete`)."""
        props = self._properties.get(index)
        if props is None:
            errors: list[plugins.Problem] = []
            _, props = _ask(self.name, self.owner, "torchdevice_device_properties", errors, index=index)
            if props is None:
                why = f": {errors[0]}" if errors else ""
                raise TorchDeviceError(f"backend {self.name!r} gave no properties for device {index}{why}")
            from .capability import complete  # a device without a capability answers with its profile

            props = self._properties[index] = complete(props, self.name, index, self.device_type)
        return props

    def __repr__(self) -> str:
        return f"<Target {self.name} ({self.device_type}), translating {', '.join(sorted(self.sources)) or 'nothing'}>"


def _indexer(backend: str, count: int, streams: StreamOps | None) -> Callable[..., int]:
    """``index(device=None)`` of a backend with ``count`` devices: the current device for None or a
    negative int, the index of an int, string or ``torch.device`` (:class:`InvalidDeviceError` beyond
    ``count``). A closure over the values, not a method: the fronted functions call it on each call."""
    def no_current() -> int:
        raise TorchDeviceError(f"backend {backend!r} has no stream operations, so no current device")

    current = streams.current_device if streams is not None else no_current

    def index(device: Device = None) -> int:
        if device is None:
            return current()
        if type(device) is int:
            if device < 0:
                return current()
            if device < count:
                return device
            raise InvalidDeviceError(device, count, backend)
        return parse_index(device, current(), count, backend)

    return index


_lock = threading.RLock()
_records: dict[str, BackendRecord] | None = None
_active: Target | None = None
#: backends that failed to resolve since the last invalidate(), with the reason: every record
#: built until then (discovery may be rebuilt, uncached, after a named selection) reports them
_unresolvable: dict[str, str] = {}
_requested: str | None = None
_listeners: list[Callable[[], None]] = []
_shadowed: dict[str, set[str]] = {}  # backend name -> plugins whose duplicate declaration was skipped


def skip(name: str) -> frozenset:
    """Plugins not to ask about backend ``name`` (they declared it after its owner)."""
    return frozenset(_shadowed.get(name, ()))


def invalidate() -> None:
    """Drop every cached hook result; the next access rediscovers and re-resolves."""
    global _records, _active
    with _lock:
        _records = None
        _active = None
        _unresolvable.clear()
    for listener in list(_listeners):
        listener()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever the active backend may have changed."""
    _listeners.append(listener)


plugins.on_change(invalidate)  # a new plugin set invalidates every cached hook result


_priority_error: ConfigError | None = None  # a malformed TORCHDEVICE_PRIORITY, raised only by automatic selection


def _priority_overrides() -> dict[str, int]:
    raw = os.environ.get(ENV_PRIORITY, "")
    overrides = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            overrides[name.strip()] = int(value)
        except ValueError:
            raise ConfigError(
                ENV_PRIORITY, raw, f"item {item!r} is not NAME=INTEGER; expected e.g. {ENV_PRIORITY}=mlx=150,cuda=10"
            ) from None
    return overrides


_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def _spec_problem(spec: object) -> str | None:
    """What is wrong with a declared backend, or None (checked where plugins hand it over)."""
    if not isinstance(spec, BackendSpec):
        return f"returned {spec!r}, not a BackendSpec"
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        return f"backend name {spec.name!r} is not lowercase letters, digits and '_' starting with a letter"
    if not isinstance(spec.priority, int) or isinstance(spec.priority, bool):
        return f"backend {spec.name!r} has priority {spec.priority!r}, not an int"
    if not _known_device_type(spec.device_type, spec.privateuse1):
        return (f"backend {spec.name!r} has device_type {spec.device_type!r}, which torch does not know"
                + (" (torch's PrivateUse1 device, which the backend would rename to it, is claimed)" if spec.privateuse1 is True
                   else ""))
    return None


def _known_device_type(device_type: object, privateuse1: bool = False) -> bool:
    if not isinstance(device_type, str) or ":" in device_type:
        return False
    import torch

    try:
        torch.device(device_type)
    except (RuntimeError, TypeError, ValueError):
        # A PrivateUse1 backend names the device type it will give torch's PrivateUse1 device when it
        # loads (torch.utils.rename_privateuse1_backend): torch knows it only then, and only if unclaimed.
        unclaimed = torch._C._get_privateuse1_backend_name() == "privateuseone"
        return privateuse1 is True and unclaimed and _NAME.match(device_type) is not None
    return True


def discover() -> dict[str, BackendRecord]:
    """Return every declared backend (and every broken plugin), keyed by name."""
    global _records
    with _lock:
        if _records is not None:
            return _records
        plugins.load()
        _records = _discover_loaded()
        if _active is not None:
            for record in _records.values():
                record.selected = record.name == _active.name
        return _records


def _named_records(name: str) -> dict[str, BackendRecord]:
    """Records enough to resolve backend ``name``: when a plugin entry point of that name exists
    (or it is the built-in), only that plugin is imported and asked -- a slow or broken plugin
    elsewhere costs a named selection nothing. Otherwise, or if that plugin does not declare
    ``name``, every plugin is discovered."""
    with _lock:
        if _records is not None or not plugins.load_only(name):
            return discover()
        records = _discover_loaded()
        record = records.get(name)
        return records if record is not None and record.device_type is not None else discover()


def _mark_unresolvable(records: dict[str, BackendRecord]) -> None:
    for name, reason in _unresolvable.items():
        record = records.get(name)
        if record is not None and record.available:
            record.available, record.reason = False, reason
            record.problems.append(reason)


def _discover_loaded() -> dict[str, BackendRecord]:
    """Ask the plugins loaded so far for their backends and availability."""
    with _lock:
        global _priority_error
        try:
            overrides, _priority_error = _priority_overrides(), None
        except ConfigError as exc:  # only automatic selection needs priorities: it raises this
            overrides, _priority_error = {}, exc
        records: dict[str, BackendRecord] = {}
        # Registration order (the reverse of pluggy's call order): the first declaration of
        # a name wins; later plugins declaring it are reported and never asked about it.
        declared: dict[str, tuple[str, BackendSpec]] = {}
        _shadowed.clear()
        for plugin, specs in reversed(list(plugins.call_each("torchdevice_backends"))):
            for spec in specs or ():
                problem = _spec_problem(spec)
                if problem is not None:
                    plugins.report(plugins.Problem(plugin, "torchdevice_backends", problem))
                elif spec.name in declared:
                    _shadowed.setdefault(spec.name, set()).add(plugin)
                    plugins.report(
                        plugins.Problem(
                            plugin,
                            "torchdevice_backends",
                            f"backend {spec.name!r} is already provided by plugin {declared[spec.name][0]!r}; "
                            "this declaration is skipped",
                        )
                    )
                else:
                    declared[spec.name] = (plugin, spec)
        for name, (plugin, spec) in declared.items():
            info = plugins.plugin_info.get(plugin) or plugins.PluginInfo(plugin, None, None)
            errors: list = []
            _, avail = _ask(name, plugin, "torchdevice_availability", errors)
            if not isinstance(avail, Availability):
                why = str(errors[0]) if errors else f"availability hook returned {avail!r}"
                avail = Availability(False, why)
            records[name] = BackendRecord(
                name=name,
                plugin=plugin,
                distribution=info.distribution,
                version=info.version,
                device_type=spec.device_type,
                priority=overrides.get(name, spec.priority),
                available=avail.available,
                reason=avail.reason,
                automatic=avail.automatic,
                problems=[str(e) for e in errors],
                description=spec.description if isinstance(spec.description, str) else "",
            )
        # plugins that never declared a backend because they broke: report them too
        failed = {"import": "failed to import", "validate": "failed validation",
                  "torchdevice_backends": "raised in torchdevice_backends"}
        for failure in plugins.problems:
            if failure.stage not in failed or failure.plugin in records:
                continue
            if failure.stage == "torchdevice_backends" and not plugins.pm.has_plugin(failure.plugin):
                continue  # recorded before the plugin was unregistered
            known = plugins.plugin_info.get(failure.plugin)
            records[failure.plugin] = BackendRecord(
                name=failure.plugin,
                plugin=failure.plugin,
                distribution=known.distribution if known else None,
                version=known.version if known else None,
                device_type=None,
                priority=None,
                available=False,
                reason=f"plugin {failed[failure.stage]}: {failure.error}",
                problems=[str(failure)],
            )
        _mark_unresolvable(records)
        return records


def _usable(records: dict[str, BackendRecord]) -> list[str]:
    return [r.name for r in records.values() if r.available and r.device_type is not None]


def source_hint(name: str, source: str) -> str:
    """For a backend asked for by name (``source``: where the name came from) that is a source family, how to
    run a program *written for* that family instead (``TORCHDEVICE_BACKEND=mps`` on Linux); else ``""``."""
    if not source or name not in SOURCE_FAMILIES:
        return ""
    return (f"a program written for {name} runs on the backend here with `torchdevice run --source {name}` "
            f"(or TORCHDEVICE_SOURCE={name}, torchdevice.patch(source={name!r})), the backend left to automatic "
            "selection")


def check(name: str, source: str = "") -> BackendRecord:
    """Return the record of an available backend ``name``, or raise a clear error."""
    records = _named_records(name)
    record = records.get(name)
    if record is None or record.device_type is None or not record.available:
        records = discover()  # an error lists every backend, so load them all
        record = records.get(name)
    hint = source_hint(name, source)
    if record is None or record.device_type is None:
        known = [r.name for r in records.values() if r.device_type is not None]
        if record is not None:  # a broken plugin of that name
            raise BackendUnavailableError(name, record.reason, _usable(records), source, hint)
        if name in plugins.blocked():
            raise BackendUnavailableError(
                name, "its plugin is disabled by TORCHDEVICE_DISABLE_PLUGINS", _usable(records), source, hint)
        raise BackendNotFoundError(name, sorted(known), _usable(records), source, hint)
    if not record.available:
        raise BackendUnavailableError(name, record.reason, _usable(records), source, hint)
    return record


def _candidates() -> list[tuple[str, str]]:
    """Backends to try, best first, each with how it was chosen."""
    if _requested is not None:
        return [(_requested, "torchdevice.use()")]
    env = os.environ.get(ENV_BACKEND, "").strip()
    if env:
        return [(env, ENV_BACKEND)]
    records = discover()
    if _priority_error is not None:
        raise _priority_error
    ranked = sorted(
        (r for r in records.values() if r.available and r.automatic and r.device_type is not None),
        key=lambda r: -(r.priority or 0),  # declared backends all have one
    )
    return [(r.name, "priority") for r in ranked]


_EXPECTED = {"device_count": int, "memory": MemoryOps, "streams": StreamOps, "rng": RNGOps,
             "collectives": CollectiveOps}


def _ask(name: str, owner: str, hook: str, errors: list[plugins.Problem], **extra: Any) -> tuple[str | None, Any]:
    """Ask the plugin that declared backend ``name`` (others cannot answer for it); a plugin
    implementing the hook elsewhere is asked only when the owner has no implementation."""
    plugin, result = plugins.call_owner(hook, owner, errors, name=name, **extra)
    if plugin is None:
        plugin, result = plugins.call_first(hook, errors, skip(name), name=name, **extra)
    return plugin, result


def _resolve(name: str, chosen: bool = False) -> Target:
    """The backend ``name`` as a Target. A device count of 0 is a fault for automatic selection; a backend
    asked for by name (``chosen``) may have no device, as a CUDA process with ``CUDA_VISIBLE_DEVICES=""``
    has none: the program sees ``is_available()`` False (sim hides its devices so)."""
    errors: list = []
    found = {}
    record = _named_records(name)[name]
    owner = record.plugin
    for hook, expected in _EXPECTED.items():
        plugin, found[hook] = _ask(name, owner, f"torchdevice_{hook}", errors)
        if found[hook] is None:
            why = str(errors[-1]) if errors else "no plugin answered"
            raise BackendUnavailableError(name, f"torchdevice_{hook} failed: {why}", [])
        if not isinstance(found[hook], expected) or isinstance(found[hook], bool):
            why = f"returned {found[hook]!r}, not a {expected.__name__}"
            plugins.report(plugins.Problem(cast(str, plugin), f"torchdevice_{hook}", why))  # it answered: named
            raise BackendUnavailableError(name, f"torchdevice_{hook} of plugin {plugin!r} {why}", [])
    if found["device_count"] < (0 if chosen else 1):
        why = f"torchdevice_device_count of plugin {owner!r} returned {found['device_count']}, not at least {int(not chosen)}"
        plugins.report(plugins.Problem(owner, "torchdevice_device_count", why))
        raise BackendUnavailableError(name, why, [])
    # a declared backend's record has a device type and a priority
    return Target(name, cast(str, record.device_type), int(found["device_count"]), found["memory"], found["streams"],
                  found["rng"], found["collectives"], priority=cast(int, record.priority), owner=owner)


def active() -> Target:
    """The active backend, resolving and caching it on first use."""
    backend = _active
    if backend is not None:
        return backend
    return _activate()


def _activate() -> Target:
    global _active
    with _lock:
        if _active is not None:
            return _active
        from .streams import configured_device_count

        configured_device_count()  # a bad TORCHDEVICE_DEVICE_COUNT: one clear error, not a plugin failure
        failures = []
        _passed_over.clear()
        for name, source in _candidates():
            if source != "priority":
                check(name, source)  # explicit choice: a clear error, no fallback
            try:
                backend = _resolve(name, chosen=source != "priority")
            except BackendUnavailableError as exc:
                _unresolvable[name] = exc.reason
                _mark_unresolvable(_named_records(name))
                if source != "priority":  # the error lists every backend, so load them all (as check() does)
                    raise BackendUnavailableError(name, exc.reason, _usable(discover()), source,
                                                  source_hint(name, source)) from None
                failures.append(str(exc))
                continue
            for record in _named_records(name).values():
                record.selected = record.name == name
            if source == "priority":
                _passed_over.extend(_broken_above(backend.priority))
            _active = backend
            return backend
        raise TorchDeviceError("no torchdevice backend could be resolved: " + "; ".join(failures))


_passed_over: list[str] = []


def _broken_above(priority: int) -> list[str]:
    """What automatic selection could not take that might have outranked its choice: plugins that
    broke before declaring a backend (their priority is unknown), and backends of a higher priority
    whose availability check or resolution failed (recorded as problems)."""
    notes = []
    for record in discover().values():
        if record.device_type is None:
            notes.append(f"plugin {record.plugin!r}: {record.reason}")
        elif not record.available and record.problems and (record.priority or 0) > priority:
            notes.append(f"backend {record.name!r} (plugin {record.plugin!r}): {record.reason}")
    return notes


def passed_over() -> list[str]:
    """Why automatic selection may not have chosen the best backend: one line per broken plugin or
    backend it had to pass over (empty when a backend was named, or nothing broke).
    ``torchdevice run`` and zero-code activation warn with these lines."""
    return list(_passed_over)


def use(name: str | None) -> None:
    """Make ``name`` the active backend (``None``: back to automatic selection)."""
    global _requested
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"torchdevice.use() expects a backend name (str) or None, got {name!r}")
        check(name, "torchdevice.use()")
    with _lock:
        _requested = name
    invalidate()


def requested() -> str | None:
    return _requested
