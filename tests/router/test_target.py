"""``router.Target``: the one snapshot of a backend that the router caches, translation installs against,
the namespaces' rules read and the matrix builds per backend."""
from __future__ import annotations

import pytest
import torch

from torchdevice import distributed, matrix, router, translate
from torchdevice.backend import Status
from torchdevice.errors import InvalidDeviceError, TorchDeviceError


def test_translation_installs_against_the_active_backends_own_objects(on_cpu):
    active = router.active()
    assert router.active() is active  # cached: resolved once
    try:
        target = translate.patch(report_available=False, source="mps")
        assert isinstance(target, router.Target) and target is not active
        assert (target.name, target.device_type, target.device_count) == (active.name, "cpu", active.device_count)
        for family in ("memory", "streams", "rng", "collectives"):
            assert getattr(target, family) is getattr(active, family), family
        assert (target.report_available, target.source) == (False, "mps")
        assert (active.report_available, active.source) == (True, "cuda")  # the router's copy keeps the defaults
        assert target.sources == frozenset({"cuda", "mps", "xpu", "mtia"})  # cpu is no source family
        # report_available=False on a cpu target: no namespace claims a device, whichever the source family
        assert not target.available and not target.available_for("mps") and not torch.mps.is_available()
    finally:
        translate.unpatch()


def test_a_translating_copy_shares_the_properties_asked_and_has_its_own_state(on_cpu):
    active = router.active()
    props = active.properties(0)
    copy = active.translating(report_available=True, source="xpu")
    assert copy.properties(0) is props  # not asked of the plugin again
    copy.state["sync_debug_mode"] = 2
    assert "sync_debug_mode" not in active.state
    assert copy.translating(True, "xpu").state == {}
    assert copy.available_for("xpu") and not copy.available_for("cuda")


def test_index_follows_the_backends_device_count(on_cpu):
    active = router.active()
    current = active.streams.current_device()
    assert active.index(None) == active.index(-1) == active.index("cuda") == current
    assert active.index(active.device_count - 1) == active.device_count - 1
    with pytest.raises(InvalidDeviceError, match="cpu"):
        active.index(active.device_count)
    no_streams = router.Target("bare", "meta", 2, None, None, None, None)  # type: ignore[arg-type]
    assert no_streams.index(1) == 1
    with pytest.raises(TorchDeviceError, match="'bare' has no stream operations"):
        no_streams.index(None)


def test_op_reads_the_families_status_tags():
    class Collectives:
        dist_backend = None

    target = router.Target("bare", "meta", 1, None, None, None, Collectives())  # type: ignore[arg-type]
    status, note = target.op("memory", "memory_allocated")
    assert status is Status.UNSUPPORTED and "no memory operations" in note
    # distributed answers for the backend it is given, not the active one (the matrix passes each backend's)
    status, note = distributed.status("init_process_group", target)
    assert status is Status.UNSUPPORTED and "'bare' declares no torch.distributed engine" in note


def test_the_matrix_uses_the_routers_snapshot_for_the_active_backend(on_cpu):
    active = router.active()
    assert matrix.view(active.name) is active
    assert matrix.status_for("torch.distributed.init_process_group", active.name) == distributed.status(
        "init_process_group")


def test_the_old_backend_attribute_still_answers_with_a_deprecation_warning() -> None:
    target = router.active()
    with pytest.warns(DeprecationWarning, match="Target.name"):
        assert target.backend == target.name
