"""Tensor subclasses of MLX tensors: ``as_subclass`` and torchvision's ``tv_tensors``.

``x.as_subclass(cls)`` of an MLX tensor raised "already associated to a python object of type MLXTensor",
so torchvision's ``tv_tensors`` (and every transforms.v2 pipeline on device tensors) failed. Each case runs
natively on the CPU and translated on mlx from the same seed and compares classes, values and gradients.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torchdevice
from torchdevice.testing import router_sandbox
from torchdevice_mlx.tensor import MLXTensor


class Tagged(torch.Tensor):
    """A subclass with torch's default ``__torch_function__`` (results stay ``Tagged``) and a method."""

    def tag(self) -> str:
        return "tagged"


class Unwrapping(torch.Tensor):
    """A subclass whose ``__torch_function__`` returns plain tensors, as torchvision's ``TVTensor`` does."""

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def test_as_subclass_keeps_class_data_aliasing_and_autograd(native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str) -> dict[str, Any]:
        x = torch.randn(3, 4, device=device, requires_grad=True)
        y = x.as_subclass(Tagged)
        if device == "cuda":
            assert isinstance(y, MLXTensor)
        doubled = y * 2
        (doubled.sin().sum()).backward()
        plain = torch.randn(2, device=device)
        alias = plain.as_subclass(Tagged)
        alias.add_(1)  # writes through to plain, as natively
        assert isinstance(y, Tagged) and isinstance(doubled, Tagged)
        # the class name, not the class: on MLX it is Tagged and MLXTensor combined (a subclass of Tagged)
        return {"class": type(y).__name__, "tag": y.tag(), "grad_fn": type(y.grad_fn).__name__,
                "result class": type(doubled).__name__,
                "grad": x.grad.cpu(), "values": y.detach().cpu().as_subclass(torch.Tensor), "aliased": plain.cpu(),
                "back to Tensor": type(y.as_subclass(torch.Tensor)).__name__, "repr": repr(alias)[:7]}

    native, translated = native_and_mlx(program)
    assert translated.pop("back to Tensor") == "MLXTensor" and native.pop("back to Tensor") == "Tensor"
    for key, value in native.items():
        if isinstance(value, torch.Tensor):
            assert torch.allclose(translated[key], value, atol=1e-6), key
        else:
            assert translated[key] == value, key


def test_subclass_with_its_own_torch_function(native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str) -> tuple[str, type, torch.Tensor]:
        x = torch.arange(6.0, device=device).as_subclass(Unwrapping)
        assert isinstance(x, Unwrapping)
        out = x.reshape(2, 3) + 1
        return type(x).__name__, type(out), out.cpu()

    (ncls, nout, nval), (tcls, tout, tval) = native_and_mlx(program)
    assert tcls == ncls == "Unwrapping" and nout is torch.Tensor and tout is MLXTensor
    assert torch.equal(tval, nval)


def test_as_subclass_of_a_non_tensor_class_raises_as_torch() -> None:
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        x = torch.ones(2, device="cuda")
        with pytest.raises(TypeError, match="does not inherit from Tensor"):
            x.as_subclass(int)


def _torchvision() -> Any:
    try:  # a torchvision built for another torch fails at import with a RuntimeError, not an ImportError
        return importlib.import_module("torchvision")
    except Exception as exc:  # noqa: BLE001 -- any import failure means: not usable here
        pytest.skip(f"torchvision is not importable here: {exc}")


def test_transforms_v2_detection_and_segmentation_pipeline(native_and_mlx: Callable[..., Any]) -> None:
    _torchvision()
    tv_tensors = importlib.import_module("torchvision.tv_tensors")
    v2 = importlib.import_module("torchvision.transforms.v2")

    def program(device: str) -> list[tuple[str, torch.Tensor]]:
        image = tv_tensors.Image(torch.rand(3, 32, 48, device=device))
        boxes = tv_tensors.BoundingBoxes(torch.tensor([[2., 3., 20., 25.], [10., 5., 40., 30.]], device=device),
                                         format="XYXY", canvas_size=(32, 48))
        mask = tv_tensors.Mask((torch.rand(32, 48, device=device) > 0.5).to(torch.uint8))
        pipeline = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.RandomResizedCrop((24, 24), antialias=True),
                               v2.RandomRotation(15), v2.ColorJitter(0.3, 0.3), v2.ToDtype(torch.float32, scale=True),
                               v2.Normalize([0.5] * 3, [0.2] * 3), v2.SanitizeBoundingBoxes(labels_getter=None)])
        torch.manual_seed(1)
        out = pipeline(image, boxes, mask)
        if device == "cuda":
            assert all(isinstance(o, MLXTensor) for o in out)
        return [(type(o).__name__, o.cpu().as_subclass(torch.Tensor)) for o in out]

    native, translated = native_and_mlx(program)
    assert [n for n, _ in translated] == [n for n, _ in native] == ["Image", "BoundingBoxes", "Mask"]
    for (_, want), (_, got) in zip(native, translated):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.allclose(got.float(), want.float(), atol=1e-5)
