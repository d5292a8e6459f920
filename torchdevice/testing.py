"""The vendor kit: test a torchdevice backend plugin without its hardware, and check it conforms.

Three parts, all usable from a plugin's own test suite (see ``docs/plugins.md``):

1. **A stand-in torch namespace**, :class:`StandIn`: an object with the
   attributes of ``torch.cuda`` (or ``torch.xpu``, ``torch.mps``,
   ``torch.mtia``, ``torch.backends.mps`` ...) that records every call as a
   :class:`Call` ``(name, args, kwargs)`` and returns typed values, each
   configurable. By default it has exactly the names the real namespace has in
   the installed torch, so a plugin tested against it meets the same holes.
   Tests using it prove which torch function a plugin calls, with which
   arguments, and how it converts the result; they are *stand-in* tests and
   prove nothing about real hardware.

2. **A conformance suite**: :func:`check_backend` runs every check on a plugin
   instance and returns a :class:`ConformanceReport` (or raises
   ``AssertionError`` listing the failures); :class:`BackendConformance` is the
   same checks as a pytest mixin, one test each. The checks: the declaration
   is sane; the hook implementations validate against the hookspecs;
   availability never raises and returns an ``Availability`` with a reason;
   hooks answer ``None`` for other backends' names; every operation of every
   family carries a status tag; unsupported operations raise
   ``UnsupportedError``; and, through the real router, the backend is selected
   when asked for (or refused with its reason when unavailable) and the
   device-agnostic API works on it.

3. **Mixins for torch-namespace plugins** (subclasses of
   :class:`torchdevice.torch_backend.TorchNamespaceBackend`):
   :class:`NamespaceContract` (stand-in contract tests driven by a table of
   :class:`Expect`) and :class:`UnavailableHere` (real tests on a machine or
   torch build without the hardware: unavailable, not selected, and
   ``torchdevice info`` says why).

Helpers: :func:`registered` (a plugin registered with the router for the
duration of a ``with`` block, displacing an installed plugin that declares
the same backend), :func:`router_sandbox`, :func:`info_json`, and the
generator of the hook reference in ``docs/plugins.md``
(``python -m torchdevice.testing --write-docs docs/plugins.md``).

This module imports pytest only inside the pytest mixins' methods.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import pluggy
import torch

from . import hookspecs, plugins, router
from .backend import (
    FAMILIES,
    STATUS_ATTR,
    Availability,
    BackendSpec,
    DeviceProperties,
    Status,
    status_of,
)
from .errors import BackendUnavailableError, UnsupportedError
from .vocabulary import SOURCE_FAMILIES

__all__ = [
    "Call",
    "StandIn",
    "IntLike",
    "FloatLike",
    "Expect",
    "RETURNED",
    "torch_namespace_contract",
    "NamespaceContract",
    "UnavailableHere",
    "BackendConformance",
    "ConformanceReport",
    "CheckResult",
    "CHECKS",
    "check_backend",
    "registered",
    "router_sandbox",
    "info_json",
    "info_text",
    "hook_reference_markdown",
    "write_hook_reference",
    "hook_reference_is_current",
]


# =============================================================================================
# 1. the stand-in namespace
# =============================================================================================


@dataclass(frozen=True)
class Call:
    """One recorded call on a :class:`StandIn`: ``Stream.query`` for methods of its classes."""

    name: str
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


class IntLike(int):
    """An ``int`` subclass a stand-in can return: ``type(x) is int`` then proves a plugin converted it."""


class FloatLike(float):
    """A ``float`` subclass a stand-in can return, to prove conversion to ``float``."""


class StandInProperties(types.SimpleNamespace):
    """What a stand-in's ``get_device_properties`` returns (attributes of ``_CudaDeviceProperties``)."""


#: Attributes that are values, not functions (returned as they are, not called).
VALUE_ATTRIBUTES = frozenset({"Stream", "Event", "device", "default_generators"})

GIB = 1 << 30


def _default_properties(si: "StandIn"):
    if si.namespace == "mtia":  # torch.mtia.get_device_properties returns a dict
        return lambda index=None: {"name": f"{si.label} stand-in device", "total_memory": 16 * GIB}
    return lambda index=None: StandInProperties(
        name=f"{si.label} stand-in device",
        total_memory=16 * GIB,
        major=8,
        minor=0,
        multi_processor_count=108,
        gpu_subslice_count=64,
        has_bfloat16_conversions=True,
    )


#: Default return value of each function a stand-in knows, as ``value`` or ``factory(standin)``.
DEFAULTS: dict[str, Any] = {
    # discovery
    "is_available": True,
    "_is_compiled": True,
    "is_initialized": True,
    "init": None,
    "device_count": lambda si: (lambda: si.devices),
    "get_device_properties": _default_properties,
    "get_device_name": lambda si: (lambda device=None: f"{si.label} stand-in device"),
    "get_device_capability": lambda si: (
        (lambda device=None: {"has_fp64": True}) if si.namespace == "xpu" else (lambda device=None: (8, 0))
    ),
    "is_bf16_supported": True,
    # memory
    "memory_allocated": 1_000,
    "max_memory_allocated": 2_000,
    "memory_reserved": 3_000,
    "max_memory_reserved": 4_000,
    "memory_stats": lambda si: (lambda device=None: collections.OrderedDict(
        [("allocated_bytes.all.current", 1_000), ("reserved_bytes.all.current", 3_000)]
    )),
    "mem_get_info": (5_000, 6_000),
    "get_per_process_memory_fraction": 0.5,
    "current_allocated_memory": 7_000,
    "driver_allocated_memory": 8_000,
    "recommended_max_memory": 9_000,
    "reset_peak_memory_stats": None,
    "reset_accumulated_memory_stats": None,
    "empty_cache": None,
    "set_per_process_memory_fraction": None,
    # streams
    "current_device": 0,
    "set_device": None,
    "synchronize": None,
    "current_stream": lambda si: (lambda device=None: si.values["Stream"]._make(device, stream_id=1)),
    "default_stream": lambda si: (lambda device=None: si.values["Stream"]._make(device, stream_id=0)),
    "set_stream": None,
    # random numbers
    "manual_seed": None,
    "manual_seed_all": None,
    "seed": None,
    "seed_all": None,
    "initial_seed": 1234,
    "get_rng_state": lambda si: (lambda device=None: torch.arange(16, dtype=torch.uint8)),
    "set_rng_state": None,
    "_get_default_mps_generator": lambda si: (lambda: si.generator),
    # torch.backends.mps
    "is_built": True,
    "get_name": "Apple stand-in GPU",
    "get_core_count": 10,
    "is_macos_or_newer": True,
}


def _real_names(namespace: str) -> frozenset | None:
    try:
        module = importlib.import_module(f"torch.{namespace}")
    except ImportError:
        return None
    return frozenset(dir(module))


class StandIn:
    """A stand-in for ``torch.<namespace>`` that records calls and returns typed values.

    * ``namespace``: ``"cuda"``, ``"xpu"``, ``"mps"``, ``"mtia"``,
      ``"backends.mps"`` ...; ``__name__`` is ``"torch.<namespace>"``.
    * ``returns``: ``{name: value}`` overriding what a function returns (or
      what a value attribute such as ``Stream`` or ``default_generators`` is).
      A value that is an exception instance is raised; a callable is called
      with the call's arguments and its result returned.
    * ``missing``: names to remove. With ``mirror=True`` (default) the
      stand-in already lacks every name the installed torch's namespace
      lacks (``StandIn("mps")`` has no ``current_device``), plus any
      ``returns`` key is added back.
    * ``devices``: what ``device_count()`` returns (default 2).

    ``calls`` is the list of :class:`Call` made so far, including the
    construction and methods of its ``Stream``/``Event`` classes and the
    ``device`` context manager. Attributes are resolved when accessed, and
    ``returns`` may be changed at any time; the *set of names* must be fixed
    before a plugin snapshots the namespace (at its construction).
    """

    def __init__(self, namespace: str = "cuda", *, returns: Mapping[str, Any] | None = None,
                 missing=(), mirror: bool = True, devices: int = 2):
        self.namespace = namespace
        self.__name__ = f"torch.{namespace}"
        self.label = namespace.rsplit(".", 1)[-1].upper()
        self.returns: dict[str, Any] = dict(returns or {})
        self.devices = devices
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self.generator = torch.Generator()
        names = set(DEFAULTS) | VALUE_ATTRIBUTES
        real = _real_names(namespace) if mirror else None
        if real is not None:
            names &= real
        self.names = frozenset((names | set(self.returns)) - set(missing))
        #: the value attributes' defaults (read through ``__getattr__`` so that ``missing`` hides them)
        self.values: dict[str, Any] = {
            "Stream": _stream_class(self),
            "Event": _event_class(self),
            "device": _device_class(self),
            "default_generators": tuple(torch.Generator() for _ in range(devices)),
        }

    # -- recording -------------------------------------------------------------------------
    def record(self, name: str, args: tuple = (), kwargs: Mapping | None = None) -> None:
        with self._lock:
            self.calls.append(Call(name, tuple(args), dict(kwargs or {})))

    def calls_to(self, name: str) -> list[Call]:
        """The recorded calls of function ``name``."""
        return [c for c in self.calls if c.name == name]

    def reset(self) -> None:
        """Forget the recorded calls."""
        with self._lock:
            self.calls.clear()

    # -- attributes ------------------------------------------------------------------------
    def __getattr__(self, name: str):
        if name.startswith("__") or name not in self.__dict__.get("names", ()):
            raise AttributeError(f"{self.__dict__.get('__name__', 'stand-in')} (stand-in) has no attribute {name!r}")
        if name in VALUE_ATTRIBUTES:
            return self.returns.get(name, self.values[name])
        return self._function(name)

    def _function(self, name: str) -> Callable:
        def function(*args, **kwargs):
            self.record(name, args, kwargs)
            value = self._value(name)
            if isinstance(value, BaseException):
                raise value
            return value(*args, **kwargs) if callable(value) else value

        function.__name__ = function.__qualname__ = name
        return function

    def _value(self, name: str):
        if name in self.returns:
            return self.returns[name]
        default = DEFAULTS.get(name)
        if callable(default):
            return default(self)
        return default

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | self.names)

    def __repr__(self) -> str:
        return f"<StandIn for {self.__name__}: {len(self.calls)} calls recorded>"


def _stream_class(si: StandIn) -> type:
    class Stream:
        """Stand-in of ``torch.cuda.Stream``: records its construction and methods."""

        def __init__(self, device=None, priority=0, **kwargs):
            si.record("Stream", (device, priority) if priority else (device,), kwargs)
            self.device_index, self.priority, self.stream_id = device, priority, kwargs.get("stream_id", 7)

        @classmethod
        def _make(cls, device, stream_id):
            stream = cls.__new__(cls)
            stream.device_index, stream.priority, stream.stream_id = device, 0, stream_id
            return stream

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            values = {"query": True, "elapsed_time": 1.5}

            def method(*args, **kwargs):
                si.record(f"Stream.{name}", args, kwargs)
                return values.get(name)

            return method

        def __eq__(self, other):
            return isinstance(other, Stream) and (self.device_index, self.stream_id) == (
                other.device_index, other.stream_id)

        def __hash__(self):
            return hash((self.device_index, self.stream_id))

        def __repr__(self):
            return f"<stand-in {si.__name__}.Stream device={self.device_index} stream_id={self.stream_id}>"

    return Stream


def _event_class(si: StandIn) -> type:
    class Event:
        """Stand-in of ``torch.cuda.Event``: records its construction and methods."""

        def __init__(self, *args, **kwargs):
            si.record("Event", args, kwargs)
            self.enable_timing = kwargs.get("enable_timing", args[0] if args else False)

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            values = {"query": True, "elapsed_time": 1.5}

            def method(*args, **kwargs):
                si.record(f"Event.{name}", args, kwargs)
                return values.get(name)

            return method

        def __repr__(self):
            return f"<stand-in {si.__name__}.Event>"

    return Event


def _device_class(si: StandIn) -> type:
    class device:
        """Stand-in of ``torch.cuda.device``: records ``device(i)``, enter and exit."""

        def __init__(self, index):
            si.record("device", (index,))

        def __enter__(self):
            si.record("device.__enter__")
            return self

        def __exit__(self, *exc):
            si.record("device.__exit__")
            return False

    return device


# =============================================================================================
# 2. router helpers
# =============================================================================================

ENV_VARS = ("TORCHDEVICE_BACKEND", "TORCHDEVICE_PRIORITY", "TORCHDEVICE_PLUGINS", "TORCHDEVICE_DISABLE_PLUGINS")


@contextlib.contextmanager
def router_sandbox() -> Iterator[None]:
    """Run the block with automatic selection and no ``TORCHDEVICE_*`` variables; restore all after.

    Restores the variables, the ``use()`` choice (when still valid) and the
    recorded problems, and drops every cached resolution on the way in and out.
    """
    saved_env = {var: os.environ.pop(var) for var in ENV_VARS if var in os.environ}
    previous = router.requested()
    problems_before = list(plugins.problems)
    router.use(None)
    try:
        yield
    finally:
        os.environ.update(saved_env)
        plugins.problems[:] = problems_before
        try:
            router.use(previous)
        except Exception:
            router.use(None)
        router.invalidate()


def _declared_names(plugin) -> list[str]:
    declare = getattr(plugin, "torchdevice_backends", None)
    if declare is None:
        return []
    try:
        return [spec.name for spec in declare() or () if isinstance(spec, BackendSpec)]
    except Exception:
        return []


@contextlib.contextmanager
def registered(plugin, name: str | None = None) -> Iterator[str]:
    """Register ``plugin`` with the router for the block (inside a :func:`router_sandbox`).

    Any registered plugin that declares one of ``plugin``'s backend names
    (the installed entry point of the same backend, typically) is
    unregistered for the block and put back afterwards. Yields the
    registration name. A plugin already registered is used as it is.
    """
    plugins.load()
    with router_sandbox():
        if plugins.pm.is_registered(plugin):
            yield plugins.pm.get_name(plugin)
            return
        mine = set(_declared_names(plugin))
        displaced = []
        for other_name, other in list(plugins.pm.list_name_plugin()):
            if other is not None and mine & set(_declared_names(other)):
                displaced.append((other_name, other, plugins.plugin_info.get(other_name)))
                plugins.unregister(other_name)
        reg_name = None
        try:
            reg_name = plugins.register(plugin, name=name or (sorted(mine)[0] if mine else None))
            yield reg_name
        finally:
            if reg_name is not None and plugins.pm.has_plugin(reg_name):
                plugins.unregister(reg_name)
            for other_name, other, info in displaced:
                plugins.register(other, name=other_name, info=info)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}


@functools.lru_cache(maxsize=None)
def _run_info(json_output: bool) -> tuple[int, str, str]:
    args = [sys.executable, "-m", "torchdevice", "info"] + (["--json"] if json_output else [])
    proc = subprocess.run(args, env=_clean_env(), capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def info_json() -> dict:
    """``torchdevice info --json`` run in a fresh interpreter (no ``TORCHDEVICE_*`` variables); cached."""
    code, out, err = _run_info(True)
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"torchdevice info --json exited {code}, not JSON:\n{out}\n{err}") from None


def info_text() -> str:
    """``torchdevice info`` (the table) run in a fresh interpreter; cached."""
    return _run_info(False)[1]


# =============================================================================================
# 3. the conformance checks
# =============================================================================================


@dataclass
class CheckResult:
    name: str
    ok: bool | None  #: None: skipped
    detail: str = ""

    def __str__(self) -> str:
        mark = {True: "ok", False: "FAIL", None: "skipped"}[self.ok]
        return f"[{mark}] {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass
class ConformanceReport:
    """The result of :func:`check_backend`: one :class:`CheckResult` per check."""

    backend: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.ok is False]

    def __str__(self) -> str:
        return f"conformance of backend {self.backend!r}:\n" + "\n".join(f"  {r}" for r in self.results)


class _Skip(Exception):
    """A check that does not apply (e.g. needs an available backend)."""


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_OTHER = "__torchdevice_not_this_backend__"


def _spec(plugin) -> BackendSpec:
    specs = plugin.torchdevice_backends()
    assert isinstance(specs, (list, tuple)) and specs, f"torchdevice_backends() returned {specs!r}, not a list of BackendSpec"
    for spec in specs:
        assert isinstance(spec, BackendSpec), f"torchdevice_backends() returned {spec!r}, not a BackendSpec"
    return specs[0]


def check_spec(plugin) -> str:
    """The declaration: a name usable in env lists, a torch device type, an int priority."""
    for spec in plugin.torchdevice_backends():
        assert isinstance(spec, BackendSpec), f"{spec!r} is not a BackendSpec"
        assert isinstance(spec.name, str) and _NAME.match(spec.name), (
            f"backend name {spec.name!r} must be letters, digits, '_', '.', '-' (it appears in "
            "TORCHDEVICE_BACKEND and comma-separated NAME=VALUE lists)")
        assert spec.name != _OTHER
        try:
            torch.device(spec.device_type)
        except Exception as exc:
            raise AssertionError(f"device_type {spec.device_type!r} is not a torch device type: {exc}") from None
        assert isinstance(spec.priority, int) and not isinstance(spec.priority, bool), (
            f"priority {spec.priority!r} must be an int")
        assert isinstance(spec.description, str)
    return ""


def check_hookimpls(plugin) -> str:
    """Every hook implementation matches a hookspec (pluggy's check_pending in a fresh manager)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(plugin, name="plugin-under-test")
    pm.check_pending()
    implemented = sorted(
        name for name in dir(pm.hook) if name.startswith("torchdevice_")
        and any(impl.plugin is plugin for impl in getattr(pm.hook, name).get_hookimpls())
    )
    assert "torchdevice_backends" in implemented, "the plugin does not implement torchdevice_backends"
    return f"implements {', '.join(implemented)}"


def check_availability(plugin) -> str:
    """``torchdevice_availability`` does not raise, returns an Availability with a reason, None for others."""
    name = _spec(plugin).name
    try:
        found = plugin.torchdevice_availability(name=name)
    except Exception as exc:
        raise AssertionError(f"availability raised {type(exc).__name__}: {exc} (it must return "
                             "Availability(False, reason) instead)") from None
    assert isinstance(found, Availability), f"availability returned {found!r}, not an Availability"
    assert isinstance(found.reason, str) and found.reason.strip(), "Availability.reason must say why (or what was found)"
    assert plugin.torchdevice_availability(name=_OTHER) is None, "availability must answer None for other names"
    return f"available={found.available} automatic={found.automatic}: {found.reason}"


def _available(plugin) -> Availability:
    found = plugin.torchdevice_availability(name=_spec(plugin).name)
    if not found:
        raise _Skip(f"not available here: {found.reason}")
    return found


def _families(plugin) -> dict[str, Any]:
    name = _spec(plugin).name
    return {family: getattr(plugin, f"torchdevice_{family}")(name=name) for family in FAMILIES}


def check_families(plugin) -> str:
    """Each family hook returns its family's Ops for the backend's name, None for others."""
    name = _spec(plugin).name
    for family in FAMILIES:
        hook = getattr(plugin, f"torchdevice_{family}", None)
        if hook is not None:
            assert hook(name=_OTHER) is None, f"torchdevice_{family} must answer None for other names"
    _available(plugin)
    count = plugin.torchdevice_device_count(name=name)
    assert isinstance(count, int) and count >= 1, f"device_count is {count!r}; an available backend has >= 1"
    props = plugin.torchdevice_device_properties(name=name, index=0)
    assert isinstance(props, DeviceProperties), f"device_properties(0) returned {props!r}"
    assert isinstance(props.name, str) and isinstance(props.total_memory, int) and props.total_memory >= 0
    for index in range(1, count):  # every device, not only the first
        other = plugin.torchdevice_device_properties(name=name, index=index)
        assert isinstance(other, DeviceProperties), f"device_properties({index}) returned {other!r} ({count} devices)"
    for family, ops in _families(plugin).items():
        assert isinstance(ops, FAMILIES[family]), f"torchdevice_{family} returned {ops!r}, not a {FAMILIES[family].__name__}"
        assert ops.backend == name, f"{family} ops say backend {ops.backend!r}, not {name!r}"
    return f"{count} device(s), device 0: {props.name}"


def _families_without_hardware(plugin) -> dict[str, Any]:
    """The family objects, also for a backend not available here (the matrix reads their tags
    without hardware); skipped only when the plugin cannot build them without it."""
    try:
        families = _families(plugin)
    except Exception as exc:
        if _available_or_none(plugin):
            raise
        raise _Skip(f"not available here, and its families need the hardware: {type(exc).__name__}: {exc}") from None
    if any(ops is None for ops in families.values()):
        _available(plugin)
        raise AssertionError(f"a family hook returned None: {families}")
    return families


def _available_or_none(plugin) -> bool:
    try:
        return bool(plugin.torchdevice_availability(name=_spec(plugin).name))
    except Exception:
        return False


def check_tags(plugin) -> str:
    """Every operation of every family carries a status tag (native/translated/emulated/no-op/unsupported);
    checked without hardware too."""
    untagged, counts = [], collections.Counter()
    for family, ops in _families_without_hardware(plugin).items():
        for op in type(ops).operations():
            fn = getattr(type(ops), op)
            tag = getattr(fn, STATUS_ATTR, None) or getattr(getattr(fn, "__func__", None), STATUS_ATTR, None)
            if tag is None:
                untagged.append(f"{family}.{op}")
            else:
                counts[str(status_of(ops, op)[0])] += 1
    assert not untagged, f"untagged operations: {', '.join(untagged)} (tag them with native/translated/emulated/noop)"
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def check_unsupported(plugin) -> str:
    """Every operation tagged unsupported raises UnsupportedError naming the backend."""
    _available(plugin)
    name, checked = _spec(plugin).name, 0
    for family, ops in _families(plugin).items():
        for op in type(ops).operations():
            if status_of(ops, op)[0] is not Status.UNSUPPORTED:
                continue
            try:
                getattr(ops, op)()
            except UnsupportedError as exc:
                assert exc.backend == name, f"{family}.{op} raised UnsupportedError for backend {exc.backend!r}"
                checked += 1
                continue
            except Exception as exc:
                raise AssertionError(
                    f"{family}.{op} is tagged unsupported but raised {type(exc).__name__}: {exc}") from exc
            raise AssertionError(f"{family}.{op} is tagged unsupported but returned")
    return f"{checked} unsupported operations raise UnsupportedError"


def _supported(ops, op: str) -> bool:
    return status_of(ops, op)[0] is not Status.UNSUPPORTED


def _check_event_timing(active) -> str:
    import torchdevice

    start, end = torchdevice.Event(enable_timing=True), torchdevice.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 40 <= ms <= 5000, f"elapsed_time around a 50 ms sleep gave {ms!r}: it must be in milliseconds"
    recorded = torchdevice.current_stream().record_event()
    assert isinstance(recorded, active.streams.Event), (
        f"current_stream().record_event() made a {type(recorded).__name__}, not the backend's Event class "
        f"{active.streams.Event.__name__} (pair the Stream and Event classes)")
    return "event timing in ms, record_event() makes the backend's Event"


def _in_thread(fn) -> Any:
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # reported in the calling thread
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _check_per_thread(active, count: int) -> str:
    import torchdevice

    done = []
    if _supported(active.streams, "set_device") and count >= 2:
        torchdevice.set_device(1)
        try:
            seen = _in_thread(torchdevice.current_device)
            assert seen == 0, f"a new thread starts on device {seen} after another thread's set_device(1): " \
                              "the current device must be per thread (it starts on 0), as CUDA's"
            assert torchdevice.current_device() == 1
        finally:
            torchdevice.set_device(0)
        done.append("per-thread current device")
    if _supported(active.streams, "set_stream") and _supported(active.streams, "current_stream"):
        side = torchdevice.Stream()
        with torchdevice.stream(side):
            other = _in_thread(torchdevice.current_stream)
            assert other == torchdevice.default_stream(), (
                "a new thread sees another thread's current stream: it must start on the default stream")
            assert torchdevice.current_stream() == side
        done.append("per-thread current stream")
    return ", ".join(done)


def _check_memory_moves(active, device_type: str) -> str:
    import torchdevice

    if not _supported(active.memory, "memory_allocated") or status_of(active.memory, "memory_allocated")[0] is Status.NOOP:
        return "memory not tracked (declared)"
    source = next(s for s in SOURCE_FAMILIES if s != device_type)
    size = 64 << 20
    with torchdevice.patched():  # the backend's tensors: what a translated program allocates
        before = torchdevice.memory_allocated()
        held = torch.ones(size // 4, device=source)
        torchdevice.synchronize()
        grew = torchdevice.memory_allocated() - before
        del held
    assert grew >= 0.9 * size, (
        f"memory_allocated moved by {grew} bytes when a {size >> 20} MiB tensor was allocated on the backend "
        "(tag memory_allocated noop/unsupported if the backend does not track memory)")
    return "memory_allocated moves with a 64 MiB tensor"


def check_behaviour(plugin) -> str:
    """What a plugin can get wrong behind correct types: event timing units, Event/Stream classes,
    per-thread current device and stream, memory figures that move with the backend's tensors."""
    import torchdevice

    spec = _spec(plugin)
    _available(plugin)
    with registered(plugin), torchdevice.use(spec.name):
        active = router.active()
        done = []
        if all(_supported(active.streams, op) for op in ("current_stream", "synchronize")):
            done.append(_check_event_timing(active))
        done.append(_check_per_thread(active, active.device_count))
        done.append(_check_memory_moves(active, spec.device_type))
    return "; ".join(d for d in done if d)


def check_router(plugin) -> str:
    """Through the real router: refused with its reason when unavailable, else selected and usable."""
    import torchdevice

    name = _spec(plugin).name
    found = plugin.torchdevice_availability(name=name)
    with registered(plugin):
        record = next((r for r in torchdevice.backends() if r.name == name), None)
        assert record is not None, f"torchdevice.backends() does not list {name!r}"
        assert record.available == found.available, f"router says available={record.available}, plugin {found.available}"
        if not found.available:
            try:
                torchdevice.use(name)
            except BackendUnavailableError as exc:
                assert found.reason in str(exc), f"the error does not give the plugin's reason: {exc}"
            else:
                raise AssertionError(f"torchdevice.use({name!r}) accepted an unavailable backend")
            assert torchdevice.current_backend() != name, "an unavailable backend was selected"
            return f"refused: {found.reason}"
        if not found.automatic:
            assert torchdevice.current_backend() != name, "automatic selection took a backend marked automatic=False"
        with torchdevice.use(name):
            assert torchdevice.current_backend() == name
            assert torchdevice.device_type() == _spec(plugin).device_type
            count = torchdevice.device_count()
            assert isinstance(torchdevice.get_device_properties(count - 1), DeviceProperties)
            active = router.active()
            done = ["use", "properties"]
            if _supported(active.memory, "memory_allocated"):
                assert isinstance(torchdevice.memory_allocated(), int)
                done.append("memory_allocated")
            if _supported(active.streams, "synchronize"):
                torchdevice.synchronize()
                done.append("synchronize")
            if _supported(active.streams, "current_stream"):
                torchdevice.current_stream()
                done.append("current_stream")
            if _supported(active.rng, "get_rng_state") and _supported(active.rng, "set_rng_state"):
                state = torchdevice.get_rng_state().clone()
                if _supported(active.rng, "manual_seed"):
                    torchdevice.manual_seed(12345)  # move the generator, so a set_rng_state that does nothing shows
                torchdevice.set_rng_state(state)
                assert torch.equal(torchdevice.get_rng_state(), state), "get_rng_state after set_rng_state differs"
                done.append("rng round trip")
        return "selected on request; " + ", ".join(done)


#: The checks of :func:`check_backend`, in order.
CHECKS: dict[str, Callable[[Any], str]] = {
    "spec": check_spec,
    "hookimpls": check_hookimpls,
    "availability": check_availability,
    "families": check_families,
    "tags": check_tags,
    "unsupported": check_unsupported,
    "router": check_router,
    "behaviour": check_behaviour,
}


def run_check(plugin, check: str) -> CheckResult:
    """Run one of :data:`CHECKS` on ``plugin``."""
    try:
        detail = CHECKS[check](plugin)
    except _Skip as skip:
        return CheckResult(check, None, str(skip))
    except AssertionError as exc:
        return CheckResult(check, False, str(exc) or "assertion failed")
    except Exception as exc:
        return CheckResult(check, False, f"raised {type(exc).__name__}: {exc}")
    return CheckResult(check, True, detail)


def check_backend(plugin, *, checks=None, raise_on_failure: bool = True) -> ConformanceReport:
    """Run the conformance checks on a plugin instance; return the report.

    ``checks`` selects some of :data:`CHECKS` (default: all). Checks that need
    an available backend are skipped when it is not. With
    ``raise_on_failure`` (default) a failing check raises ``AssertionError``
    carrying the whole report. Example::

        from torchdevice.testing import check_backend
        from torchdevice_mychip import plugin

        print(check_backend(plugin))
    """
    try:
        name = _spec(plugin).name
    except Exception:
        name = repr(plugin)
    report = ConformanceReport(name)
    for check in checks or CHECKS:
        report.results.append(run_check(plugin, check))
        if check == "spec" and report.results[-1].ok is False:
            break
    if raise_on_failure and not report.ok:
        raise AssertionError(str(report))
    return report


class BackendConformance:
    """pytest mixin: the conformance checks as tests. Provide a ``plugin`` fixture::

        import pytest
        from torchdevice.testing import BackendConformance
        from torchdevice_mychip import MyChipBackend

        class TestMyChipConformance(BackendConformance):
            @pytest.fixture
            def plugin(self):
                return MyChipBackend()
    """

    def _run(self, plugin, check: str) -> None:
        import pytest

        result = run_check(plugin, check)
        if result.ok is None:
            pytest.skip(result.detail)
        assert result.ok, str(result)

    def test_conformance_spec(self, plugin):
        self._run(plugin, "spec")

    def test_conformance_hookimpls(self, plugin):
        self._run(plugin, "hookimpls")

    def test_conformance_availability(self, plugin):
        self._run(plugin, "availability")

    def test_conformance_families(self, plugin):
        self._run(plugin, "families")

    def test_conformance_tags(self, plugin):
        self._run(plugin, "tags")

    def test_conformance_unsupported(self, plugin):
        self._run(plugin, "unsupported")

    def test_conformance_router(self, plugin):
        self._run(plugin, "router")

    def test_conformance_behaviour(self, plugin):
        self._run(plugin, "behaviour")


# =============================================================================================
# 4. contract tests for torch-namespace plugins
# =============================================================================================

#: ``Expect.result`` meaning "the very object the stand-in returned for the last call".
RETURNED = object()


@dataclass(frozen=True)
class Expect:
    """One stand-in contract: calling ``op`` with ``args`` makes exactly ``calls`` and gives ``result``.

    * ``op``: ``"family.operation"`` (``"memory.memory_allocated"``);
    * ``calls``: the namespace calls expected, in order, as ``(function, args)``;
    * ``returns``: what the stand-in returns (``{function: value}``);
    * ``result``: the expected result, compared with ``==`` and by exact type,
      or :data:`RETURNED` for identity with the last configured return value;
    * ``status``: the expected status tag (a :class:`~torchdevice.backend.Status` value).
    """

    op: str
    args: tuple = ()
    calls: tuple = ()
    returns: Mapping = field(default_factory=dict)
    result: Any = None
    status: str = "native"


def torch_namespace_contract(index: int = 1) -> dict[str, Expect]:
    """The contract of :class:`~torchdevice.torch_backend.TorchNamespaceBackend` (``torch.cuda``'s shape).

    Every operation calls the same-named namespace function with the device
    ``index`` and converts the result (``IntLike`` -> ``int`` ...). Plugin
    tests start from this table and override the entries their namespace
    spells differently.
    """
    i = index
    stream, state = object(), torch.zeros(4, dtype=torch.uint8)
    generators = (torch.Generator(), torch.Generator())

    def same(op: str, family: str, args: tuple, returns=None, result=None) -> Expect:
        calls = ((op, args),)
        return Expect(f"{family}.{op}", args, calls, {op: returns} if returns is not None else {}, result)

    table = [
        same("memory_allocated", "memory", (i,), IntLike(1_001), 1_001),
        same("max_memory_allocated", "memory", (i,), IntLike(2_002), 2_002),
        same("memory_reserved", "memory", (i,), IntLike(3_003), 3_003),
        same("max_memory_reserved", "memory", (i,), IntLike(4_004), 4_004),
        same("reset_peak_memory_stats", "memory", (i,), "ignored", None),
        same("reset_accumulated_memory_stats", "memory", (i,), "ignored", None),
        same("memory_stats", "memory", (i,), collections.OrderedDict(a=1), {"a": 1}),
        same("mem_get_info", "memory", (i,), [IntLike(5), IntLike(6)], (5, 6)),
        same("empty_cache", "memory", (), "ignored", None),
        same("set_per_process_memory_fraction", "memory", (0.25, i), "ignored", None),
        same("get_per_process_memory_fraction", "memory", (i,), FloatLike(0.5), 0.5),
        same("current_device", "streams", (), IntLike(1), 1),
        same("set_device", "streams", (i,), "ignored", None),
        same("synchronize", "streams", (i,), "ignored", None),
        same("current_stream", "streams", (i,), stream, RETURNED),
        same("default_stream", "streams", (i,), stream, RETURNED),
        same("set_stream", "streams", (stream,), "ignored", None),
        same("manual_seed", "rng", (7,), "ignored", None),
        same("manual_seed_all", "rng", (7,), "ignored", None),
        same("seed", "rng", (), IntLike(99), None),
        same("seed_all", "rng", (), IntLike(99), None),
        same("initial_seed", "rng", (), IntLike(1234), 1234),
        same("get_rng_state", "rng", (i,), state, RETURNED),
        same("set_rng_state", "rng", (state, i), "ignored", None),
        Expect("rng.default_generator", (i,), (), {"default_generators": generators}, generators[i], "translated"),
    ]
    return {e.op: e for e in table}


def _ops(backend, family: str):
    return getattr(backend, family)()


class NamespaceContract:
    """pytest mixin: stand-in contract tests of a torch-namespace plugin (stand-in, not hardware-verified).

    Set ``backend_class`` (a :class:`~torchdevice.torch_backend.TorchNamespaceBackend`
    subclass), ``namespace`` (``"cuda"``), ``index`` (the device index used,
    default 1), ``devices`` (the stand-in's device count, default 2), ``overrides`` (``{op: Expect}`` replacing entries of
    :func:`torch_namespace_contract`; ``None`` removes one, to be tested by
    hand) and ``unsupported_ops`` (``"family.op"`` that must raise
    UnsupportedError without touching the namespace). Override
    :meth:`construct` when the plugin takes more than the namespace, and
    :meth:`unbuilt` when "not built" is not ``_is_compiled() == False``.

    Every test name and docstring says *stand-in*: they prove the calls made
    to the namespace and the conversions, not behaviour on hardware.
    """

    backend_class: type = None
    namespace: str = ""
    index: int = 1
    devices: int = 2
    overrides: Mapping[str, Expect | None] = {}
    unsupported_ops: frozenset = frozenset()

    # -- construction ----------------------------------------------------------------------
    def construct(self, standin: StandIn):
        """The backend over ``standin``."""
        return self.backend_class(standin)

    def make(self, returns=None, **options) -> tuple[Any, StandIn]:
        """A backend over a fresh stand-in; returns ``(backend, standin)``."""
        options.setdefault("devices", self.devices)
        standin = StandIn(self.namespace, returns=returns, **options)
        return self.construct(standin), standin

    def unbuilt(self):
        """A backend whose torch was built without this accelerator."""
        return self.make({"_is_compiled": False})[0]

    def expectations(self) -> list[Expect]:
        table = torch_namespace_contract(self.index)
        table.update(self.overrides)
        return [e for op, e in table.items() if e is not None and op not in self.unsupported_ops]

    def pytest_generate_tests(self, metafunc):
        if "expect" in metafunc.fixturenames:
            metafunc.parametrize("expect", self.expectations(), ids=lambda e: e.op)
        if "unsupported_op" in metafunc.fixturenames:
            metafunc.parametrize("unsupported_op", sorted(self.unsupported_ops) or ["(none)"])

    # -- the contract table ----------------------------------------------------------------
    def test_standin_call(self, expect: Expect):
        """stand-in, not hardware-verified: the operation calls the namespace as the table says."""
        backend, standin = self.make(dict(expect.returns))
        family, op = expect.op.split(".")
        ops = _ops(backend, family)
        standin.reset()
        result = getattr(ops, op)(*expect.args)
        assert [(c.name, c.args) for c in standin.calls] == [(f, tuple(a)) for f, a in expect.calls], (
            f"{expect.op}{expect.args} made {standin.calls}")
        assert all(not c.kwargs for c in standin.calls), f"{expect.op} passed keywords: {standin.calls}"
        if expect.result is RETURNED:
            last = expect.calls[-1][0]
            assert result is expect.returns[last], f"{expect.op} returned {result!r}, not the namespace's object"
        else:
            assert result == expect.result and type(result) is type(expect.result), (
                f"{expect.op} returned {result!r} ({type(result).__name__}), expected {expect.result!r}")
        status, note = status_of(ops, op)
        assert str(status) == str(Status(expect.status)), f"{expect.op} is tagged {status} ({note}), expected {expect.status}"

    def test_standin_unsupported(self, unsupported_op: str):
        """stand-in, not hardware-verified: the operation raises UnsupportedError and calls nothing.

        ``(none)``: the plugin declares no unsupported operation, and has none.
        """
        backend, standin = self.make()
        if unsupported_op == "(none)":
            return self.test_standin_unsupported_set_is_exact()
        family, op = unsupported_op.split(".")
        ops = _ops(backend, family)
        standin.reset()
        try:
            getattr(ops, op)(self.index)
        except UnsupportedError as exc:
            assert exc.backend == backend.name and exc.instead, f"{exc} should say what to do instead"
        else:
            raise AssertionError(f"{unsupported_op} did not raise UnsupportedError")
        assert standin.calls == [], f"{unsupported_op} called {standin.calls}"
        assert status_of(ops, op)[0] is Status.UNSUPPORTED

    # -- discovery -------------------------------------------------------------------------
    def test_standin_unsupported_set_is_exact(self):
        """stand-in, not hardware-verified: exactly the declared operations are tagged unsupported."""
        backend, _ = self.make()
        found = {f"{family}.{op}" for family in FAMILIES for ops in [_ops(backend, family)]
                 for op in type(ops).operations() if status_of(ops, op)[0] is Status.UNSUPPORTED}
        assert found == set(self.unsupported_ops), f"tagged unsupported: {sorted(found)}"

    def test_standin_available(self):
        """stand-in, not hardware-verified: available, with the device count in the reason."""
        backend, standin = self.make(devices=3)
        found = backend.availability()
        assert found.available and found.automatic, found
        assert "3" in found.reason, found.reason
        assert backend.device_count() == 3 and type(backend.device_count()) is int

    def test_standin_unbuilt(self):
        """stand-in, not hardware-verified: a torch without the accelerator is unavailable and says so."""
        found = self.unbuilt().availability()
        assert not found.available and "built without" in found.reason, found

    def test_standin_no_device(self):
        """stand-in, not hardware-verified: built but no device: unavailable, naming is_available."""
        backend, _ = self.make({"is_available": False})
        found = backend.availability()
        assert not found.available and "is_available() is False" in found.reason, found

    def test_standin_availability_never_raises(self):
        """stand-in, not hardware-verified: a raising driver check gives Availability(False, why)."""
        backend, _ = self.make({"is_available": RuntimeError("driver exploded")})
        found = backend.availability()
        assert not found.available and "driver exploded" in found.reason, found

    def test_standin_conformance(self):
        """stand-in, not hardware-verified: the conformance suite, router included, over the stand-in
        (not the behaviour check: a stand-in's events, threads and memory do not behave)."""
        backend, _ = self.make()
        check_backend(backend, checks=[c for c in CHECKS if c != "behaviour"])


class UnavailableHere:
    """pytest mixin: real tests of a plugin on a machine or torch build without its hardware.

    Set ``plugin`` (the installed plugin instance), ``distribution``
    (``"torchdevice-cuda"``) and ``reason`` (text the unavailability reason
    must contain, e.g. ``"built without CUDA"``). Each test skips itself
    where the backend *is* available.
    """

    plugin: Any = None
    distribution: str = ""
    reason: str = ""

    def _require_unavailable(self):
        import pytest

        found = self.plugin.availability()
        if found.available:
            pytest.skip(f"{self.plugin.name} is available here ({found.reason})")
        return found

    def test_real_entry_point(self):
        """real, this environment: the installed entry point of group ``torchdevice`` is this plugin."""
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group=plugins.GROUP) if ep.name == self.plugin.name]
        assert found, f"no entry point {self.plugin.name!r} in group {plugins.GROUP!r}: pip install {self.distribution}"
        assert found[0].load() is self.plugin
        assert found[0].dist is not None and found[0].dist.name == self.distribution

    def test_real_unavailable_with_reason(self):
        """real, this machine: availability is False and says why."""
        found = self._require_unavailable()
        assert self.reason in found.reason, found.reason

    def test_real_not_selected(self):
        """real, this machine: automatic selection passes it over; use() refuses it with the reason."""
        import torchdevice

        found = self._require_unavailable()
        with registered(self.plugin):
            assert torchdevice.current_backend() != self.plugin.name
            record = next(r for r in torchdevice.backends() if r.name == self.plugin.name)
            assert not record.available and not record.selected
            try:
                torchdevice.use(self.plugin.name)
            except BackendUnavailableError as exc:
                assert found.reason in str(exc)
            else:
                raise AssertionError(f"use({self.plugin.name!r}) accepted an unavailable backend")

    def test_real_info_says_why(self):
        """real, this machine: `torchdevice info` (installed entry point) lists it unavailable, with the reason."""
        self._require_unavailable()
        info = info_json()
        record = next((b for b in info["backends"] if b["name"] == self.plugin.name), None)
        assert record is not None, f"torchdevice info does not list {self.plugin.name!r}; is {self.distribution} installed?"
        assert record["distribution"] == self.distribution and record["version"] == _version(self.distribution)
        assert record["available"] is False and record["selected"] is False
        assert self.reason in record["reason"], record
        row = next(line for line in info_text().splitlines() if line.startswith(self.plugin.name + " "))
        assert self.reason in row and " no " in row, row


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


# =============================================================================================
# 5. the hook reference of docs/plugins.md
# =============================================================================================

BEGIN = "<!-- BEGIN hook-reference: generated from torchdevice/hookspecs.py and torchdevice/backend.py " \
        "by `python -m torchdevice.testing --write-docs docs/plugins.md`; do not edit by hand -->"
END = "<!-- END hook-reference -->"


def _markdown(doc: str | None) -> str:
    """A reST docstring as Markdown: roles and double backquotes become code spans."""
    text = inspect.cleandoc(doc or "")
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"::$", ":", text, flags=re.MULTILINE)  # the indented block after it is Markdown code too
    return text.replace("``", "`")


def _render_signature(fn, name: str | None = None) -> str:
    """``name(param: annotation = default, ...) -> return`` without ``self``, annotations as written in the source."""
    sig = inspect.signature(fn)
    params, star_done = [], False
    for param in sig.parameters.values():
        if param.name == "self":
            continue
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, star_done = "*" + text, True
        elif param.kind is param.VAR_KEYWORD:
            text = "**" + text
        elif param.kind is param.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        if param.annotation is not param.empty:
            text += f": {_annotation(param.annotation)}"
        if param.default is not param.empty:
            text += f" = {param.default!r}"
        params.append(text)
    returns = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"{name or fn.__name__}({', '.join(params)}){returns}"


def _annotation(annotation) -> str:
    if isinstance(annotation, str):
        return annotation
    return inspect.formatannotation(annotation)


def _members(cls) -> list[tuple[str, Any]]:
    """Public methods and properties ``cls`` declares itself, in source order."""
    return [(name, value) for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))]


def _member_lines(name: str, value) -> list[str]:
    if isinstance(value, property):
        fn = value.fget
        returns = inspect.signature(fn).return_annotation
        head = name + ("" if returns is inspect.Signature.empty else f" -> {_annotation(returns)}") + "` (property)"
        head = "`" + head
    else:
        fn = value
        head = f"`{_render_signature(fn, name)}`"
    doc = " ".join(p.replace("\n", " ") for p in _markdown(fn.__doc__).split("\n\n") if p)
    return [f"* {head}: {doc}" if doc else f"* {head}"]


def hook_reference_markdown() -> str:
    """The hook reference as Markdown: hookspec signatures and docstrings, the ``Backend`` base, and
    every family's operations with their signatures and docstrings, read from the code."""
    from .backend import Backend, EventInterface, Ops, StreamInterface

    lines = []
    hooks = [
        (name, fn) for name, fn in vars(hookspecs).items()
        if name.startswith("torchdevice_") and callable(fn)
    ]
    hooks.sort(key=lambda item: inspect.getsourcelines(item[1])[1])
    for name, fn in hooks:
        opts = getattr(fn, f"{hookspecs.PROJECT}_spec", {}) or {}
        kind = "first result wins" if opts.get("firstresult") else "all results collected"
        lines += [f"### `{_render_signature(fn, name)}`", "", f"*{kind}*", "", _markdown(fn.__doc__), ""]

    lines += ["### `Backend`: the base class of a plugin", "", _markdown(Backend.__doc__), ""]
    for name, value in _members(Backend):
        if not hasattr(value, f"{hookspecs.PROJECT}_impl"):  # the hooks themselves are listed above
            lines += _member_lines(name, value)
    lines.append("")

    lines += ["### The families: what every operation has in common", "", _markdown(Ops.__doc__), ""]
    for family, cls in FAMILIES.items():
        lines += [f"### The {family} family: `{cls.__module__}.{cls.__name__}`", "", _markdown(cls.__doc__), ""]
        for op in cls.operations():
            lines += _member_lines(op, getattr(cls, op))
        lines.append("")
        if family == "streams":
            for iface in (StreamInterface, EventInterface):
                lines += [f"#### `{iface.__name__}`: the backend's `{iface.__name__[:-len('Interface')]}` class", "",
                          _markdown(iface.__doc__), ""]
                for name, value in _members(iface):
                    lines += _member_lines(name, value)
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _replace_block(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"markers not found; the file needs the lines\n{BEGIN}\n{END}")
    return text[: start + len(BEGIN)] + "\n\n" + hook_reference_markdown() + "\n" + text[end:]


def hook_reference_is_current(path: str) -> bool:
    """Whether the generated block of ``path`` matches the hookspecs as they are now."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return _replace_block(text) == text


def write_hook_reference(path: str) -> bool:
    """Regenerate the block of ``path``; return whether it changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = _replace_block(text)
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m torchdevice.testing", description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", metavar="PATH", help="regenerate the hook reference block of PATH")
    parser.add_argument("--check-docs", metavar="PATH", help="exit 1 if the hook reference of PATH is stale")
    parser.add_argument("--check", metavar="MODULE:ATTR", help="run the conformance checks on a plugin object")
    args = parser.parse_args(argv)
    if args.write_docs:
        print(("updated " if write_hook_reference(args.write_docs) else "unchanged ") + args.write_docs)
    if args.check_docs and not hook_reference_is_current(args.check_docs):
        print(f"{args.check_docs}: hook reference is stale; run python -m torchdevice.testing --write-docs "
              f"{args.check_docs}", file=sys.stderr)
        return 1
    if args.check:
        module, _, attr = args.check.partition(":")
        plugin = getattr(importlib.import_module(module), attr or "plugin")
        report = check_backend(plugin, raise_on_failure=False)
        print(report)
        return 0 if report.ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
