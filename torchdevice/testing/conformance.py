"""The conformance checks of the vendor kit: :func:`check_backend` (a :class:`ConformanceReport`) and
:class:`BackendConformance` (the same checks as a pytest mixin); :data:`CHECKS` lists them."""
from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, cast

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

if TYPE_CHECKING:
    from ..backend import Ops
    from ..router import Target

    #: a plugin under test: any object implementing the torchdevice hooks (a Backend subclass or not)
    Plugin = Any


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


def _spec(plugin: Plugin) -> BackendSpec:
    specs = plugin.torchdevice_backends()
    assert isinstance(specs, (list, tuple)) and specs, f"torchdevice_backends() returned {specs!r}, not a list of BackendSpec"
    for spec in specs:
        assert isinstance(spec, BackendSpec), f"torchdevice_backends() returned {spec!r}, not a BackendSpec"
    return specs[0]


def check_spec(plugin: Plugin) -> str:
    """The declaration: a name usable in env lists, a torch device type, an int priority."""
    for spec in plugin.torchdevice_backends():
        assert isinstance(spec, BackendSpec), f"{spec!r} is not a BackendSpec"
        assert isinstance(spec.name, str) and _NAME.match(spec.name), (
            f"backend name {spec.name!r} must be letters, digits, '_', '.', '-' (it appears in "
            "TORCHDEVICE_BACKEND and comma-separated NAME=VALUE lists)")
        assert spec.name != _OTHER
        if not router._known_device_type(spec.device_type, spec.privateuse1):
            holder = torch._C._get_privateuse1_backend_name()
            if spec.privateuse1 is not True:
                raise AssertionError(
                    f"device_type {spec.device_type!r} is not a torch device type; a backend that names torch's "
                    "PrivateUse1 device when it loads declares privateuse1=True")
            raise AssertionError(
                f"device_type {spec.device_type!r} is not a torch device type, nor free to name torch's PrivateUse1 "
                f"device (torch.utils.rename_privateuse1_backend; it is claimed as {holder!r})")
        assert isinstance(spec.priority, int) and not isinstance(spec.priority, bool), (
            f"priority {spec.priority!r} must be an int")
        assert isinstance(spec.description, str)
    return ""


def check_hookimpls(plugin: Plugin) -> str:
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


def check_availability(plugin: Plugin) -> str:
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


def _available(plugin: Plugin) -> Availability:
    found = plugin.torchdevice_availability(name=_spec(plugin).name)
    if not found:
        raise _Skip(f"not available here: {found.reason}")
    return found


def _families(plugin: Plugin) -> dict[str, Any]:
    name = _spec(plugin).name
    return {family: getattr(plugin, f"torchdevice_{family}")(name=name) for family in FAMILIES}


def check_families(plugin: Plugin) -> str:
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


def _families_without_hardware(plugin: Plugin) -> dict[str, Any]:
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


def _available_or_none(plugin: Plugin) -> bool:
    try:
        return bool(plugin.torchdevice_availability(name=_spec(plugin).name))
    except Exception:
        return False


def check_tags(plugin: Plugin) -> str:
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


def check_unsupported(plugin: Plugin) -> str:
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


def _supported(ops: Ops, op: str) -> bool:
    return status_of(ops, op)[0] is not Status.UNSUPPORTED


def _check_event_timing(active: Target) -> str:
    import torchdevice

    start, end = torchdevice.Event(enable_timing=True), torchdevice.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 40 <= ms <= 5000, f"elapsed_time around a 50 ms sleep gave {ms!r}: it must be in milliseconds"
    recorded = torchdevice.current_stream().record_event()
    event_class = cast(type, active.streams.Event)  # it has one: the events above are made of it
    assert isinstance(recorded, event_class), (
        f"current_stream().record_event() made a {type(recorded).__name__}, not the backend's Event class "
        f"{event_class.__name__} (pair the Stream and Event classes)")
    return "event timing in ms, record_event() makes the backend's Event"


def _in_thread(fn: Callable[[], Any]) -> Any:
    out: dict = {}

    def run() -> None:
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


def _check_per_thread(active: Target, count: int) -> str:
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


def _check_streams_every_index(active: Target, device_type: str) -> str:
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


def _check_memory_moves(active: Target, device_type: str) -> str:
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


def _device_figures(active: Target) -> list[int]:
    for index in range(active.device_count):
        if _supported(active.streams, "synchronize"):
            active.streams.synchronize(index)
    return [active.memory.memory_allocated(index) for index in range(active.device_count)]


def _check_memory_per_device(active: Target, device_type: str) -> str:
    """On a backend with its own device type: a tensor on device i moves memory_allocated(i) by at least its
    bytes, and no other index's figure."""
    if device_type == "cpu" or not _supported(active.memory, "memory_allocated"):
        return ""
    if status_of(active.memory, "memory_allocated")[0] is Status.NOOP:
        return ""
    size = 16 << 20
    for index in range(active.device_count):
        before = _device_figures(active)
        held = torch.empty(size, dtype=torch.uint8, device=torch.device(device_type, index))
        after = _device_figures(active)
        del held
        grew = after[index] - before[index]
        assert grew >= size, (
            f"memory_allocated({index}) moved by {grew} bytes when a {size >> 20} MiB tensor was allocated on "
            f"'{device_type}:{index}': count the bytes your allocator holds for each device")
        moved = {other: after[other] - before[other] for other in range(len(after)) if other != index}
        assert not any(moved.values()), (
            f"memory_allocated moved on other devices ({moved}, bytes by index) when a tensor was allocated on "
            f"'{device_type}:{index}': each index must report its own device's figure")
    return f"memory_allocated per device on {active.device_count} device(s)"


def _draw(active: Target, device_type: str, index: int) -> torch.Tensor | None:
    """Eight numbers from device ``index``'s generator: a device op on a backend with its own device type
    (which must draw from the generator the rng family seeds), else the family's default generator."""
    if device_type != "cpu":
        return torch.rand(8, device=torch.device(device_type, index)).cpu()
    if _supported(active.rng, "default_generator"):
        return torch.rand(8, generator=active.rng.default_generator(index))
    return None


def _seed_on(active: Target, index: int, seed: int) -> None:
    """``manual_seed(seed)`` with device ``index`` current (it seeds the current device only)."""
    streams, previous = active.streams, active.streams.current_device()
    streams.set_device(index)
    try:
        active.rng.manual_seed(seed)
    finally:
        streams.set_device(previous)


def _check_generators(active: Target, device_type: str) -> str:
    """With several devices, on a backend with its own device type or queues: one generator per device."""
    rng, streams = active.rng, active.streams
    if active.device_count < 2 or (device_type == "cpu" and not _supported(streams, "sleep")):
        return ""  # a host backend may share torch's CPU generator among its devices (CPURNG)
    needed = [(rng, "manual_seed"), (rng, "manual_seed_all"), (rng, "get_rng_state"), (streams, "set_device"),
              (streams, "current_device")]
    if not all(_supported(ops, op) for ops, op in needed):
        return ""
    rng.manual_seed_all(5)
    first = _draw(active, device_type, 0)
    rng.manual_seed_all(5)
    state = rng.get_rng_state(0).clone()
    _seed_on(active, 1, 1234)
    assert torch.equal(rng.get_rng_state(0), state), (
        "seeding device 1 (manual_seed with device 1 current) changed device 0's generator state: each device "
        "needs a generator of its own")
    again = _draw(active, device_type, 0)
    assert first is None or again is None or torch.equal(first, again), (
        f"device 0 drew {again.tolist()} after manual_seed_all(5) and seeding device 1, {first.tolist()} after "
        "manual_seed_all(5) alone: seeding device 1 moved device 0's generator, or the draws do not come from it")
    draws = []
    for _ in range(2):
        _seed_on(active, 1, 1234)
        draws.append(_draw(active, device_type, 1))
    assert draws[0] is None or draws[1] is None or torch.equal(draws[0], draws[1]), (
        f"device 1 drew {draws[0].tolist()}, then {draws[1].tolist()} after the same manual_seed(1234): "
        "random ops on a device must draw from the generator its rng family seeds")
    return f"one generator per device ({active.device_count})"


def check_behaviour(plugin: Plugin) -> str:
    """What a plugin can get wrong behind correct types: event timing units, Event/Stream classes,
    per-thread current device and stream, streams of every device index (agreeing with the tensors'
    device), memory figures that move with the backend's tensors (per device, for a backend with its own
    device type), independent generators per device (a backend with its own device type or queues)."""
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
        done.append(_check_memory_per_device(active, spec.device_type))
        done.append(_check_generators(active, spec.device_type))
    return "; ".join(d for d in done if d)


#: The length of the wait the ``queues`` check queues, in milliseconds.
QUEUED_MS = 200.0


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def _queue_wait(active: Target, index: int) -> tuple[Any, float]:
    """Queue :data:`QUEUED_MS` of work on device ``index``'s current stream; return the stream and when."""
    stream, start = active.streams.current_stream(index), time.perf_counter()
    active.streams.sleep(QUEUED_MS, index)
    took = _ms_since(start)
    assert took < QUEUED_MS / 2, (
        f"streams.sleep({QUEUED_MS:g}, {index}) blocked the host for {took:.0f} ms: it must queue the wait on the "
        "stream and return at once, as torch.cuda._sleep does")
    return stream, start


#: How often the ``queues`` check samples ``query()`` while the queued work runs, in milliseconds.
QUERY_EVERY_MS = 5.0


def _check_query(active: Target, index: int) -> None:
    """``query()`` is False right after queuing and at every sample while the work runs (for the first half of
    it): a query() that turns True once a worker has taken the last job off the queue, before that job is
    done, would pass a single look right after queuing, which can come before the worker takes it."""
    stream, start = _queue_wait(active, index)
    while True:
        elapsed = _ms_since(start)
        busy = stream.query()
        assert busy is False, (
            f"current_stream({index}).query() is {busy!r} {elapsed:.0f} ms into {QUEUED_MS:g} ms of queued work: "
            "it must be False until the stream's work is complete (not only until a worker takes it off the queue)")
        if elapsed >= QUEUED_MS / 2:
            break
        time.sleep(QUERY_EVERY_MS / 1000)
    stream.synchronize()
    assert stream.query() is True, f"current_stream({index}).query() is not True after its synchronize()"


def _check_device_synchronize(active: Target, index: int) -> None:
    stream, start = _queue_wait(active, index)
    active.streams.synchronize(index)
    waited = _ms_since(start)
    assert stream.query() is True, (
        f"current_stream({index}).query() is False right after synchronize({index}): it must wait for every "
        f"queue of device {index}")
    assert waited >= 0.9 * QUEUED_MS, (
        f"synchronize({index}) returned {waited:.0f} ms after {QUEUED_MS:g} ms of work was queued on device "
        f"{index}: it did not wait for the device's queues")


def _check_record(active: Target, index: int) -> None:
    streams = active.streams
    event_class = cast(type, streams.Event)  # (a backend without one, None, fails the check here)
    begin, end = event_class(enable_timing=True), event_class(enable_timing=True)
    stream = streams.current_stream(index)
    begin.record(stream)
    _queue_wait(active, index)
    start = time.perf_counter()
    end.record(stream)
    took = _ms_since(start)
    assert took < QUEUED_MS / 2, (
        f"Event.record() blocked the host for {took:.0f} ms behind {QUEUED_MS:g} ms of queued work: it must only "
        "mark the stream and return (the work is waited for by synchronize())")
    end.synchronize()
    ms = begin.elapsed_time(end)
    low, high = 0.75 * QUEUED_MS, 10 * QUEUED_MS
    assert isinstance(ms, float) and low <= ms <= high, (
        f"elapsed_time() between events around {QUEUED_MS:g} ms of queued work gave {ms!r}: it must be in "
        f"milliseconds, {low:g} to {high:g} ({QUEUED_MS / 1000:g} would be seconds, {QUEUED_MS * 1000:g} "
        "microseconds)")


def check_queues(plugin: Plugin) -> str:
    """With pending work made by ``streams.sleep`` (run only where the backend implements it): ``query()`` False
    while it runs and True after ``synchronize()``; ``synchronize(i)`` waits for device i's queues;
    ``Event.record()`` does not block the host; ``elapsed_time`` around it is in milliseconds."""
    import torchdevice

    spec = _spec(plugin)
    _available(plugin)
    with registered(plugin), torchdevice.use(spec.name):
        active = router.active()
        if not _supported(active.streams, "sleep"):
            raise _Skip("streams.sleep is not implemented: the backend cannot make pending work (host-synchronous), "
                        "so queries, synchronize and event timing are not checked against queued work")
        last = active.device_count - 1
        try:
            _check_query(active, 0)
            for index in range(active.device_count):
                _check_device_synchronize(active, index)
            _check_record(active, last)
        finally:
            for index in range(active.device_count):
                active.streams.synchronize(index)
    return (f"{QUEUED_MS:g} ms queued: query False then True, synchronize(i) waits on each of "
            f"{active.device_count} device(s), record() returns at once, elapsed_time in ms")


def check_router(plugin: Plugin) -> str:
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
    "queues": check_queues,
}

#: The checks that need the backend's real behaviour (a stand-in namespace has none).
BEHAVIOUR_CHECKS = ("behaviour", "queues")


def run_check(plugin: Plugin, check: str) -> CheckResult:
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


def check_backend(plugin: Plugin, *, checks: Iterable[str] | None = None, raise_on_failure: bool = True) -> ConformanceReport:
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

    def _run(self, plugin: Plugin, check: str) -> None:
        import pytest

        result = run_check(plugin, check)
        if result.ok is None:
            pytest.skip(result.detail)
        assert result.ok, str(result)

    def test_conformance_spec(self, plugin: Plugin) -> None:
        self._run(plugin, "spec")

    def test_conformance_hookimpls(self, plugin: Plugin) -> None:
        self._run(plugin, "hookimpls")

    def test_conformance_availability(self, plugin: Plugin) -> None:
        self._run(plugin, "availability")

    def test_conformance_families(self, plugin: Plugin) -> None:
        self._run(plugin, "families")

    def test_conformance_tags(self, plugin: Plugin) -> None:
        self._run(plugin, "tags")

    def test_conformance_unsupported(self, plugin: Plugin) -> None:
        self._run(plugin, "unsupported")

    def test_conformance_router(self, plugin: Plugin) -> None:
        self._run(plugin, "router")

    def test_conformance_behaviour(self, plugin: Plugin) -> None:
        self._run(plugin, "behaviour")

    def test_conformance_queues(self, plugin: Plugin) -> None:
        self._run(plugin, "queues")
