"""Every warning torchdevice raises in translated code points at the program's line, as torch's
own warnings do on CUDA (a warning located in torchdevice's files tells the user nothing)."""
from __future__ import annotations

import ast
import sys
import warnings
from pathlib import Path

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
        (lambda: torch.cuda.comm.gather([torch.ones(2, device="cuda")], destination=-1), "Using -1"),
    ]


def _autocasts():
    # autocast regions with a dtype the CPU target's autocast cannot honour: CUDA would cast to float64,
    # the target cannot, so the region runs disabled and says so (where the program opened it)
    return [
        lambda: torch.autocast("cuda", dtype=torch.float64),
        lambda: torch.autocast(device_type="cuda", dtype=torch.float64, cache_enabled=False),
        lambda: torch.amp.autocast("cuda", dtype=torch.float64),
        lambda: torch.cuda.amp.autocast(dtype=torch.float64),
    ]


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


@pytest.mark.parametrize("index", range(len(_autocasts())))
def test_an_autocast_dtype_the_target_refuses_warns_at_the_programs_line(translated, target, index):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _autocasts()[index]():
            out = torch.ones(2, 2, device="cuda") @ torch.ones(2, 2, device="cuda")
            assert not torch.is_autocast_enabled(target.device_type)  # really off: not silently in lower precision
    assert out.dtype is torch.float32
    ours = [w for w in caught if "torch.float64" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "runs disabled" in str(ours[0].message) and f"'{target.name}'" in str(ours[0].message)
    for w in caught:  # the deprecation warning of torch.cuda.amp.autocast too
        assert w.filename == __file__, (w.filename, w.lineno, str(w.message))


def _cpu_autocast_float64_warnings() -> list[tuple[str, str, str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("cpu", dtype=torch.float64):
            pass
    return [(w.category.__name__, str(w.message), w.filename) for w in caught]


def test_torchs_own_autocast_warning_is_located_as_natively(on_cpu):
    """An untranslated device type: torch's own warning, with the same text and place as natively
    (torchdevice's autocast wrapper must not become the frame it points at)."""
    native = _cpu_autocast_float64_warnings()
    translate.patch()
    try:
        translated = _cpu_autocast_float64_warnings()
    finally:
        translate.unpatch()
    assert native and native[0][2] == __file__, native
    assert translated == native


def test_a_backend_without_autocast_warns_at_the_programs_line(on_cpu, monkeypatch):
    real = torch._C._is_autocast_available
    monkeypatch.setattr(torch._C, "_is_autocast_available", lambda dt: dt != "cpu" and real(dt))
    translate.patch()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast("cuda"):
                pass
    finally:
        translate.unpatch()
    ours = [w for w in caught if "has no autocast" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert ours[0].filename == __file__


# Warnings about the environment (a bad TORCHDEVICE_* value, a plugin name no plugin provides) are
# raised while translation is set up, not at any line of the program: they name the variable and are
# located at "<torchdevice...>". A deprecation is located at the plugin's line that uses the old name
# (stacklevel=2), which is a plugin author's line, not the program's; so is the deprecated import path
# torchdevice.comm's and torchdevice.translate.SOURCE_TYPES' (at the importing line). Every other warning goes through trace.warn.
_CONFIGURATION_WARNINGS = {("amp.py", "_implicit_dtype"), ("plugins.py", "timeout"),
                           ("plugins.py", "_warn_unknown"), ("autoload.py", "_warn"), ("router.py", "backend"),
                           ("comm.py", "__getattr__"), ("translate.py", "__getattr__")}


def _direct_warning_calls() -> set[tuple[str, str]]:
    """(file name, innermost function) of every ``warnings.warn``/``warn_explicit`` call in the package."""
    found = set()

    def visit(node: ast.AST, path: Path, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("warn", "warn_explicit")
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "warnings"):
            found.add((path.name, function))
        for child in ast.iter_child_nodes(node):
            visit(child, path, function)

    for path in Path(torchdevice.__file__).parent.rglob("*.py"):
        visit(ast.parse(path.read_text(encoding="utf-8")), path, "<module>")
    return found


def test_every_warning_goes_through_trace_warn_or_is_about_the_environment():
    direct = _direct_warning_calls()
    assert ("trace.py", "warn") in direct  # the check sees warnings.warn_explicit calls
    assert direct - {("trace.py", "warn")} <= _CONFIGURATION_WARNINGS, (
        "a warnings.warn that is not located at the program's line: use torchdevice.trace.warn")


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
