"""Device translation where the differential fuzz (tests/devices/test_arguments.py) cannot look.

On a cpu target a tensor that was never moved looks exactly like one that was, so these check
what a program can still observe: the call-site report of every device entry point (what
``torchdevice run --report`` prints), the arguments a move hands to ``.to`` on an indexed
target, torch's own code reading the real ``is_cuda``, checkpoints whose storages were saved on a
device, pickled indexed devices, and the copyreg entry left after unpatch. Expected values are
written from torch's documented behaviour and the README, never read from torchdevice.
"""
from __future__ import annotations

import copyreg
import io
import os
import pickle
import warnings

import pytest
import torch
import torch.nn as nn
from helpers import device_translation_onto_meta

import torchdevice
from torchdevice import devices, router, translate
from torchdevice._patching import Patcher
from torchdevice.errors import InvalidDeviceError

RealDevice = torch.device
RealGenerator = torch.Generator
SOURCES = ("cuda", "xpu", "mtia", "mps")


@pytest.fixture
def translated(on_target):
    with torchdevice.patched():
        yield


def test_every_device_entry_point_is_reported_under_its_name(translated, target, report, tmp_path):
    t, m = torch.ones(2), nn.Linear(1, 1)
    buf = io.BytesIO()
    torch.save({"w": t}, buf)
    moves = [s for s in SOURCES if hasattr(torch.Tensor, s)]
    module_moves = [s for s in SOURCES if hasattr(nn.Module, s)]
    expected = {  # api -> (how, calls)
        "torch.device": ("translated", 3),
        "torch.Generator": ("translated", 1),
        "torch.zeros(device=)": ("translated", 2),
        "torch.ones_like(device=)": ("translated", 1),
        "Tensor.new_zeros(device=)": ("translated", 1),
        "Tensor.to": ("translated", 2),
        "Module.to": ("translated", 1),
        **{f"Tensor.{s}()": ("translated", 1) for s in moves},
        **{f"Module.{s}()": ("translated", 1) for s in module_moves},
        **{f"Tensor.is_{s}": ("translated", 1) for s in SOURCES if hasattr(torch.Tensor, f"is_{s}")},
        "torch.load(map_location=)": ("translated", 1),
        "torch.set_default_device": ("translated", 1),
    }
    if not target.indexed:  # no-ops on a host target; a device type of its own pins and records natively
        expected.update({"Tensor.pin_memory": ("no-op", 1), "Tensor.record_stream": ("no-op", 1),
                         "DataLoader(pin_memory=True)": ("no-op", 1)})
    line = {}
    torch.device("cuda"), torch.device("cuda"), torch.device(0)  # noqa: B018 (the second from the cache)
    line["torch.device"] = _line()
    torch.Generator(device="cuda")
    torch.zeros(1, device="cuda"), torch.zeros(1, device=0)  # noqa: B018
    torch.ones_like(t, device="cuda:0")
    t.new_zeros(1, device="cuda")
    moved, _ = t.to("cuda"), t.to(device="cuda:0")
    m.to("cuda")
    for s in moves:
        getattr(t, s)()
    for s in module_moves:
        getattr(m, s)()
    for s in SOURCES:
        if hasattr(torch.Tensor, f"is_{s}"):
            getattr(t, f"is_{s}")  # noqa: B018
    buf.seek(0)
    torch.load(buf, map_location="cuda")
    torch.set_default_device("cuda")
    torch.set_default_device(None)
    t.pin_memory()
    moved.record_stream(torch.cuda.current_stream())  # a device tensor (a host one has no streams on a GPU)
    torch.utils.data.DataLoader([1, 2], pin_memory=True)
    # untranslated spellings are not translated calls
    torch.device("cpu"), torch.device(RealDevice("cpu")), torch.zeros(1, device="cpu")  # noqa: B018
    torch.Generator(), t.to(torch.float64), t.to("cpu"), m.to(torch.float64)  # noqa: B018
    torch.ones_like(t, device="cpu"), t.new_zeros(1, device="cpu")  # noqa: B018
    uses = report()
    assert uses.pop("torch.cuda.current_stream").calls == 1  # a namespace call, reported as such
    assert {api: (u.how, u.calls) for api, u in uses.items()} == expected
    (site, count), = uses["torch.device"].sites.items()
    assert count == 3  # one call site
    if "MUTANT_UNDER_TEST" not in os.environ:  # under mutmut the caller is its trampoline, not this file
        here = os.path.abspath(__file__)
        assert site == f"{here}:{line['torch.device'] - 1}"
        assert all(site.startswith(here + ":") for u in uses.values() for site in u.sites)


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_torch_internals_see_the_real_is_cuda(translated):
    """README: ``Tensor.is_cuda`` is True for the program, torch's own code sees the real value."""
    t = torch.ones(1, device="cuda")
    source = "seen = {s: getattr(t, 'is_' + s) for s in sources}"
    inside_torch = compile(source, os.path.join(os.path.dirname(torch.__file__), "_torchdevice_probe.py"), "exec")
    outside = compile(source, __file__, "exec")
    sources = [s for s in SOURCES if hasattr(torch.Tensor, f"is_{s}")]
    ns = {"t": t, "sources": sources}
    exec(inside_torch, ns)
    assert ns["seen"] == {s: False for s in sources}  # a host tensor, really
    exec(outside, ns)
    assert ns["seen"] == {s: True for s in sources}


# -- moves on an indexed target (device type meta, 2 devices), with .to spied on -------------


@pytest.fixture
def meta_spied(monkeypatch, on_cpu):
    """Install device translation for a 2-device ``meta`` target over spies of ``.to``, which
    record the arguments torch would receive and move nothing."""
    translate.unpatch()
    calls = []

    def tensor_to(self, *args, **kwargs):
        calls.append(("Tensor.to", args, kwargs))
        return self

    def module_to(self, *args, **kwargs):
        calls.append(("Module.to", args, kwargs))
        return self

    monkeypatch.setattr(torch.Tensor, "to", tensor_to)
    monkeypatch.setattr(nn.Module, "to", module_to)
    with device_translation_onto_meta():
        yield calls


def test_moves_hand_the_target_device_and_their_options_to_to(meta_spied):
    calls = meta_spied
    t, m = torch.ones(1), nn.Linear(1, 1)
    meta, meta1 = RealDevice("meta"), RealDevice("meta", 1)
    t.cuda()
    t.cuda(1)
    t.cuda("cuda:1")
    t.cuda(RealDevice("cuda", 1))
    t.cuda(1, True)
    t.cuda(device=1, non_blocking=True, memory_format=torch.channels_last)
    t.xpu(1)
    m.cuda()
    m.cuda(1)
    assert calls == [
        ("Tensor.to", (meta,), {"non_blocking": False}),
        ("Tensor.to", (meta1,), {"non_blocking": False}),
        ("Tensor.to", (meta1,), {"non_blocking": False}),
        ("Tensor.to", (meta1,), {"non_blocking": False}),
        ("Tensor.to", (meta1,), {"non_blocking": True}),
        ("Tensor.to", (meta1,), {"non_blocking": True, "memory_format": torch.channels_last}),
        ("Tensor.to", (meta1,), {"non_blocking": False}),
        ("Module.to", (meta,), {}),
        ("Module.to", (meta1,), {}),
    ]
    with pytest.raises(InvalidDeviceError):
        t.cuda(2)


def test_moves_land_on_an_indexed_target(on_cpu):
    translate.unpatch()
    patcher = Patcher()
    devices.install(patcher, router.Target("fake-meta", "meta", 2, None, None, None, None, sources=frozenset(SOURCES)))
    try:
        assert torch.ones(1).cuda().device.type == "meta"
        assert torch.ones(1).cuda(1).device.type == "meta"
        assert next(nn.Linear(1, 1).cuda().parameters()).device.type == "meta"
        assert torch.ones(1).to(RealDevice("cuda", 1)).device.type == "meta"  # a real device object
        # pickles of indexed devices keep the index
        for dev in (RealDevice("meta", 1), RealDevice("cpu", 0), RealDevice("meta")):
            assert pickle.loads(pickle.dumps(dev)) == dev
    finally:
        patcher.restore()
        devices.uninstall()


# -- checkpoints whose storages were saved on a device --------------------------------------


def _saved_on(location: str, monkeypatch) -> bytes:
    """A checkpoint as torch writes it from tensors on ``location`` (torch records each storage's
    location with ``torch.serialization.location_tag``; here it reports ``location``)."""
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "location_tag", lambda storage: location)
        buf = io.BytesIO()
        torch.save({"w": torch.arange(3.0)}, buf)
    seen = []
    torch.load(io.BytesIO(buf.getvalue()), map_location=lambda storage, loc: seen.append(loc) or storage)
    assert seen == [location]  # really tagged with that device
    return buf.getvalue()


@pytest.mark.parametrize("location", ["cuda:0", "mps", "xpu:0"])
def test_a_checkpoint_saved_on_a_device_loads_on_the_target(on_target, target, monkeypatch, location):
    translate.unpatch()
    blob = _saved_on(location, monkeypatch)
    with torchdevice.patched():
        for map_location in (None, {location: torch.device("cuda:0")}, {location: "cuda"}, {"cuda:5": "cpu"}):
            loaded = torch.load(io.BytesIO(blob), map_location=map_location)
            assert loaded["w"].device == target.device(0) and loaded["w"].tolist() == [0.0, 1.0, 2.0]


def test_a_checkpoint_from_a_missing_device_raises_like_cuda(on_target, target, monkeypatch):
    translate.unpatch()
    missing = target.count  # one past the target's last device
    blob = _saved_on(f"cuda:{missing}", monkeypatch)
    with torchdevice.patched():
        with pytest.raises(InvalidDeviceError) as info:
            torch.load(io.BytesIO(blob))
    assert (info.value.index, info.value.count, info.value.backend) == (missing, target.count, target.name)
    assert str(info.value) == (f"invalid device ordinal {missing} for torchdevice backend '{target.name}': "
                               f"valid indices are 0..{target.count - 1}")


# -- what unpatch leaves, and the stand-in classes --------------------------------------------


def test_unpatch_gives_pickling_of_devices_back_to_torch(on_target, target):
    translate.unpatch()
    before = copyreg.dispatch_table.get(RealDevice, "absent")
    with torchdevice.patched():
        assert pickle.loads(pickle.dumps(RealDevice("cuda", 0))) == target.device(0)  # read through
    assert copyreg.dispatch_table.get(RealDevice, "absent") == before
    assert pickle.loads(pickle.dumps(RealDevice("cuda", 0))) == RealDevice("cuda", 0)  # torch's own again


def test_stand_in_classes_forward_class_attributes_and_defaults(translated, target):
    assert torch.Generator.manual_seed is RealGenerator.manual_seed
    assert torch.device.type is RealDevice.type and torch.device.index is RealDevice.index
    assert torch.Generator().device == RealDevice("cpu")  # torch's default device
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.Generator("cuda").device == target.device(0)


def test_patch_leaves_the_garbage_collector_as_it_found_it(on_cpu):
    """patch() holds the collector while it installs (docs/performance.md) and gives it back as it was."""
    import gc

    from torchdevice import translate

    assert gc.isenabled()
    translate.patch()
    assert gc.isenabled()
    translate.unpatch()
    gc.disable()
    try:
        translate.patch()
        assert not gc.isenabled()  # the program's choice stands
    finally:
        translate.unpatch()
        gc.enable()
