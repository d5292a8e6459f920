"""Fixtures of the MLX plugin's tests: one program run natively and translated onto mlx (:func:`native_and_mlx`)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import torchdevice
from torchdevice.testing import router_sandbox


def _native_and_mlx(program: Callable[..., Any], folder: Path | None = None, *, device: object = "cuda") -> tuple[Any, Any]:
    """``program(device)`` run natively on the CPU (``"cpu"``), then translated onto mlx (``device``: ``"cuda"``
    unless the test gives another, such as a bare ordinal) in a router sandbox, each after ``torch.manual_seed(0)``;
    returns ``(native, translated)`` for the test to compare. With ``folder``, the program is also given a new
    folder for each run (``folder/"native"``, ``folder/"mlx"``): ``program(device, folder)``."""
    torch.manual_seed(0)
    if folder is None:
        native = program("cpu")
    else:
        (folder / "native").mkdir()
        native = program("cpu", folder / "native")
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        torch.manual_seed(0)
        if folder is None:
            translated = program(device)
        else:
            (folder / "mlx").mkdir()
            translated = program(device, folder / "mlx")
    return native, translated


@pytest.fixture
def native_and_mlx() -> Callable[..., tuple[Any, Any]]:
    """Run one program natively and translated onto mlx from the same seed: ``native, translated =
    native_and_mlx(program)``, ``program(device)`` (see :func:`_native_and_mlx`)."""
    return _native_and_mlx
