"""Every warning torchdevice raises in translated code points at the program's line, as torch's
own warnings do on CUDA (a warning located in torchdevice's files tells the user nothing)."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

import torchdevice
from torchdevice import translate


def _calls():
    # (what the program does, the warning torch gives on CUDA for it, if any)
    return [
        (lambda: torch.cuda.amp.GradScaler(), "GradScaler"),
        (lambda: torch.cuda.amp.autocast(), "autocast"),
        (lambda: torch.cuda.memory_cached(), "memory_cached"),
        (lambda: torch.cuda.max_memory_cached(), "max_memory_cached"),
        (lambda: torch.cuda.reset_max_memory_allocated(), "reset_peak_memory_stats"),
    ]


@pytest.fixture
def translated(on_cpu):
    translate.patch()
    yield
    translate.unpatch()


@pytest.mark.parametrize("index", range(len(_calls())))
def test_deprecation_warnings_point_at_the_programs_line(translated, index):
    call, expected = _calls()[index]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    assert caught, f"no warning for {expected}: CUDA gives one"
    assert any(expected in str(w.message) for w in caught)
    for w in caught:
        assert w.filename == __file__, (w.filename, w.lineno, str(w.message))


def test_autocast_with_float32_is_silent_as_on_cuda(translated):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("cuda", dtype=torch.float32):
            out = torch.ones(2, 2, device="cuda") @ torch.ones(2, 2, device="cuda")
    assert out.dtype is torch.float32
    assert [str(w.message) for w in caught] == []


def test_a_failing_integration_warns_at_the_import_site(on_cpu, tmp_path, monkeypatch):
    """An integration that raises warns where the program imported the framework, not in torchdevice."""
    from torchdevice import integrations

    class Broken(integrations.Integration):
        name, framework, modules = "broken-probe", "a probe", ("td_probe_framework",)

        def install(self, patcher, target, module):
            raise RuntimeError("probe")

    class Plugin:
        @torchdevice.hookimpl
        def torchdevice_integrations(self):
            return [Broken()]

    from torchdevice import plugins

    plugins.register(Plugin(), name="broken-probe-plugin")
    (tmp_path / "td_probe_framework.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    translate.patch()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import td_probe_framework  # noqa: F401
        messages = [w for w in caught if "broken-probe" in str(w.message)]
        assert messages, [str(w.message) for w in caught]
        assert all(w.filename == __file__ for w in messages), [(w.filename, w.lineno) for w in messages]
    finally:
        translate.unpatch()
        plugins.unregister("broken-probe-plugin")
        sys.modules.pop("td_probe_framework", None)
