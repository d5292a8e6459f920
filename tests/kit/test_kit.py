"""The vendor kit (torchdevice.testing), the shared torch-namespace base, and docs/plugins.md.

The plugins' own tests use the kit on real plugins; these tests check that the
kit itself catches what it claims to catch, on deliberately broken plugins.
"""
from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice import plugins
from torchdevice.backend import MemoryOps, Status, status_of, unsupported
from torchdevice.cpu import CPUBackend
from torchdevice.errors import UnsupportedError
from torchdevice.hookspecs import hookimpl
from torchdevice.testing import (
    Call,
    StandIn,
    check_backend,
    hook_reference_is_current,
    registered,
    run_check,
)
from torchdevice.torch_backend import NamespaceView, TorchMemory, TorchNamespaceBackend, bind_ops, calls

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


# -- docs --------------------------------------------------------------------------------------


def test_hook_reference_in_docs_is_current():
    assert hook_reference_is_current(str(DOCS)), (
        "docs/plugins.md is stale: run python -m torchdevice.testing --write-docs docs/plugins.md")


def test_hook_reference_goes_stale_when_a_docstring_changes(tmp_path, monkeypatch):
    copy = tmp_path / "plugins.md"
    copy.write_text(DOCS.read_text())
    from torchdevice import hookspecs

    monkeypatch.setattr(hookspecs.torchdevice_rng, "__doc__", "Changed.")
    assert not hook_reference_is_current(str(copy))


# -- the stand-in ------------------------------------------------------------------------------


def test_standin_records_and_returns_typed_values():
    standin = StandIn("cuda", returns={"memory_allocated": 42, "initial_seed": lambda: 7,
                                       "synchronize": RuntimeError("boom")})
    assert standin.memory_allocated(1) == 42 and standin.initial_seed() == 7
    assert standin.max_memory_allocated(device=0) == 2_000
    assert isinstance(standin.get_rng_state(0), torch.Tensor)
    with pytest.raises(RuntimeError, match="boom"):
        standin.synchronize()
    assert standin.calls == [Call("memory_allocated", (1,)), Call("initial_seed"),
                             Call("max_memory_allocated", (), {"device": 0}), Call("get_rng_state", (0,)),
                             Call("synchronize")]
    assert standin.calls_to("initial_seed") == [Call("initial_seed")]
    standin.reset()
    assert standin.calls == []


def test_standin_mirrors_the_real_namespace():
    mps = StandIn("mps")
    assert not hasattr(mps, "current_device") and not hasattr(mps, "Stream") and hasattr(mps, "Event")
    assert hasattr(StandIn("mps", mirror=False), "current_device")
    assert not hasattr(StandIn("cuda", missing=("mem_get_info",)), "mem_get_info")
    assert hasattr(StandIn("mps", returns={"current_device": 0}), "current_device")


def test_standin_classes_record_too():
    standin = StandIn("cuda")
    stream = standin.Stream(1, priority=-1)
    stream.query()
    with standin.device(1):
        pass
    assert [c.name for c in standin.calls] == ["Stream", "Stream.query", "device", "device.__enter__",
                                               "device.__exit__"]


# -- the shared base -----------------------------------------------------------------------------


def test_view_is_a_snapshot():
    module = types.SimpleNamespace(memory_allocated=lambda i: 1)
    view = NamespaceView(module, ("memory_allocated", "memory_reserved"), "torch.fake")
    module.memory_allocated = lambda i: 2  # e.g. a later translation patch
    assert view.memory_allocated(0) == 1 and not view.has("memory_reserved")
    with pytest.raises(AttributeError, match="torch.fake has no attribute 'memory_reserved'"):
        view.memory_reserved  # noqa: B018 -- the attribute access is what raises


def test_missing_namespace_functions_become_unsupported():
    view = NamespaceView(StandIn("cuda", missing=("memory_reserved",)), label="torch.cuda")
    ops = bind_ops(TorchMemory, view)("fake", view)
    assert status_of(ops, "memory_reserved")[0] is Status.UNSUPPORTED
    with pytest.raises(UnsupportedError, match="torch.cuda has no memory_reserved"):
        ops.memory_reserved(0)
    assert status_of(ops, "memory_allocated") == (Status.NATIVE, "torch.cuda.memory_allocated")


def test_calls_tags_translated_when_the_name_or_arguments_differ():
    class Memory(TorchMemory):
        memory_allocated = calls("current_allocated_memory", int)
        memory_reserved = calls("memory_reserved", int, device_arg=False)

    view = NamespaceView(StandIn("cuda", returns={"current_allocated_memory": 5}, mirror=False), label="torch.x")
    ops = bind_ops(Memory, view)("fake", view)
    assert ops.memory_allocated(1) == 5 and view.module.calls[-1] == Call("current_allocated_memory", (1,))
    ops.memory_reserved(1)
    assert view.module.calls[-1] == Call("memory_reserved", ())
    assert status_of(ops, "memory_allocated")[0] is Status.TRANSLATED
    assert status_of(ops, "memory_reserved")[0] is Status.TRANSLATED


# -- the conformance suite catches broken plugins ---------------------------------------------------


class _Fake(CPUBackend):
    name = "kitfake"
    priority = -50
    description = "a fake for the kit's tests"


def test_a_good_plugin_passes_every_check():
    report = check_backend(_Fake())
    assert report.ok and {r.name for r in report.results if r.ok} == {
        "spec", "hookimpls", "availability", "families", "tags", "unsupported", "router", "behaviour"}


def test_raising_availability_is_caught():
    class Broken(_Fake):
        def availability(self):
            raise OSError("no driver")

    result = run_check(Broken(), "availability")
    assert result.ok is False and "no driver" in result.detail
    with pytest.raises(AssertionError, match="availability raised OSError"):
        check_backend(Broken())


def test_untagged_operation_is_caught():
    class Memory(MemoryOps):
        def memory_allocated(self, index):
            return 0

    class Untagged(_Fake):
        def memory(self):
            return Memory(self.name)

    result = run_check(Untagged(), "tags")
    assert result.ok is False and "memory.memory_allocated" in result.detail


def test_unsupported_that_returns_is_caught():
    def quietly(self, *args):
        return 0

    quietly.__torchdevice_status__ = unsupported("memory_allocated").__torchdevice_status__

    class Memory(MemoryOps):
        memory_allocated = quietly

    class Liar(_Fake):
        def memory(self):
            return Memory(self.name)

    result = run_check(Liar(), "unsupported")
    assert result.ok is False and "returned" in result.detail


def test_misspelled_hook_is_caught():
    class Typo:
        @hookimpl
        def torchdevice_backend(self):  # missing the "s"
            return []

    result = run_check(Typo(), "hookimpls")
    assert result.ok is False


def test_bad_declaration_is_caught():
    class BadName(_Fake):
        name = "kit,fake"

    assert run_check(BadName(), "spec").ok is False


def test_unavailable_plugin_is_refused_by_the_router():
    class Absent(_Fake):
        def availability(self):
            return torchdevice.Availability(False, "kitfake hardware not present")

    report = check_backend(Absent())
    router_result = next(r for r in report.results if r.name == "router")
    assert router_result.ok and "kitfake hardware not present" in router_result.detail
    assert next(r for r in report.results if r.name == "families").ok is None  # skipped


def test_registered_displaces_and_restores_an_installed_plugin():
    installed = [name for name, p in plugins.pm.list_name_plugin() if getattr(p, "name", None) == "cuda"]
    if not installed:
        pytest.skip("torchdevice-cuda is not installed")

    class StandInCuda(TorchNamespaceBackend):
        name, device_type, namespace, label, priority = "cuda", "cuda", "cuda", "CUDA", 100

    substitute = StandInCuda(StandIn("cuda"))
    with registered(substitute):
        assert torchdevice.current_backend() == "cuda"  # the stand-in is "available"
        assert not plugins.pm.has_plugin(installed[0]) or plugins.pm.get_plugin(installed[0]) is substitute
    assert plugins.pm.has_plugin(installed[0]) and plugins.pm.get_plugin(installed[0]) is not substitute
    assert torchdevice.current_backend() != "cuda"


def test_docs_say_what_cpumemory_counts():
    # CPUMemory.memory_allocated is c10's count of live CPU tensor bytes (its own tag says so); the
    # plugin docs once called it the resident set size, which is only its memory_reserved
    from torchdevice.cpu import CPUMemory, allocation_source

    assert "c10" in status_of(CPUMemory("kitfake"), "memory_allocated")[1]
    tutorial = (DOCS.parent / "tutorial.md").read_text()
    for text in (DOCS.read_text(), tutorial):
        assert "c10's own" in text and "resident set size (`CPUMemory`" not in text
    assert allocation_source() in {"c10", "mallinfo2", "malloc_zone_statistics", "VmRSS", "none"}
