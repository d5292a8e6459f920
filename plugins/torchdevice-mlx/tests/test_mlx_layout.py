"""channels_last on MLX tensors: the memory format a program asks for is the one it gets.

``x.contiguous(memory_format=torch.channels_last)``, ``x.to(memory_format=...)`` and ``Module.to(memory_format=...)``
gave contiguous (NCHW) tensors, so ``is_contiguous(memory_format=torch.channels_last)`` was False where it is
True natively. Each case runs natively on the CPU and translated on mlx; strides, the format checks and the
values are compared.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from torchdevice_mlx.tensor import MLXTensor

CL, CL3 = torch.channels_last, torch.channels_last_3d

CASES: dict[str, Callable[[str], torch.Tensor]] = {
    "contiguous(channels_last)": lambda d: torch.randn(2, 3, 4, 5, device=d).contiguous(memory_format=CL),
    "to(memory_format=)": lambda d: torch.randn(2, 3, 4, 5, device=d).to(memory_format=CL),
    "clone(memory_format=)": lambda d: torch.randn(2, 3, 4, 5, device=d).clone(memory_format=CL),
    "channels_last_3d": lambda d: torch.randn(2, 3, 2, 4, 5, device=d).contiguous(memory_format=CL3),
    "clone keeps it": lambda d: torch.randn(2, 3, 4, 5, device=d).contiguous(memory_format=CL).clone(),
    "dtype cast keeps it": lambda d: torch.randn(2, 3, 4, 5, device=d).contiguous(memory_format=CL).half(),
    "back to contiguous": lambda d: torch.randn(2, 3, 4, 5, device=d).contiguous(memory_format=CL).contiguous(),
    "host channels_last moved": lambda d: torch.randn(2, 3, 4, 5).contiguous(memory_format=CL).to(d),
    "transposed host moved": lambda d: torch.randn(4, 5).t().to(d),
    "one channel": lambda d: torch.randn(2, 1, 4, 5, device=d).contiguous(memory_format=CL),
}


def _describe(t: torch.Tensor) -> dict[str, Any]:
    formats = {CL: 4, CL3: 5}
    return {"stride": t.stride(), "contiguous": t.is_contiguous(),
            **{str(f): t.is_contiguous(memory_format=f) for f, rank in formats.items() if t.dim() == rank}}


@pytest.mark.parametrize("name", list(CASES))
def test_memory_format_as_native(name: str, native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str) -> tuple[dict[str, Any], torch.Tensor, bool]:
        t = CASES[name](device)
        return _describe(t), t.cpu(), isinstance(t, MLXTensor)

    (want, want_values, _), (got, got_values, is_mlx) = native_and_mlx(program)
    assert is_mlx
    assert got == want
    assert torch.equal(got_values, want_values)


def _train(device: str, moved_first: bool) -> dict[str, Any]:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3))
    model = model.to(device).to(memory_format=CL) if moved_first else model.to(memory_format=CL).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 3, 8, 8, device=device).contiguous(memory_format=CL)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    weight = model[0].weight
    return {"losses": losses, "weight": weight.detach().cpu(), "layout": _describe(weight)}


@pytest.mark.parametrize("moved_first", [True, False], ids=["to(device) then format", "format then to(device)"])
def test_channels_last_training_matches_native(moved_first: bool, native_and_mlx: Callable[..., Any]) -> None:
    native, translated = native_and_mlx(lambda d: _train(d, moved_first))
    assert translated["layout"] == native["layout"]
    assert translated["layout"][str(CL)]
    assert translated["losses"] == pytest.approx(native["losses"], rel=1e-4)
    assert torch.allclose(translated["weight"], native["weight"], atol=1e-5)
