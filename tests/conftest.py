"""Fixtures shared by the core tests.

Tests that change the router's global state (registered plugins, ``use()``,
``TORCHDEVICE_*`` variables, recorded problems) take :func:`router_state`,
which starts them from a clean, automatic selection and puts everything back
afterwards. Tests of the CPU semantics take :func:`on_cpu`.
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import spawning
import torch
from helpers import CPU_FIRST, FakeClock, unset_env, with_cpu_first

import torchdevice
from torchdevice import host, plugins, router

os.environ.update(CPU_FIRST)  # the suite expects automatic selection to pick cpu (see helpers.CPU_FIRST)

ENV_VARS = ("TORCHDEVICE_BACKEND", "TORCHDEVICE_PRIORITY", "TORCHDEVICE_PLUGINS", "TORCHDEVICE_DISABLE_PLUGINS",
            "TORCHDEVICE_SOURCE", "TORCHDEVICE_DEVICE_COUNT")


class RouterState:
    """Handle given to tests by :func:`router_state`: registers plugins and removes them afterwards."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.registered: list[str] = []

    def register(self, plugin, name: str | None = None) -> str:
        name = plugins.register(plugin, name=name or getattr(plugin, "name", None))
        self.registered.append(name)
        return name

    def unregister(self, name: str) -> None:
        plugins.unregister(name)
        self.registered.remove(name)

    def setenv(self, var: str, value: str) -> None:
        """Set a variable the router reads at resolution, and drop the cached resolution. A
        ``TORCHDEVICE_PRIORITY`` keeps the suite's pin (helpers.CPU_FIRST) before the test's entries."""
        if var == "TORCHDEVICE_PRIORITY":
            value = with_cpu_first(value)
        self.monkeypatch.setenv(var, value)
        router.invalidate()

    def delenv(self, var: str) -> None:
        self.monkeypatch.delenv(var, raising=False)
        router.invalidate()


@pytest.fixture
def router_state(monkeypatch):
    unset_env(monkeypatch, *ENV_VARS)
    for var, value in CPU_FIRST.items():
        monkeypatch.setenv(var, value)
    torchdevice.use(None)
    router.invalidate()
    problems_before = list(plugins.problems)
    state = RouterState(monkeypatch)
    try:
        yield state
    finally:
        for name in reversed(state.registered):
            if plugins.pm.has_plugin(name):
                plugins.unregister(name)
        plugins.problems[:] = problems_before
        router.use(None)
        router.invalidate()


@pytest.fixture
def on_cpu(router_state):
    """The built-in CPU backend, asked for by name (so the tests hold on any machine)."""
    torchdevice.use("cpu")
    yield router_state


@pytest.fixture
def restore_rng():
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    """Empty hwmon, thermal and powercap roots under tmp_path, in place of /sys/class's, on a Linux host."""
    roots = {name: tmp_path / name for name in ("hwmon", "thermal", "powercap")}
    for path in roots.values():
        path.mkdir()
    monkeypatch.setattr(host, "HWMON", str(roots["hwmon"]))
    monkeypatch.setattr(host, "THERMAL", str(roots["thermal"]))
    monkeypatch.setattr(host, "POWERCAP", str(roots["powercap"]))
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="linux"))
    return roots


@pytest.fixture
def clock(monkeypatch):
    """A :class:`helpers.FakeClock` in place of :mod:`torchdevice.host`'s ``time``."""
    fake = FakeClock()
    monkeypatch.setattr(host, "time", fake)
    return fake


# -- which tests start processes (tox -e fast deselects them) -------------------------------------------


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "subprocess: the test starts a process (marked automatically from its code, tests/spawning.py); "
                   "tox -e fast deselects these")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks given here
def pytest_collection_modifyitems(config, items):
    finder = spawning.Finder()
    for item in items:
        why = finder.why_item(item)
        if why is not None and item.get_closest_marker("subprocess") is None:
            item.add_marker(pytest.mark.subprocess(reason=" -> ".join(why)))


def pytest_collection_finish(session):
    # `-m "not subprocess"` (tox -e fast): the tests left must stay in-process (spawning.ProcessWatch)
    if "subprocess" in (session.config.getoption("markexpr") or ""):
        spawning.WATCH.arm(item.nodeid for item in session.items if item.get_closest_marker("subprocess") is None)

