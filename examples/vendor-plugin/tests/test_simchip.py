"""Tests of the sample plugin, with the vendor kit (torchdevice.testing) as docs/plugins.md describes."""
from __future__ import annotations

import pytest
import torch

import torchdevice
from torchdevice.testing import BackendConformance, check_backend, registered

pytest.importorskip("torchdevice_simchip", reason="install the sample plugin first: pip install examples/vendor-plugin")
from torchdevice_simchip import DEVICES, SimChipBackend  # noqa: E402


class TestSimChipConformance(BackendConformance):
    @pytest.fixture
    def plugin(self):
        return SimChipBackend()


def test_check_backend_passes():
    assert check_backend(SimChipBackend()).ok


def test_selected_when_its_priority_is_highest():
    with registered(SimChipBackend()):
        auto = [b for b in torchdevice.backends() if b.available and b.automatic]
        if max(b.priority for b in auto) == SimChipBackend.priority:
            assert torchdevice.current_backend() == "simchip"
        with torchdevice.use("simchip"):
            assert torchdevice.device_count() == DEVICES
            with torchdevice.device(DEVICES - 1):
                assert torchdevice.current_device() == DEVICES - 1
            x = torch.ones(4, device=torchdevice.device_type())
            assert x.device.type == "cpu"


def test_priority_override_puts_it_behind(monkeypatch):
    with registered(SimChipBackend()):
        monkeypatch.setenv("TORCHDEVICE_PRIORITY", "simchip=-1")
        from torchdevice import router

        router.invalidate()
        assert torchdevice.current_backend() != "simchip"
