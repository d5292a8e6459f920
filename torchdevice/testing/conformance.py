"""The conformance checks of the vendor kit: :func:`check_backend` (a :class:`ConformanceReport`) and
:class:`BackendConformance` (the same checks as a pytest mixin); :data:`CHECKS` lists them."""
from __future__ import annotations

import collections
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pluggy
import torch

from .. import hookspecs, router
from ..backend import (
    FAMILIES,
    STATUS_ATTR,
    Availability,
    BackendSpec,
    DeviceProperties,
    Status,
    status_of,
)
from ..errors import BackendUnavailableError, UnsupportedError
from ..vocabulary import SOURCE_FAMILIES
from .sandbox import registered


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
    untagged: list[str] = []
    counts: collections.Counter[str] = collections.Counter()
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
    """Every operation tagged unsupported raises UnsupportedError naming the backend; checked without
    hardware too (raising needs no device)."""
    name, checked = _spec(plugin).name, 0
    for family, ops in _families_without_hardware(plugin).items():
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


def _check_streams_every_index(active, device_type: str) -> str:
    """Streams of every device index, and the Stream/Event classes translated code sees."""
    import torchdevice

    streams, count = active.streams, active.device_count
    if streams.Stream is None or not all(_supported(streams, op) for op in ("current_stream", "default_stream")):
        return ""
    for index in range(count):
        try:
            made = torchdevice.Stream(device=index)
        except Exception as exc:
            raise AssertionError(
                f"Stream(device={index}) raised {type(exc).__name__}: {exc}, but the backend has {count} devices "
                "(give the Stream class the backend's device count)") from None
        for what, stream in ((f"Stream(device={index})", made), (f"current_stream({index})", torchdevice.current_stream(index)),
                             (f"default_stream({index})", torchdevice.default_stream(index))):
            assert stream.device_index == index, f"{what}.device_index is {stream.device_index!r}, not {index}"
    source = next(s for s in SOURCE_FAMILIES if s != device_type)
    done = f"streams of all {count} device(s)"
    with torchdevice.patched():  # what a program written for another family sees
        ns = getattr(torch, source)
        if getattr(ns, "Stream", None) is None or getattr(ns, "Event", None) is None:
            return done
        for index in range(count):
            tensor = torch.ones(1, device=f"{source}:{index}")
            stream = ns.Stream(device=index)
            assert stream.device == tensor.device, (
                f"torch.{source}.Stream(device={index}).device is {stream.device}, but a tensor made on "
                f"'{source}:{index}' is on {tensor.device}: they must agree")
        current = ns.current_stream()
        assert isinstance(current, ns.Stream), f"torch.{source}.current_stream() is not a torch.{source}.Stream: {current!r}"
        recorded = current.record_event()
        assert isinstance(recorded, ns.Event), (
            f"torch.{source}.current_stream().record_event() made {recorded!r}, not a torch.{source}.Event")
        event = ns.Event()
        event.record()  # on the current stream: the backend's own, not another backend's
        event.synchronize()
    return done + f", torch.{source}.Stream/Event under translation"


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
    per-thread current device and stream, streams of every device index (agreeing with the tensors'
    device), memory figures that move with the backend's tensors."""
    import torchdevice

    spec = _spec(plugin)
    _available(plugin)
    with registered(plugin), torchdevice.use(spec.name):
        active = router.active()
        done = []
        if all(_supported(active.streams, op) for op in ("current_stream", "synchronize")):
            done.append(_check_event_timing(active))
        done.append(_check_per_thread(active, active.device_count))
        done.append(_check_streams_every_index(active, spec.device_type))
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
                for index in range(count):  # every device: per-device state sized for one shows here
                    assert isinstance(torchdevice.memory_allocated(index), int), f"memory_allocated({index}) is not an int"
                done.append("memory_allocated")
            if _supported(active.streams, "synchronize"):
                torchdevice.synchronize()
                done.append("synchronize")
            if _supported(active.streams, "current_stream"):
                torchdevice.current_stream()
                done.append("current_stream")
            if _supported(active.rng, "get_rng_state") and _supported(active.rng, "set_rng_state"):
                for index in range(count):
                    state = torchdevice.get_rng_state(index).clone()
                    if _supported(active.rng, "manual_seed_all"):
                        torchdevice.manual_seed_all(12345)  # move the generators, so a set_rng_state that does nothing shows
                    elif _supported(active.rng, "manual_seed"):
                        torchdevice.manual_seed(12345)
                    torchdevice.set_rng_state(state, index)
                    assert torch.equal(torchdevice.get_rng_state(index), state), (
                        f"get_rng_state({index}) after set_rng_state(state, {index}) differs")
                done.append(f"rng round trip on {count} device(s)")
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
