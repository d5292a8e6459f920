"""The framework integration point: the ``torchdevice_integrations`` hook, the post-import
activation, exact removal by ``unpatch()``, failures reported, ``info``. A fake framework (a module
written to a temporary directory) stands in for Lightning & co.; the real frameworks are tested in
tests/frameworks/."""
from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings

import pytest

import torchdevice
from torchdevice import integrations, plugins


class FakeIntegration(integrations.Integration):
    name = "fakefw"
    framework = "a fake framework"

    def __init__(self, modules=("tdfake_fw.core",), fail=False):
        self.modules = modules
        self.fail = fail
        self.calls: list[tuple[str, str]] = []

    def install(self, patcher, target, module):
        self.calls.append((module.__name__, target.name))
        if self.fail:
            raise RuntimeError("integration broke")
        patcher.set(module.Device, "check", lambda self, device: "adapted")


class FakePlugin:
    def __init__(self, *items):
        self.items = list(items)

    @torchdevice.hookimpl
    def torchdevice_integrations(self):
        return self.items


@pytest.fixture
def fakefw(tmp_path, monkeypatch, on_target):
    pkg = tmp_path / "tdfake_fw"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(
        "class Device:\n"
        "    def check(self, device):\n"
        "        return 'native'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("tdfake_fw", "tdfake_fw.core"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    torchdevice.unpatch()
    yield on_target
    torchdevice.unpatch()
    for name in ("tdfake_fw", "tdfake_fw.core"):
        sys.modules.pop(name, None)
    integrations._states.pop("fakefw", None)


def test_hookspec_is_declared():
    assert hasattr(plugins.pm.hook, "torchdevice_integrations")


def test_activation_on_import_and_exact_removal(fakefw, target):
    fake = FakeIntegration()
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    torchdevice.patch()
    assert "tdfake_fw.core" not in sys.modules  # nothing imported for an integration
    assert fake.calls == []
    import tdfake_fw.core as core

    original = core.Device.__dict__["check"]
    assert fake.calls == [("tdfake_fw.core", target.name)]
    assert core.Device().check("cuda") == "adapted"
    assert integrations.is_active("fakefw")
    assert type(core.__loader__).__name__ != "_ThenLoader" and core.__spec__.loader is core.__loader__
    torchdevice.unpatch()
    assert core.Device.__dict__["check"] is not original  # the patch was on the class itself
    assert core.Device().check("cuda") == "native"
    assert not any(isinstance(f, integrations._Watcher) for f in sys.meta_path)
    assert not integrations.is_active("fakefw")


def test_unpatch_restores_identity(fakefw, target):
    import tdfake_fw.core as core

    original = core.Device.__dict__["check"]
    fake = FakeIntegration()
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    torchdevice.patch()  # already imported: adapted at once
    assert fake.calls == [("tdfake_fw.core", target.name)]
    assert core.Device().check("cuda") == "adapted"
    torchdevice.unpatch()
    assert core.Device.__dict__["check"] is original


def test_not_active_without_translation(fakefw):
    fake = FakeIntegration()
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    import tdfake_fw.core as core

    assert fake.calls == [] and core.Device().check("cuda") == "native"
    assert dict((n, st) for n, _, _, st in integrations.states())["fakefw"] == "inactive (translation is off)"


@pytest.mark.parametrize("fails", [False, True])
def test_a_module_still_importing_when_translation_turns_on_is_adapted_when_its_import_ends(fakefw, tmp_path, fails, target):
    """Zero-code translation turns on inside `import torch`, which may be the first line of a watched
    module (`from accelerate import Accelerator` first): the module is in sys.modules, half made. It
    is adapted once its import has finished, not then (its classes did not exist yet); an import
    that fails is never adapted."""
    (tmp_path / "tdfake_fw" / "core.py").write_text(
        "import torchdevice\n"
        "torchdevice.patch()  # as TORCHDEVICE_BACKEND=cpu does at the `import torch` opening a framework module\n"
        "class Device:\n"
        "    def check(self, device):\n"
        "        return 'native'\n"
        + ("raise ImportError('tdfake_fw.core failed')\n" if fails else "")
    )
    fake = FakeIntegration()
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if fails:
            with pytest.raises(ImportError, match="tdfake_fw.core failed"):
                importlib.import_module("tdfake_fw.core")
            assert fake.calls == [] and not integrations.is_active("fakefw")
            return
        import tdfake_fw.core as core
    assert not any("integration" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert fake.calls == [("tdfake_fw.core", target.name)] and core.Device().check("cuda") == "adapted"
    assert integrations.is_active("fakefw") and type(core.__spec__) is importlib.machinery.ModuleSpec
    torchdevice.unpatch()
    assert core.Device().check("cuda") == "native"


def test_a_failing_integration_is_reported_and_never_breaks_the_import(fakefw):
    fake = FakeIntegration(fail=True)
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    torchdevice.patch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tdfake_fw.core as core
    assert core.Device().check("cuda") == "native"
    assert any("integration 'fakefw' failed" in str(w.message) for w in caught)
    assert any(p.plugin == "fakefw-plugin" and "integration broke" in p.error for p in plugins.problems)
    status = dict((n, st) for n, _, _, st in integrations.states())["fakefw"]
    assert status.startswith("failed: RuntimeError: integration broke")


def test_disabled_by_environment(fakefw, monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_DISABLE_INTEGRATIONS", "fakefw")
    fake = FakeIntegration()
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    torchdevice.patch()
    import tdfake_fw.core as core

    assert fake.calls == [] and core.Device().check("cuda") == "native"
    assert dict((n, st) for n, _, _, st in integrations.states())["fakefw"].startswith("disabled")


def test_a_plugin_returning_new_objects_keeps_its_state(fakefw):
    """A hook building its integrations on every call: the one installed stays the one known."""
    made = []

    class Fresh:
        @torchdevice.hookimpl
        def torchdevice_integrations(self):
            made.append(FakeIntegration())
            return [made[-1]]

    fakefw.register(Fresh(), name="fresh-plugin")
    torchdevice.patch()
    import tdfake_fw.core as core

    assert core.Device().check("cuda") == "adapted"
    assert integrations.is_active("fakefw")
    assert dict((n, st) for n, _, _, st in integrations.states())["fakefw"] == "active: tdfake_fw.core"
    assert len(made) >= 2 and integrations._states["fakefw"].integration is made[0]  # asked again, kept the first
    torchdevice.unpatch()
    assert core.Device().check("cuda") == "native"


def test_all_disabled_by_environment(fakefw, monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_DISABLE_INTEGRATIONS", " ALL ")
    fake = FakeIntegration()
    fakefw.register(FakePlugin(fake), name="fakefw-plugin")
    torchdevice.patch()
    import tdfake_fw.core as core

    assert fake.calls == [] and core.Device().check("cuda") == "native"
    statuses = {n: st for n, _, _, st in integrations.states()}
    assert {"fakefw", "lightning", "accelerate", "transformers"} <= set(statuses)
    assert all(st.startswith("disabled") for st in statuses.values()), statuses
    assert not any(isinstance(f, integrations._Watcher) for f in sys.meta_path)  # nothing to watch


def test_invalid_and_duplicate_integrations_are_problems(fakefw):
    class Nameless:
        modules = ("x",)

        def install(self, patcher, target, module):
            pass

    fakefw.register(FakePlugin(Nameless()), name="nameless-plugin")
    fakefw.register(FakePlugin(FakeIntegration(), FakeIntegration()), name="fakefw-plugin")
    clash = type("Clash", (FakeIntegration,), {"name": "lightning"})()
    fakefw.register(FakePlugin(clash), name="clash-plugin")
    integrations.collect()
    errors = [p.error for p in plugins.problems]
    assert any("has no name" in e for e in errors)
    assert any("'fakefw' is already provided by plugin 'fakefw-plugin'" in e for e in errors)
    # a plugin's integration of the same name replaces a built-in one (the built-ins are asked last)
    assert integrations._states["lightning"].plugin == "clash-plugin"
    assert not any("'lightning' is already provided" in e for e in errors)
    fakefw.unregister("clash-plugin")
    integrations.collect()
    assert integrations._states["lightning"].plugin == "integrations"


def test_builtins_come_through_the_hook_and_import_nothing(on_target):
    before = set(sys.modules)
    names = [n for n, plugin, _, _ in integrations.states() if plugin == integrations.PLUGIN_NAME]
    assert names == ["accelerate", "lightning", "transformers"]
    for framework in ("lightning", "accelerate", "transformers", "pytorch_lightning"):
        assert (framework in sys.modules) == (framework in before)

