"""Every way a CUDA-written program places work on its device gives MLX tensors under the mlx backend.

Never silently skipped: a placement that yields a plain host tensor runs on torch's
CPU with no sign of it. Each case is run translated (mlx) and natively on the CPU from the same
seed, and must give an MLXTensor with the native values.
"""
from __future__ import annotations

import enum
import json
import subprocess
import sys
import warnings
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
def test_bare_ordinals_place_on_mlx(case: str, device: object, native_and_mlx):
    expected, got = native_and_mlx(PLACEMENTS[case], device=device)
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


# -- factories beyond the common ones, and a translated default device --------------------------

MORE_FACTORIES: dict[str, Callable[[object], torch.Tensor]] = {
    "hann_window": lambda d: torch.hann_window(8, device=d),
    "scalar_tensor": lambda d: torch.scalar_tensor(3.5, device=d),
    "asarray": lambda d: torch.asarray([1.0, 2.0], device=d),
    "empty_permuted": lambda d: torch.empty_permuted((2, 3), (1, 0), device=d).fill_(2.0),
}


@pytest.mark.parametrize("case", list(MORE_FACTORIES))
def test_every_translated_factory_places_on_mlx(case: str, native_and_mlx):
    expected, got = native_and_mlx(MORE_FACTORIES[case])
    assert isinstance(got, MLXTensor), f"torch.{case}(device='cuda') left a {type(got).__name__} on the host"
    torch.testing.assert_close(got.cpu(), expected)


def _built_under_default_device() -> tuple[torch.Tensor, torch.Tensor, nn.Module]:
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.arange(4.0), nn.Linear(4, 2)


def test_set_default_device_cuda_places_on_mlx():
    torch.set_default_device("cpu")
    try:
        native = _built_under_default_device()
    finally:
        torch.set_default_device(None)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        torch.set_default_device("cuda")
        try:
            x, r, model = _built_under_default_device()
            assert isinstance(x, MLXTensor) and isinstance(r, MLXTensor) and isinstance(model.weight, MLXTensor)
            got = model(x + r)
        finally:
            torch.set_default_device(None)
        assert type(torch.zeros(1)) is torch.Tensor  # default device reset: host tensors again
    torch.testing.assert_close(got.cpu(), native[2](native[0] + native[1]))


def test_with_torch_device_cuda_places_on_mlx(mlx_cuda):
    with torch.device("cuda"):
        torch.manual_seed(0)
        model, x = nn.Linear(4, 2), torch.randn(3, 4)
        explicit_host = torch.zeros(2, device="cpu")
    assert isinstance(model.weight, MLXTensor) and isinstance(x, MLXTensor)
    assert type(explicit_host) is torch.Tensor
    with torch.device("cpu"):
        assert type(torch.zeros(2)) is torch.Tensor  # the program's own host device is not translated
    torch.manual_seed(0)
    native_model, native_x = nn.Linear(4, 2), torch.randn(3, 4)
    torch.testing.assert_close(model(x).cpu(), native_model(native_x).detach())


# -- what stays on the host is said: a one-time warning and the run report -----------------------


def test_a_placement_mlx_cannot_hold_warns_once_and_is_counted(mlx_cuda):
    from torchdevice_mlx.translation import HostPlacementWarning, host_placements, reset_host_placements

    reset_host_placements()
    indices, values = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0])
    with pytest.warns(HostPlacementWarning, match="sparse_coo_tensor"), torch.sparse.check_sparse_tensor_invariants():
        first = torch.sparse_coo_tensor(indices, values, (2, 2), device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostPlacementWarning)  # once per api
        torch.sparse_coo_tensor(indices, values, (2, 2), device="cuda")
    assert first.is_sparse and not isinstance(first, MLXTensor)
    torch.testing.assert_close(first.to_dense(), torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
    assert host_placements() == {"torch.sparse_coo_tensor(device=)": 2}


def test_host_placements_are_listed_by_the_run_report(tmp_path):
    script = tmp_path / "sparse.py"
    script.write_text("import torch\n"
                      "i, v = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0])\n"
                      "s = torch.sparse_coo_tensor(i, v, (2, 2), device='cuda')\n"
                      "d = torch.ones(2, 2, device=0)\n"
                      "print(float((s.to_dense() + d.cpu()).sum()))\n")
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "torchdevice", "run", "--backend", "mlx", "--report", str(report),
                           str(script)], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "7.0"
    assert done.stderr.count("HostPlacementWarning") == 1
    sections = json.loads(report.read_text())["sections"]
    assert sections["mlx: device placements left on the host (plain CPU tensors)"] == {"torch.sparse_coo_tensor(device=)": 1}


# -- a sparse tensor moved to the device: left on the host as a factory's is, and its ops are torch's -------------

SPARSE_MOVES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Tensor.to(device)": lambda s: s.to("cuda"),
    "Tensor.cuda()": lambda s: s.cuda(),
    "Module.to(device)": lambda s: _holding(s).to("cuda").sparse,
}


def _holding(sparse: torch.Tensor) -> nn.Module:
    module = nn.Linear(2, 2)
    module.register_buffer("sparse", sparse)
    return module


@pytest.mark.parametrize("api", list(SPARSE_MOVES))
def test_a_sparse_tensor_moved_to_the_device_stays_on_the_host_and_warns(mlx_cuda, api: str):
    from torchdevice_mlx.translation import HostPlacementWarning, host_placements, reset_host_placements

    reset_host_placements()
    dense = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    warned = [f"torchdevice mlx: {api} made a torch.sparse_coo tensor for the program's device that MLX cannot hold; "
              "it stays a plain host tensor and its ops run in torch on the CPU"]
    for sparse, warns in [(dense.to_sparse(), warned), (dense.to_sparse_csr(), [])]:  # a warning once per api
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            moved = SPARSE_MOVES[api](sparse)
        assert [str(w.message) for w in caught if w.category is HostPlacementWarning] == warns
        assert not isinstance(moved, MLXTensor) and moved.layout == sparse.layout
        torch.testing.assert_close(moved.to_dense(), dense)
    assert host_placements() == {api: 2}


def test_a_module_with_a_sparse_buffer_moves_its_dense_parameters_to_mlx(mlx_cuda):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = _holding(torch.eye(2).to_sparse()).cuda()
    assert isinstance(module.weight, MLXTensor) and isinstance(module.bias, MLXTensor)
    assert module.sparse.is_sparse and not isinstance(module.sparse, MLXTensor)


SPARSE_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "dense + sparse": lambda s, d, e: d + s,
    "dense - sparse": lambda s, d, e: d - s,
    "add_ into dense": lambda s, d, e: d.clone().add_(s),
    "dense * sparse (sparse)": lambda s, d, e: d * s,
    "sparse @ dense": lambda s, d, e: s @ e,
    "sparse @ vector": lambda s, d, e: s @ e[:, 0],
    "addmm": lambda s, d, e: torch.addmm(torch.ones(2, 2, device=d.device), s, e),
    "torch.sparse.mm": lambda s, d, e: torch.sparse.mm(s, e),
    "dense @ sparse.t()": lambda s, d, e: e.t() @ s.t(),
    "sparse + dense (torch refuses)": lambda s, d, e: s + d,
    "dense.copy_(sparse) (torch refuses)": lambda s, d, e: torch.zeros(2, 3, device=d.device).copy_(s),
}


def _sparse_op(case: str, device: str) -> tuple[str, object]:
    indices, values = torch.tensor([[0, 1, 1], [2, 0, 2]]), torch.tensor([3.0, 4.0, 5.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = torch.sparse_coo_tensor(indices, values, (2, 3)).to(device)
    d, e = torch.arange(6.0).reshape(2, 3).to(device), torch.arange(6.0).reshape(3, 2).to(device)
    try:
        out = SPARSE_OPS[case](s, d, e)
    except RuntimeError as exc:  # torch's own error, as natively
        return "raises", str(exc).splitlines()[0]
    on_mlx = isinstance(out, MLXTensor)
    return str(out.layout), (out.to_dense() if out.is_sparse else out).cpu().tolist(), on_mlx


@pytest.mark.parametrize("case", list(SPARSE_OPS))
def test_ops_mixing_a_moved_sparse_tensor_and_mlx_tensors_are_torchs(case: str, native_and_mlx):
    native, translated = native_and_mlx(lambda device: _sparse_op(case, device))
    if native[0] == "raises":
        assert translated == native
    else:
        assert translated[:2] == native[:2]
        assert translated[2] == (native[0] == "torch.strided")  # a dense result is an MLX tensor


def _sparse_embedding_steps(device: str) -> tuple[list[float], torch.Tensor]:
    model = nn.Embedding(10, 3, sparse=True).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids, losses = torch.tensor([1, 2, 2, 5], device=device), []
    for _ in range(3):
        optimizer.zero_grad()
        loss = model(ids).square().sum()
        loss.backward()
        assert model.weight.grad is not None and model.weight.grad.is_sparse
        optimizer.step()
        losses.append(loss.item())
    return losses, model.weight.detach().cpu()


def test_sparse_embedding_gradients_train_as_natively(native_and_mlx):
    """``nn.Embedding(sparse=True)``'s gradient is sparse (made by a host op): it stays on the host."""
    native, (losses, weight) = native_and_mlx(_sparse_embedding_steps)
    assert losses == pytest.approx(native[0], rel=1e-6)
    torch.testing.assert_close(weight, native[1])
