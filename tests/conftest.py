"""Fixtures shared by the core tests.

Tests that change the router's global state (registered plugins, ``use()``,
``TORCHDEVICE_*`` variables, recorded problems) take :func:`router_state`,
which starts them from a clean, automatic selection and puts everything back
afterwards. Tests of the CPU semantics take :func:`on_cpu`.

The suite's translation tests take :func:`on_target` instead: CUDA code translated onto the suite's
target backend, ``cpu`` unless ``TORCHDEVICE_TEST_TARGET`` names another (``sim`` in ``tox -e sim``,
a device type of its own: indexed tensors, two devices, its own allocator, streams and generators).
Their expectations come from the :func:`target` fixture (:class:`TargetInfo`), read from native
torch, never from torchdevice. With a target other than cpu, only the tests that take
:func:`on_target` run (the rest are deselected: they do not depend on the target and run with the
cpu target), and a test marked ``cpu_only(reason=...)`` is skipped with its reason.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import spawning
import torch
from helpers import CPU_FIRST, FakeClock, unset_env, with_cpu_first

import torchdevice
from torchdevice import host, plugins, router

os.environ.update(CPU_FIRST)  # the suite expects automatic selection to pick cpu (see helpers.CPU_FIRST)

SUITE = Path(__file__).resolve().parent
#: the backend the translation tests translate onto (see the module docstring)
TARGET = os.environ.get("TORCHDEVICE_TEST_TARGET", "cpu")
TARGETS = ("cpu", "sim")
if TARGET not in TARGETS:
    raise pytest.UsageError(f"TORCHDEVICE_TEST_TARGET={TARGET!r}: the suite's targets are {', '.join(TARGETS)}")

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


@dataclass(frozen=True)
class TargetInfo:
    """The translation target as native torch describes it (expected values for :func:`on_target` tests).

    ``device_type``: the type of its tensors; ``count``: its devices; ``indexed``: whether its tensors
    carry a device index (a cpu tensor's device is ``cpu``, a sim tensor's ``sim:0``), which is also
    whether it is an accelerator of its own (``torch.cuda.is_available()`` is then True whatever
    ``report_available`` says, and ``torch.cuda``'s functions forward to its own namespace); ``module``:
    torch's own namespace of the device type (``torch.cpu``, ``torch.sim``); ``engine``: the process-group
    backend that runs its collectives."""

    name: str
    device_type: str
    count: int
    indexed: bool
    module: Any
    engine: str

    def device(self, index: int | None = None) -> torch.device:
        """``torch.device("cuda")`` / ``torch.device("cuda", index)`` read as the target; a tensor made for
        ``cuda`` lands on ``device(0)`` (the current device), one made for ``cuda:1`` on ``device(1)``."""
        if index is None or not self.indexed:
            return torch.device(self.device_type)
        return torch.device(self.device_type, index)

    def default_generators(self) -> tuple:
        """The generators a translated ``torch.cuda.default_generators`` must be: the target's own per
        device (the cpu target has one, torch's default generator)."""
        if self.name == "cpu":
            return (torch.default_generator,)
        return tuple(self.module.default_generators)

    def synchronize(self) -> None:
        if self.name != "cpu":
            for index in range(self.count):
                self.module.synchronize(index)


def _load_target() -> TargetInfo:
    if TARGET == "cpu":
        return TargetInfo("cpu", "cpu", 1, False, torch.cpu, "gloo")
    from torchdevice_sim.backend import SimBackend

    availability = SimBackend().availability()
    if not availability.available:  # asked for by name: a run that translated onto nothing would pass
        pytest.fail(f"TORCHDEVICE_TEST_TARGET=sim, but sim is unavailable here: {availability.reason}")
    import torchdevice_sim
    from torchdevice_sim import distributed

    module = torchdevice_sim.load()
    return TargetInfo("sim", "sim", module.device_count(), True, module, distributed.NAME)


@pytest.fixture(scope="session")
def target() -> TargetInfo:
    """The suite's translation target (``TORCHDEVICE_TEST_TARGET``): what its tensors, devices and
    generators are natively."""
    return _load_target()


@pytest.fixture
def on_target(router_state, target):
    """CUDA code's translation target, asked for by name: the cpu backend, or the one
    ``TORCHDEVICE_TEST_TARGET`` names (every device idle before and after the test, device 0 current)."""
    target.synchronize()
    torchdevice.use(target.name)
    try:
        yield router_state
    finally:
        target.synchronize()
        if target.name != "cpu":
            target.module.set_device(0)


@pytest.fixture
def translated(on_target):
    """CUDA code translated onto the suite's target: ``on_target`` and ``torchdevice.patched()``; yields the
    translation's Target. A module that needs more (test_memory, report/test_sites) defines its own."""
    with torchdevice.patched() as active:
        yield active


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
        "markers", "cpu_only(reason): a translation test whose expectations hold on the cpu target only; "
                   "skipped, with the reason, when TORCHDEVICE_TEST_TARGET names another")
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
    for item in items:
        marker = item.get_closest_marker("cpu_only")
        if marker is not None and not (marker.kwargs.get("reason") or marker.args):
            raise pytest.UsageError(f"{item.nodeid}: cpu_only needs a reason")
    if TARGET != "cpu":
        _only_the_targets_tests(config, items)


def _only_the_targets_tests(config, items) -> None:
    """With a target other than cpu: the tests that translate onto it (they take ``on_target``), those
    marked ``cpu_only`` skipped with their reason; every other core test deselected."""
    kept, deselected = [], []
    for item in items:
        if not item.path.is_relative_to(SUITE):  # the plugins' own tests, collected in the same run
            kept.append(item)
            continue
        if "on_target" not in getattr(item, "fixturenames", ()):
            deselected.append(item)
            continue
        marker = item.get_closest_marker("cpu_only")
        if marker is not None:
            reason = marker.kwargs.get("reason") or marker.args[0]
            item.add_marker(pytest.mark.skip(reason=f"cpu target only: {reason}"))
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_collection_finish(session):
    # `-m "not subprocess"` (tox -e fast): the tests left must stay in-process (spawning.ProcessWatch)
    if "subprocess" in (session.config.getoption("markexpr") or ""):
        spawning.WATCH.arm(item.nodeid for item in session.items if item.get_closest_marker("subprocess") is None)


@pytest.fixture
def inproc(on_cpu, monkeypatch):
    """Run ``torchdevice.cli.main([...])`` in this process, putting back what a program run changes
    (tests of ``torchdevice run`` and ``torchdevice compare``)."""
    import sys

    from helpers import unset_env

    from torchdevice import cli, translate

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    unset_env(monkeypatch, "TORCHDEVICE_BACKEND", "TORCHDEVICE_SOURCE", "TORCHDEVICE_DEVICE_COUNT")  # run exports them
    was = translate.is_patched()
    try:
        yield cli.main
    finally:
        if not was:
            translate.unpatch()


@pytest.fixture
def report():
    """``run --report``'s recording, on for the test: a callable giving ``{api: use}`` so far."""
    from torchdevice import trace

    trace.reset()
    trace.start_report()
    try:
        yield lambda: {u.api: u for u in trace.report_data()}
    finally:
        trace.stop_report()
        trace.reset()
