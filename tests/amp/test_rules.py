"""Autocast rules written for CUDA apply on the target (torchdevice.amp_rules): a library's op with a
rule for ``AutocastCUDA`` casts its inputs as on the GPU inside ``torch.autocast("cuda")``, whether the rule
was registered before translation or after it, from Python or (unreadable) from C++; unpatch removes them.

Each op refuses a dtype mix, as torchvision's roi_align does; the expectation is what the rule says it
casts to, computed natively by the op on float32 inputs."""
from __future__ import annotations

import itertools
import sys

import pytest
import torch

import torchdevice
from torchdevice import translate

_names = itertools.count()


def _strict(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype != b.dtype:
        raise RuntimeError(f"Expected tensor for a to have the same type as tensor for b: {a.dtype} {b.dtype}")
    return a * b


@pytest.fixture
def library():
    """A fresh namespace (dispatcher registrations cannot be dropped one by one), destroyed after the test."""
    namespace = f"tdamprules{next(_names)}"
    lib = torch.library.Library(namespace, "FRAGMENT")
    yield namespace, lib
    lib._destroy()


def _op(namespace: str, lib: torch.library.Library, name: str) -> torch._ops.OpOverloadPacket:
    lib.define(f"{name}(Tensor a, Tensor b) -> Tensor")
    lib.impl(name, _strict, "CompositeExplicitAutograd")
    return getattr(getattr(torch.ops, namespace), name)


def _half_and_full():
    """An fp16 activation (as autocast's matmul makes it) and an fp32 argument, on the translated device."""
    a = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)).cuda()
    return a, torch.randn(4, generator=torch.Generator().manual_seed(1)).cuda()


def _assert_the_fp32_convention(op) -> None:
    """Under ``torch.autocast("cuda", float16)``, translated: ``op`` on an fp16 activation and an fp32 argument
    runs in float32 and returns float16 (the mirrored kernel of a rule that cannot be read, torchvision's)."""
    a, b = _half_and_full()
    with torch.autocast("cuda", dtype=torch.float16):
        half = a @ a
        out = op(half, b)
    assert out.dtype == torch.float16
    assert torch.equal(out.cpu(), _strict(half.float(), b).half().cpu())


def test_a_rule_registered_before_translation_casts_on_the_target(on_target, library):
    namespace, lib = library
    op = _op(namespace, lib, "before")
    torch.library.register_autocast(f"{namespace}::before", "cuda", torch.float32)
    with torchdevice.patched():
        a, b = _half_and_full()
        with torch.autocast("cuda", dtype=torch.float16):
            half = a @ a
            out = op(half, b)
        assert half.dtype == torch.float16 and out.dtype == torch.float32
        assert torch.equal(out.cpu(), _strict(half.float(), b).cpu())
    with pytest.raises(RuntimeError, match="same type"), torch.autocast(a.device.type, dtype=torch.float16):
        op(half, b)  # translation off: no rule for the target's own autocast, as before


def test_a_custom_op_rule_registered_while_translating_casts_on_the_target(on_target):
    with torchdevice.patched():
        name = f"tdamprules{next(_names)}::after"

        @torch.library.custom_op(name, mutates_args=())
        def after(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return _strict(a, b)

        after.register_autocast("cuda", torch.float32)
        a, b = _half_and_full()
        with torch.autocast("cuda", dtype=torch.float16):
            out = after(a @ a, b)
        assert out.dtype == torch.float32


def test_an_unreadable_rule_runs_in_float32_and_returns_the_inputs_dtype(on_target, library):
    """A kernel registered straight for AutocastCUDA (as a C++ library's): torchvision's convention."""
    namespace, lib = library
    op = _op(namespace, lib, "cxx")
    lib.impl("cxx", lambda a, b: None, "AutocastCUDA")  # never runs: no CUDA tensor reaches it
    with torchdevice.patched():
        _assert_the_fp32_convention(op)


def test_unpatch_removes_the_mirrored_kernels(on_target, library):
    namespace, lib = library
    _op(namespace, lib, "gone")
    torch.library.register_autocast(f"{namespace}::gone", "cuda", torch.float32)
    key = "Autocast" + torch._C._dispatch_key_for_device(on_target_device())
    with torchdevice.patched():
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::gone", key)
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::gone", key)
    assert translate.installers()  # (still importable after)


def on_target_device() -> str:
    with torchdevice.patched() as active:
        return active.device_type


def test_a_rule_is_mirrored_onto_a_key_pythons_enum_does_not_name(router_state, library):
    """stand-in, not hardware-verified: MTIA as the target (its plugin over a recorded stand-in). Its autocast
    key, ``AutocastMTIA``, exists in torch 2.13's dispatcher but not in ``torch._C.DispatchKey``."""
    torchdevice_mtia = pytest.importorskip("torchdevice_mtia")
    from torchdevice.testing import StandIn, registered

    namespace, lib = library
    _op(namespace, lib, "mtiarule")
    torch.library.register_autocast(f"{namespace}::mtiarule", "cuda", torch.float32)
    backend = torchdevice_mtia.MTIABackend(StandIn("mtia"))
    with registered(backend), torchdevice.use(backend.name), torchdevice.patched():
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::mtiarule", "AutocastMTIA")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::mtiarule", "AutocastMTIA")


def test_a_rule_of_a_library_imported_while_translating_casts_on_the_target(on_target, library, tmp_path,
                                                                            monkeypatch):
    """A library imported by the program after translation started, registering a kernel for AutocastCUDA as
    it loads (torchvision's C++ kernels, under ``torchdevice run``): the next ``torch.autocast("cuda")``
    mirrors it."""
    namespace, _ = library
    (tmp_path / "tdamprules_lib.py").write_text(
        "import torch\n"
        f"lib = torch.library.Library({namespace!r}, 'FRAGMENT')\n"
        "lib.define('late(Tensor a, Tensor b) -> Tensor')\n"
        "lib.impl('late', lambda a, b: None, 'AutocastCUDA')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tdamprules_lib", raising=False)
    with torchdevice.patched():
        import tdamprules_lib

        try:
            tdamprules_lib.lib.impl("late", _strict, "CompositeExplicitAutograd")
            _assert_the_fp32_convention(getattr(torch.ops, namespace).late)
        finally:
            tdamprules_lib.lib._destroy()


def test_a_kernel_registered_for_autocast_cuda_while_translating_casts_on_the_target(on_target, library,
                                                                                    monkeypatch):
    """``Library.impl(..., "AutocastCUDA")`` called by the program after translation started: mirrored as it is
    registered, not left to the next scan (which runs only once a module was imported since: off here)."""
    from torchdevice import amp_rules

    monkeypatch.setattr(amp_rules, "refresh", lambda: None)
    namespace, lib = library
    with torchdevice.patched():
        op = _op(namespace, lib, "direct")
        lib.impl("direct", lambda a, b: None, "AutocastCUDA")  # never runs: no CUDA tensor reaches it
        _assert_the_fp32_convention(op)
