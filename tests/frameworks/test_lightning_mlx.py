"""``LightningModule.device`` on the mlx backend is the program's device.

Lightning records a module's device in ``_DeviceDtypeModuleMixin.to`` through ``torch._C._nn._parse_to``,
which re-parses the translated device into a plain ``cpu`` one: inside ``training_step`` ``self.device`` was
plain, and ``torch.ones(..., device=self.device)`` gave a host tensor (run on torch's CPU) where a CUDA run
gives a device tensor. Run in-process, translated on mlx and natively on Lightning's CPU accelerator from the
same seed: the tensors the module makes with ``self.device`` are MLX tensors, and the losses are the native ones.
"""
from __future__ import annotations

import os
from typing import Any

import pytest
import torch

import torchdevice
from torchdevice.testing import router_sandbox


def _need(module: str) -> Any:
    """``module``, or a skip; in the py311 and frameworks envs (TORCHDEVICE_FRAMEWORK_TESTS=1) a missing one fails."""
    if os.environ.get("TORCHDEVICE_FRAMEWORK_TESTS") == "1":
        return __import__(module)
    return pytest.importorskip(module)


def _fit(accelerator: str) -> dict[str, Any]:
    import lightning as L

    seen: dict[str, Any] = {"made": set(), "losses": []}

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            (x,) = batch
            shift = torch.full((1,), 0.5, device=self.device)  # made where the module lives
            seen["made"].add(type(shift).__name__)
            seen["device is the translated one"] = self.device is _host_target()
            loss = (self.layer(x) + shift).square().mean()
            seen["losses"].append(loss.item())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), batch_size=4)
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    model = Model()
    trainer.fit(model, data)
    return seen


def _host_target() -> Any:
    from torchdevice import devices

    return devices.host_target


def test_lightning_module_device_on_mlx() -> None:
    _need("lightning")
    pytest.importorskip("torchdevice_mlx")
    native = _fit("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _fit("gpu")
    assert native["made"] == {"Tensor"} and not native["device is the translated one"]
    assert translated["made"] == {"MLXTensor"}
    assert translated["device is the translated one"]
    assert translated["losses"] == pytest.approx(native["losses"], rel=1e-5)
