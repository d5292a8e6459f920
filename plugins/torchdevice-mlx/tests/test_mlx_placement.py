"""Every way a CUDA-written program places work on its device gives MLX tensors under the mlx backend.

Issue 27 ("never silently skipped"): a placement that yields a plain host tensor runs on torch's
CPU with no sign of it. Each case is run translated (mlx) and natively on the CPU from the same
seed, and must give an MLXTensor with the native values.
"""
from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import torchdevice
from torchdevice.errors import InvalidDeviceError
from torchdevice.testing import router_sandbox
from torchdevice_mlx.tensor import MLXTensor


@pytest.fixture
def mlx_cuda(monkeypatch):
    """Translation on with the mlx backend and two logical devices."""
    monkeypatch.setenv("TORCHDEVICE_DEVICE_COUNT", "2")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        yield


class Rank(enum.IntEnum):
    ZERO = 0


def _native(make: Callable[[object], torch.Tensor]) -> torch.Tensor:
    torch.manual_seed(0)
    return make("cpu")


def _translated(make: Callable[[object], torch.Tensor], device: object) -> torch.Tensor:
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        torch.manual_seed(0)
        return make(device)


PLACEMENTS: dict[str, Callable[[object], torch.Tensor]] = {
    "factory": lambda d: torch.ones(2, 3, device=d),
    "random factory": lambda d: torch.randn(4, device=d),
    "Tensor.to": lambda d: torch.arange(5.0).to(d),
    "Tensor.to(device=)": lambda d: torch.arange(5.0).to(device=d),
    "Tensor.to(dev, dtype)": lambda d: torch.arange(5).to(d, torch.float32),
    "Tensor.new_zeros": lambda d: torch.ones(1).new_zeros(3, device=d),
    "Module.to": lambda d: nn.Linear(3, 2).to(d).weight,
}


@pytest.mark.parametrize("device", [0, np.int64(0), Rank.ZERO], ids=["int", "numpy int", "IntEnum"])
@pytest.mark.parametrize("case", list(PLACEMENTS))
def test_bare_ordinals_place_on_mlx(case: str, device: object):
    expected = _native(PLACEMENTS[case])
    got = _translated(PLACEMENTS[case], device)
    assert isinstance(got, MLXTensor), f"{case} with device={device!r} left a {type(got).__name__} on the host"
    torch.testing.assert_close(got.cpu(), expected)


def test_second_logical_device_by_ordinal(mlx_cuda):
    assert torch.cuda.device_count() == 2
    for made in (torch.zeros(2, device=1), torch.zeros(2).to(1), nn.Linear(2, 2).to(1).weight):
        assert isinstance(made, MLXTensor)
    with pytest.raises(InvalidDeviceError):
        torch.zeros(2, device=2)


def test_ordinal_lookalikes_stay_plain(mlx_cuda):
    x = torch.arange(3)
    assert type(x.to(torch.float32)) is torch.Tensor  # a dtype is not a device
    assert type(x.to(torch.ones(1))) is torch.Tensor  # nor a host tensor
    assert type(torch.zeros(2, device="cpu")) is torch.Tensor
    assert type(torch.zeros(2).to(0).to("cpu")) is torch.Tensor


def _train(device: object) -> list[float]:
    """A DDP-style loop that places everything with the rank's ordinal."""
    torch.manual_seed(0)
    rank = 0 if device != "cpu" else "cpu"
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8).to(rank), torch.randn(32, 1, device=rank)
    losses = []
    for _ in range(3):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert device == "cpu" or isinstance(loss, MLXTensor)
        losses.append(loss.item())
    return losses


def test_module_to_rank_trains_on_mlx_as_natively():
    native = _train("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        translated = _train(0)
    assert translated == pytest.approx(native, abs=1e-5)


# -- transformers-style placement (emulated: transformers and accelerate are not installed) ----


def _pipeline_forward(model: nn.Module, device: object, inputs: torch.Tensor) -> torch.Tensor:
    """What ``pipeline(..., device=0)`` does: ``model.to(device)``, inputs moved to ``torch.device(device)``."""
    model.to(device)
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    return model(inputs.to(dev))


def _load_with_device_map(state: dict[str, torch.Tensor], device_map: dict[str, object]) -> nn.Module:
    """What ``from_pretrained(device_map={"": 0})`` does through accelerate's ``set_module_tensor_to_device``:
    an empty model, each checkpoint tensor moved with ``value.to(device)`` and set as a new Parameter."""
    with torch.device("meta"):
        model = nn.Linear(4, 3)
    device = device_map[""]
    for name, value in state.items():
        old = model._parameters[name]
        model._parameters[name] = nn.Parameter(value.to(device), requires_grad=old.requires_grad)
    return model


def test_pipeline_device_0_runs_on_mlx():
    torch.manual_seed(0)
    inputs = torch.randn(2, 4)
    native = _pipeline_forward(nn.Linear(4, 3), "cpu", inputs)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        torch.manual_seed(0)
        torch.randn(2, 4)
        model = nn.Linear(4, 3)
        got = _pipeline_forward(model, 0, inputs)
        assert all(isinstance(p, MLXTensor) for p in model.parameters())
        assert isinstance(got, MLXTensor)
    torch.testing.assert_close(got.cpu(), native)


def test_device_map_ordinal_loads_on_mlx():
    torch.manual_seed(0)
    state = nn.Linear(4, 3).state_dict()
    x = torch.randn(2, 4)
    native = _load_with_device_map(state, {"": "cpu"})(x)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        model = _load_with_device_map(state, {"": 0})
        assert all(isinstance(p, MLXTensor) for p in model.parameters())
        got = model(x.to(0))
        assert isinstance(got, MLXTensor)
    torch.testing.assert_close(got.cpu(), native)


def test_torch_device_of_a_translated_device_keeps_it(mlx_cuda):
    """Libraries normalise devices with ``torch.device(dev)`` (accelerate, transformers, Lightning)."""
    dev = torch.device(torch.device("cuda"))
    assert isinstance(torch.zeros(2, device=dev), MLXTensor)
    assert type(torch.zeros(2, device=torch.device(torch.device("cpu")))) is torch.Tensor


# -- Lightning / Fabric (emulated: lightning is not installed here; tests/frameworks runs the real one) ----


class _FakeCPUAccelerator:
    """Stands in for lightning's CPUAccelerator (the translated accelerator's base on a host target)."""


class _FakeCUDAAccelerator:
    @staticmethod
    def parse_devices(devices: object) -> list[int]:
        return list(range(torch.cuda.device_count())) if devices == "auto" else list(devices)  # type: ignore[call-overload]


class _FakeFabricCUDA:
    @staticmethod
    def _check_cuda_matmul_precision(index: int) -> None:
        pass


def _fabric_steps(root: object) -> list[float]:
    """What Fabric / a SingleDeviceStrategy does with its root device: ``module.to(root)``, ``batch.to(root)``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1)).to(root)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batch = torch.randn(16, 6), torch.randn(16, 1)
    losses = []
    for _ in range(3):
        x, y = (t.to(root, non_blocking=True) for t in batch)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert isinstance(root, str) or isinstance(loss, MLXTensor) and isinstance(model[0].weight, MLXTensor)
        losses.append(loss.item())
    return losses


def test_lightning_accelerator_places_on_mlx():
    from torchdevice.integrations.lightning import make_accelerator

    native = _fabric_steps("cpu")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        from torchdevice import translate

        accelerator = make_accelerator(_FakeCPUAccelerator, _FakeCUDAAccelerator, _FakeFabricCUDA, translate.target())
        (root,) = accelerator.get_parallel_devices([0])
        accelerator().setup_device(root)
        translated = _fabric_steps(root)
    assert translated == pytest.approx(native, abs=1e-5)
