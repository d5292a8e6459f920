"""torchdevice.plugins' loader API (load_entry_point, record, deadline, core_info): what the plugin loader
and the integration loader (torchdevice.integrations) both load entry points through."""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest

import torchdevice
from torchdevice import hookimpl, plugins


class Dist:
    name = "vendor-dist"
    version = "3.1"


class EntryPoint:
    """An entry point as importlib.metadata gives one: ``name``, ``dist``, ``load()``."""

    dist = Dist()

    def __init__(self, name: str, load: Callable[[], Any]) -> None:
        self.name = name
        self.load = load


class Integrating:
    @hookimpl
    def torchdevice_integrations(self) -> list[Any]:
        return []


class Misspelled:
    @hookimpl
    def torchdevice_integration(self) -> list[Any]:  # no such hook
        return []


@pytest.fixture
def loader(router_state, monkeypatch):
    """Plugin info and registrations made by the test are forgotten afterwards."""
    monkeypatch.setattr(plugins, "plugin_info", dict(plugins.plugin_info))
    yield router_state


def _problems(name: str) -> list[plugins.Problem]:
    return [p for p in plugins.problems if p.plugin == name]


def test_a_good_entry_point_is_registered_under_its_name_with_its_distribution(loader):
    plugin = Integrating()
    assert plugins.load_entry_point(EntryPoint("good_one", lambda: plugin)) is True
    loader.registered.append("good_one")
    assert plugins.pm.get_plugin("good_one") is plugin
    assert plugins.plugin_info["good_one"] == plugins.PluginInfo("good_one", "vendor-dist", "3.1")
    assert not _problems("good_one")


def _boom() -> Any:
    raise RuntimeError("boom at import")


@pytest.mark.parametrize("load, stage, error", [
    (_boom, "import", "RuntimeError: boom at import"),
    (Misspelled, "validate", "PluginValidationError"),
], ids=["import", "validate"])
def test_a_failing_entry_point_is_reported_not_raised(loader, load, stage, error):
    assert plugins.load_entry_point(EntryPoint("bad_one", load)) is False
    assert not plugins.pm.has_plugin("bad_one")
    (problem,) = _problems("bad_one")
    assert problem.stage == stage and problem.error.startswith(error) and "Traceback" in problem.detail
    assert plugins.plugin_info["bad_one"] == plugins.PluginInfo("bad_one", "vendor-dist", "3.1")  # listed, failed


def test_a_hanging_import_is_interrupted_and_named_by_its_kind(loader, monkeypatch):
    monkeypatch.setenv(plugins.ENV_TIMEOUT, "0.2")
    started = time.monotonic()
    assert plugins.load_entry_point(EntryPoint("slow_one", lambda: time.sleep(30)), kind="integration plugin") is False
    assert time.monotonic() - started < 10
    (problem,) = _problems("slow_one")
    assert problem.stage == "import"
    assert problem.error == ("PluginTimeout: importing integration plugin 'slow_one' took longer than 0.2 s "
                             "(TORCHDEVICE_PLUGIN_TIMEOUT); interrupted")


def test_deadline_bounds_a_block_and_leaves_no_timer_behind(monkeypatch):
    import signal

    monkeypatch.setenv(plugins.ENV_TIMEOUT, "0.2")
    with pytest.raises(plugins.PluginTimeout, match="asking 'x' took longer than 0.2 s"):
        with plugins.deadline("asking 'x'"):
            time.sleep(30)
    with plugins.deadline("a quick step"):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_record_keeps_one_problem_per_failure(loader):
    try:
        raise ValueError("bad value 7")
    except ValueError as exc:
        first = plugins.record("recorded", "torchdevice_backends", exc)
        again = plugins.record("recorded", "torchdevice_backends", exc)
    assert first is again and _problems("recorded") == [first]
    assert (first.stage, first.error) == ("torchdevice_backends", "ValueError: bad value 7")
    assert "bad value 7" in first.detail and "Traceback" in first.detail


def test_core_info_is_torchdevices_own_distribution_and_version():
    assert plugins.core_info("x") == plugins.PluginInfo("x", "torchdevice", torchdevice.__version__)


def test_no_module_reaches_for_the_loaders_private_names():
    """The integration loader (and the router, the CLI ...) use the public API only."""
    import ast
    from pathlib import Path

    package = Path(plugins.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "plugins.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "plugins"
                    and node.attr.startswith("_")):
                found.append(f"{path.relative_to(package)}: plugins.{node.attr}")
    assert not found, found
