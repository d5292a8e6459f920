"""The vendor kit catches the mistakes a plugin author makes.

A correct two-device host backend with its own Stream/Event classes passes every check; each
planted bug, one at a time in a subclass, must make :func:`torchdevice.testing.check_backend`
report a failure in the check named.
"""
from __future__ import annotations

import pytest
import torch

from torchdevice import hookimpl
from torchdevice.backend import Availability, DeviceProperties, translated, unsupported
from torchdevice.cpu import CPURNG, CPUBackend, CPUMemory, CPUStreams
from torchdevice.streams import HostEvent, HostStream, current_device_of
from torchdevice.testing import check_backend


class KitStream(HostStream):
    backend = "kitchip"
    device_count = 2


class KitEvent(HostEvent):
    backend = "kitchip"


class KitStreams(CPUStreams):
    Stream = KitStream
    Event = KitEvent


class KitBackend(CPUBackend):
    """A correct host backend with two logical devices."""

    name = "kitchip"
    priority = 5
    description = "kit test backend"
    streams_class = KitStreams

    def availability(self):
        return Availability(True, "kit test backend", automatic=False)

    def device_count(self):
        return 2

    def streams(self):
        return self.streams_class(self.name)


# -- the planted bugs --------------------------------------------------------------------------


class SecondsEvent(KitEvent):
    def elapsed_time(self, end_event):
        return super().elapsed_time(end_event) / 1000  # seconds, not milliseconds


class SecondsStreams(CPUStreams):
    Stream = type("SecondsStream", (KitStream,), {})
    Event = SecondsEvent


class GlobalDeviceStreams(KitStreams):
    _device = [0]

    @translated("one current device for every thread (wrong)")
    def current_device(self):
        return self._device[0]

    @translated("one current device for every thread (wrong)")
    def set_device(self, index):
        self._device[0] = index


class ZeroMemory(CPUMemory):
    @translated("always 0 (wrong)")
    def memory_allocated(self, index):
        return 0


class UntaggedMemory(CPUMemory):
    def memory_allocated(self, index):  # no status tag
        return super().memory_allocated(index)


class NoRoundTripRNG(CPURNG):
    @translated("ignores the state (wrong)")
    def set_rng_state(self, state, index):
        return None


class UnpairedStream(KitStream):
    @classmethod
    def event_class(cls):
        return HostEvent  # record_event() makes the CPU backend's event


class UnpairedStreams(CPUStreams):
    Stream = UnpairedStream
    Event = type("UnpairedEvent", (KitEvent,), {})


class CountlessStream(HostStream):
    backend = "kitchip"  # device_count left None: Stream(device=1) is checked against one device


class CountlessStreams(CPUStreams):
    Stream = CountlessStream
    Event = type("CountlessEvent", (KitEvent,), {})


class PerInstanceStreams(CPUStreams):
    """The classes set in __init__, not in the class body: HostStreamOps never pairs them."""

    def __init__(self, backend):
        self.Stream = type("LateStream", (KitStream,), {})
        self.Event = type("LateEvent", (KitEvent,), {})
        super().__init__(backend)


class OneDeviceMemory(CPUMemory):
    """Per-device peaks sized for one device (a list of length 1): index 1 fails."""

    def __init__(self, backend):
        super().__init__(backend)
        self._peaks = [0]

    @translated("per-device peaks (wrongly sized)")
    def memory_allocated(self, index):
        value = super().memory_allocated(index)
        self._peaks[index] = max(self._peaks[index], value)
        return value


def _plant(bug: str):
    if bug == "per_device_state_for_one":
        return type("B", (KitBackend,), {"memory": lambda self: OneDeviceMemory(self.name)})()
    if bug == "stream_device_count":
        return type("B", (KitBackend,), {"streams_class": CountlessStreams})()
    if bug == "event_class_per_instance":
        return type("B", (KitBackend,), {"streams_class": PerInstanceStreams})()
    if bug == "seconds":
        return type("B", (KitBackend,), {"streams_class": SecondsStreams})()
    if bug == "global_device":
        return type("B", (KitBackend,), {"streams_class": GlobalDeviceStreams})()
    if bug == "memory_zero":
        return type("B", (KitBackend,), {"memory": lambda self: ZeroMemory(self.name)})()
    if bug == "untagged":
        return type("B", (KitBackend,), {"memory": lambda self: UntaggedMemory(self.name)})()
    if bug == "rng":
        return type("B", (KitBackend,), {"rng": lambda self: NoRoundTripRNG(self.name)})()
    if bug == "event_class":
        return type("B", (KitBackend,), {"streams_class": UnpairedStreams})()
    if bug == "count_vs_properties":
        def device_properties(self, index):
            if index > 0:
                raise IndexError(f"no device {index}")
            return DeviceProperties(name="kit", total_memory=1 << 30)
        return type("B", (KitBackend,), {"device_properties": device_properties})()
    if bug == "availability_raises":
        def availability(self):
            raise RuntimeError("driver missing")
        return type("B", (KitBackend,), {"availability": availability})()
    if bug == "misspelled_hook":
        @hookimpl
        def torchdevice_availabilty(self, name):
            return None
        return type("B", (KitBackend,), {"torchdevice_availabilty": torchdevice_availabilty})()
    raise AssertionError(bug)


PLANTED = {  # bug -> the check that must fail
    "seconds": "behaviour",
    "global_device": "behaviour",
    "memory_zero": "behaviour",
    "event_class": "behaviour",
    "untagged": "tags",
    "rng": "router",
    "count_vs_properties": "families",
    "availability_raises": "availability",
    "misspelled_hook": "hookimpls",
    "stream_device_count": "behaviour",
    "event_class_per_instance": "behaviour",
    "per_device_state_for_one": "router",
}


def test_a_correct_backend_passes_every_check():
    report = check_backend(KitBackend(), raise_on_failure=False)
    assert report.ok, str(report)
    # nothing skipped either, but the queues check: a host-synchronous backend has no sleep to make pending work
    assert all(r.ok for r in report.results if r.name != "queues"), str(report)
    assert {r.name: r.ok for r in report.results}["queues"] is None, str(report)


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_kit_catches_the_planted_bug(bug):
    report = check_backend(_plant(bug), raise_on_failure=False)
    failed = {r.name: r.detail for r in report.failures}
    assert PLANTED[bug] in failed, str(report)


def test_paired_classes_make_record_event_the_backends_event():
    assert KitStream.event_class() is KitEvent and KitEvent.stream_class is KitStream
    assert isinstance(KitStream(0).record_event(), KitEvent)
    assert current_device_of("kitchip") == 0
    assert torch.equal(torch.ones(1), torch.ones(1))


def test_an_event_left_as_another_backends_is_refused_where_the_family_is_defined():
    # HostEvent is the cpu backend's: its record() would use the cpu backend's streams
    with pytest.raises(TypeError, match="backend 'kitchip' but Event HostEvent to backend 'cpu'.*set it as Event"):
        type("HalfPaired", (CPUStreams,), {"Stream": KitStream})


class _Absent(KitBackend):
    def availability(self):
        return Availability(False, "kitchip hardware not present")


def test_tag_and_unsupported_checks_run_without_the_hardware():
    def quietly(self, *args):
        return 0  # tagged unsupported, but returns a value

    quietly.__torchdevice_status__ = unsupported("memory_stats").__torchdevice_status__
    liar = type("Liar", (CPUMemory,), {"memory_stats": quietly})
    absent = type("B", (_Absent,), {"memory": lambda self: liar(self.name)})()
    report = check_backend(absent, raise_on_failure=False)
    results = {r.name: r for r in report.results}
    assert results["unsupported"].ok is False and "memory.memory_stats" in results["unsupported"].detail
    assert results["tags"].ok is True and results["families"].ok is None  # the device checks still skip
    untagged = type("B", (_Absent,), {"memory": lambda self: UntaggedMemory(self.name)})()
    failed = {r.name: r.detail for r in check_backend(untagged, raise_on_failure=False).failures}
    assert "memory.memory_allocated" in failed["tags"]



def test_building_blocks_notes_do_not_speak_for_the_cpu_backend_under_another():
    # kitchip reuses CPUMemory, CPURNG, HostStream/HostEvent and DeviceComm with two devices: the
    # matrix must describe kitchip, not claim "one device", "the CPU backend" or torchdevice's authorship
    from torchdevice import matrix
    from torchdevice.testing import registered

    with registered(KitBackend()):
        notes = {row.api: row.statuses["kitchip"][1]
                 for row in matrix.rows(["kitchip"]) + matrix.extra_rows(["kitchip"]) if "kitchip" in row.statuses}
    assert notes["torch.cuda.Event"].startswith("KitEvent: host-synchronous event built on torchdevice.streams.HostEvent")
    wrong = {api: note for api, note in notes.items()
             if any(claim in note.lower() for claim in ("cpu backend", "one device", "implemented by torchdevice"))}
    assert not wrong, wrong
    assert "plugin" in matrix.LEGEND[matrix.Status.EMULATED]
