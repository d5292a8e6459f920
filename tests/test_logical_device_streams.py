"""Logical devices and their streams: ``TORCHDEVICE_DEVICE_COUNT``, a stream's device, default and current
streams, ``set_stream``, checked
against independent expectations.

* ``TORCHDEVICE_DEVICE_COUNT``'s documented grammar (README, "Logical devices"): a whole number of
  at least 1, so ``1`` is valid; anything else is a ``ConfigError`` naming the variable, the value
  and what is valid. Without it torchrun's ``LOCAL_WORLD_SIZE`` decides, and ``1`` means one device.
* ``torch.cuda.Stream(device=None)`` is on the calling thread's current device, and a stream's
  device is checked against its backend's device count (``HostStream.device_count`` when a
  plugin sets it), as ``torch.cuda.Stream(device=n)`` is against ``torch.cuda.device_count()``.
* ``torch.cuda.default_stream(i)`` is device ``i``'s, whichever device is current, and (torchdevice's
  documented promise) one object for every thread, also for threads asking first at the same time.
* ``torch.cuda.current_stream()`` is a stream of the namespace's ``Stream`` class, which
  ``set_stream`` takes back, also after the backend was resolved again with other classes.
* ``set_stream`` of something that is no stream of the backend is an error naming the backend and
  the value; a stream class that names its own event class is left as it is by ``HostStreamOps``.
"""
from __future__ import annotations

import threading
import uuid

import pytest
import torch

import torchdevice
from torchdevice import streams
from torchdevice.errors import ConfigError, InvalidDeviceError

VALID = "give the number of logical devices, a whole number of at least 1"


@pytest.fixture
def environment(on_cpu, monkeypatch):
    """Set (or unset, with None) the variables the device count reads, then re-resolve the cpu backend."""
    def make(**values: str | None):
        for var, value in values.items():
            if value is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, value)
        torchdevice.use("cpu")

    yield make
    torchdevice.set_device(0)


def _fresh_backend() -> str:
    """A backend name nothing has used, so module-level caches (default streams) start empty for it."""
    return f"fresh_{uuid.uuid4().hex}"


# -- TORCHDEVICE_DEVICE_COUNT and LOCAL_WORLD_SIZE ------------------------------------------------------


def test_a_device_count_of_one_is_valid_and_wins_over_local_world_size(environment):
    environment(TORCHDEVICE_DEVICE_COUNT="1", LOCAL_WORLD_SIZE="4")
    assert streams.configured_device_count() == 1 and streams.host_device_count() == 1
    assert torchdevice.device_count() == 1
    with torchdevice.patched():
        assert torch.cuda.device_count() == 1
        with pytest.raises(InvalidDeviceError):
            torch.cuda.Stream(device=1)


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_a_bad_device_count_names_the_variable_the_value_and_what_is_valid(on_cpu, monkeypatch, bad):
    monkeypatch.setenv("TORCHDEVICE_DEVICE_COUNT", bad)  # read here; on_cpu's teardown resolves afresh
    with pytest.raises(ConfigError) as info:
        streams.configured_device_count()
    assert (info.value.variable, info.value.value, info.value.valid) == ("TORCHDEVICE_DEVICE_COUNT", bad, VALID)
    assert str(info.value) == f"TORCHDEVICE_DEVICE_COUNT={bad!r} is not valid: {VALID}"


@pytest.mark.parametrize("local_world_size", ["1", "0"])
def test_one_local_rank_is_one_logical_device(environment, local_world_size):
    # torchrun --nproc-per-node 1 sets LOCAL_WORLD_SIZE=1: that node has one GPU's worth of processes
    environment(TORCHDEVICE_DEVICE_COUNT=None, LOCAL_WORLD_SIZE=local_world_size)
    assert streams.host_device_count() == 1 and torchdevice.device_count() == 1


# -- streams on their device -----------------------------------------------------------------------------


def test_a_stream_without_a_device_is_on_the_current_device(environment):
    environment(TORCHDEVICE_DEVICE_COUNT="2")
    torchdevice.set_device(1)
    assert torchdevice.Stream().device_index == 1
    with torchdevice.patched():
        assert torch.cuda.Stream().device_index == 1  # torch: device=None is the current device
        torch.cuda.set_device(0)
        assert torch.cuda.Stream().device_index == 0


def test_a_stream_class_with_its_own_device_count_is_checked_against_it(environment):
    environment(TORCHDEVICE_DEVICE_COUNT=None, LOCAL_WORLD_SIZE=None)  # the host count is 1

    class TwoDevices(streams.HostStream):
        backend = _fresh_backend()
        device_count = 2

    assert TwoDevices(device=1).device_index == 1

    environment(LOCAL_WORLD_SIZE="4")  # the host count is 4, the class's is still 1

    class OneDevice(streams.HostStream):
        backend = _fresh_backend()
        device_count = 1

    with pytest.raises(InvalidDeviceError):
        OneDevice(device=1)


# -- default and current streams ------------------------------------------------------------------------


def test_the_default_stream_of_a_device_is_that_devices_whichever_is_current(environment):
    environment(TORCHDEVICE_DEVICE_COUNT="2")

    class Fresh(streams.HostStream):
        backend = _fresh_backend()
        device_count = 2

    one = streams.default_stream_of(Fresh, 1)  # device 0 is current
    assert one.device_index == 1 and one.stream_id == 0
    with torchdevice.patched():
        assert torch.cuda.default_stream(1).device_index == 1 and torch.cuda.current_device() == 0


class _GatedLock:
    """A lock that lets its first holder in only once ``parties`` threads are waiting for it; later
    holders pass the gate at once (an implementation that always takes the lock is correct too)."""

    def __init__(self, parties: int):
        self.lock = threading.Lock()
        self.arrived = threading.Barrier(parties, timeout=120)  # a guard against hanging, not a timing
        self.gated = parties
        self.count_lock = threading.Lock()

    def __enter__(self):
        with self.count_lock:
            gated = self.gated > 0
            self.gated -= 1
        if gated:
            self.arrived.wait()
        self.lock.acquire()

    def __exit__(self, *exc):
        self.lock.release()
        return False


def test_threads_asking_for_a_default_stream_at_once_get_the_same_object(on_cpu, monkeypatch):
    # every thread has missed the cached stream before any of them makes it: the one made first is kept
    class Fresh(streams.HostStream):
        backend = _fresh_backend()

    threads_n = 2
    monkeypatch.setattr(streams, "_default_lock", _GatedLock(threads_n))
    seen: list = []
    errors: list = []

    def ask():
        try:
            seen.append(streams.default_stream_of(Fresh, 0))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(seen) == threads_n
    assert seen[0] is seen[1] is streams.default_stream_of(Fresh, 0)


def test_current_stream_after_the_backend_is_resolved_again_is_of_the_new_stream_class(on_cpu):
    name = _fresh_backend()

    def family():
        class ChipStream(streams.HostStream):
            backend = name

        class ChipEvent(streams.HostEvent):
            backend = name

        class ChipStreams(streams.HostStreamOps):
            Stream, Event = ChipStream, ChipEvent

        return ChipStreams(name)

    first = family()
    side = first.Stream()
    first.set_stream(side)
    assert first.current_stream(0) is side
    again = family()  # a plugin resolved again (another use()) brings new classes under the same name
    current = again.current_stream(0)
    # as torch.cuda.current_stream() is a torch.cuda.Stream: the new namespace's default stream
    assert isinstance(current, again.Stream) and current is again.default_stream(0)
    again.set_stream(current)  # what current_stream() gave, set_stream takes back


def test_set_stream_of_something_else_names_the_backend_and_the_value(on_target, target):
    bad = object()
    with pytest.raises(TypeError) as info:
        torchdevice.set_stream(bad)
    # a host backend's streams, or a device type's own namespace's Stream class
    kind = f"torch.{target.device_type}.Stream" if target.indexed else f"{target.name} stream"
    assert f"expects a {kind}" in str(info.value) and repr(bad) in str(info.value)


def test_a_stream_class_that_names_its_event_class_is_left_as_it_is(on_cpu):
    name = _fresh_backend()

    class OwnEvent(streams.HostEvent):
        backend = name

    class NamesItsEvent(streams.HostStream):
        backend = name

        @classmethod
        def event_class(cls) -> type:
            return OwnEvent

    class FamilyEvent(streams.HostEvent):
        backend = name

    before = dict(vars(NamesItsEvent))

    class ChipStreams(streams.HostStreamOps):
        Stream, Event = NamesItsEvent, FamilyEvent

    assert dict(vars(NamesItsEvent)) == before  # not re-paired with FamilyEvent behind its back
    assert type(NamesItsEvent().record_event()) is OwnEvent
