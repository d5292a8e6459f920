"""Host streams and events (torchdevice.streams) where a CUDA program can tell them apart.

Checked against what ``torch.cuda.Stream``/``torch.cuda.Event`` do: a stream context switches the
current device and stream and restores both, and lets exceptions through; ``record_event()``
records on that stream a new event of the namespace's class; an event knows its device once
recorded; ``elapsed_time`` is the host clock's difference in milliseconds, with CUDA's errors;
the default stream of a device is one object shared by every thread. Backends built on these
classes (MLX) get their Stream and Event paired by subclassing ``HostStreamOps``.
"""
from __future__ import annotations

import threading
import types
import uuid

import pytest
import torch

import torchdevice
from torchdevice import streams, vocabulary
from torchdevice.errors import UnsupportedError


@pytest.fixture
def two_devices(on_cpu, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # host backends: one device per local rank
    torchdevice.use("cpu")
    torchdevice.set_device(0)
    yield
    torchdevice.set_device(0)


def test_a_stream_context_switches_device_and_stream_and_restores_both(two_devices):
    torchdevice.set_device(1)
    outer = torchdevice.current_stream()
    side = torchdevice.Stream(device=0)
    with side:
        assert torchdevice.current_device() == 0 and torchdevice.current_stream() == side
    assert torchdevice.current_device() == 1 and torchdevice.current_stream() == outer
    with pytest.raises(KeyError, match="inside"):  # exceptions pass through, state is restored
        with side:
            raise KeyError("inside")
    assert torchdevice.current_device() == 1


def test_record_event_records_a_new_event_on_that_stream(two_devices):
    side = torchdevice.Stream(device=1)
    event = side.record_event()
    assert type(event) is type(torchdevice.Event()) and event.device == torch.device("cpu")
    assert event._stream.device_index == 1
    mine = torchdevice.Event()
    assert side.record_event(mine) is mine and mine.device == torch.device("cpu") and mine._stream is side


def test_an_event_records_on_the_current_device_by_default(two_devices):
    event = torchdevice.Event()
    assert event.device is None and event.synchronize() is None  # unrecorded: no device, nothing to wait for
    assert repr(event) == "<torchdevice.Event backend=cpu unrecorded enable_timing=False>"
    torchdevice.set_device(1)
    event.record()
    assert event.device == torch.device("cpu") and event.synchronize() is None
    assert event._stream.device_index == 1
    assert repr(event) == "<torchdevice.Event backend=cpu recorded enable_timing=False>"


def test_elapsed_time_is_the_host_clock_in_milliseconds(on_cpu, monkeypatch):
    clock = iter([1_000_000, 3_500_000])
    monkeypatch.setattr(streams, "time", types.SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    start, end = torchdevice.Event(enable_timing=True), torchdevice.Event(enable_timing=True)
    start.record()
    end.record()
    assert start.elapsed_time(end) == 2.5


def test_elapsed_time_raises_with_cudas_messages(on_cpu):
    timed, untimed = torchdevice.Event(enable_timing=True), torchdevice.Event()
    timed.record()
    untimed.record()
    needs_timing = "Both events must be created with argument 'enable_timing=True'."
    for start, end in ((timed, untimed), (untimed, timed), (timed, object())):
        with pytest.raises(ValueError) as info:
            start.elapsed_time(end)
        assert str(info.value) == needs_timing
    with pytest.raises(ValueError) as info:
        timed.elapsed_time(torchdevice.Event(enable_timing=True))
    assert str(info.value) == "Both events must be recorded before calculating elapsed time."


def test_interprocess_events_are_refused_with_what_to_do(on_cpu):
    with pytest.raises(UnsupportedError) as info:
        torchdevice.Event(interprocess=True)
    assert (info.value.function, info.value.backend, info.value.instead) == (
        "Event(interprocess=True)", "cpu", "share results through torch.multiprocessing instead")


def test_the_default_stream_is_one_object_per_device_for_every_thread(on_cpu):
    class Fresh(streams.HostStream):  # a backend nothing has used: its default streams are made here
        backend = f"fresh_{uuid.uuid4().hex}"

    zero = streams.default_stream_of(Fresh, 0)
    assert type(zero) is Fresh and zero.stream_id == 0 and zero.device_index == 0
    seen = []
    thread = threading.Thread(target=lambda: seen.append(streams.default_stream_of(Fresh, 0)))
    thread.start()
    thread.join()
    assert seen[0] is zero and streams.default_stream_of(Fresh, 0) is zero
    assert torchdevice.default_stream() is torchdevice.default_stream()


def test_subclassing_host_stream_ops_pairs_its_stream_and_event(on_cpu):
    class ChipStream(streams.HostStream):
        backend = "pairchip"

    class ChipEvent(streams.HostEvent):
        backend = "pairchip"

    class ChipStreams(streams.HostStreamOps):
        Stream, Event = ChipStream, ChipEvent

    assert ChipStream.event_class() is ChipEvent and ChipEvent.stream_class is ChipStream
    assert streams.HostStream.event_class() is streams.HostEvent  # the base pairing is untouched
    assert streams.HostEvent.stream_class is streams.HostStream

    class OwnEvent(streams.HostEvent):
        pass

    class KeepsItsOwn(streams.HostStream):  # a stream class that names its event class itself
        _event_class = OwnEvent

    class BoundEvent(streams.HostEvent):
        stream_class = streams.HostStream

    class OtherStreams(streams.HostStreamOps):
        Stream, Event = KeepsItsOwn, BoundEvent

    assert KeepsItsOwn.event_class() is OwnEvent and BoundEvent.stream_class is streams.HostStream

    # a family whose Stream and Event belong to different backends is refused where it is defined
    # (the base Stream is never re-paired either way)
    with pytest.raises(TypeError, match="Stream HostStream belongs to backend 'cpu' but Event .*ChipEvent to backend 'pairchip'"):
        class EventOnly(streams.HostStreamOps):
            Event = ChipEvent

    assert streams.HostStream.event_class() is streams.HostEvent and ChipEvent.stream_class is ChipStream


def test_device_like_objects_name_their_index(on_cpu):
    assert vocabulary.index_in("cuda:1") == 1 and vocabulary.index_in("cuda") is None
    assert vocabulary.index_in(types.SimpleNamespace(index=1)) == 1  # anything with an index, as torch.device


def test_stream_and_event_devices_agree_with_the_tensors_under_translation(two_devices):
    # a CUDA program sees one device for a tensor and the stream it was made on, as on CUDA
    with torchdevice.patched():
        for index in (0, 1):
            tensor = torch.ones(2, device=f"cuda:{index}")
            stream = torch.cuda.Stream(device=index)
            event = stream.record_event()
            assert stream.device == tensor.device == event.device
            assert stream.device_index == index
            with torch.cuda.device(stream.device_index):
                assert torch.cuda.current_stream().device == tensor.device
