"""Fixtures of the sim tests: sim loaded once for the session; translation onto it in a sandbox."""
from __future__ import annotations

import pytest
import torch

import torchdevice
import torchdevice_sim
from torchdevice import router
from torchdevice.testing import router_sandbox


@pytest.fixture(scope="session")
def sim():
    """``torch.sim``, loaded (the extension is built on first use, then cached)."""
    return torchdevice_sim.load()


@pytest.fixture
def synced(sim):
    """Every device idle before and after the test, so tests do not see each other's queued work."""
    for index in range(sim.device_count()):
        sim.synchronize(index)
    yield sim
    for index in range(sim.device_count()):
        sim.synchronize(index)
    sim.set_device(0)


@pytest.fixture
def on_sim(synced):
    """Translation onto sim: ``torchdevice.use("sim")`` and ``patched()``, undone afterwards."""
    with router_sandbox(), torchdevice.use("sim"), torchdevice.patched():
        yield router.active()
    assert torch.cuda.is_available is not None
