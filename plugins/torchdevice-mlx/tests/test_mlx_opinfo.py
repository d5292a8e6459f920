"""The MLX lowerings against torch's OpInfo database (see :mod:`torchdevice_mlx.opinfo`).

A fast subset runs by default; the full sweep (and the check that OPS.md is current) runs
with ``TORCHDEVICE_SLOW=1``.
"""
from __future__ import annotations

import os
import pathlib

import pytest

pytest.importorskip("expecttest")  # torch's OpInfo database imports it

from torchdevice_mlx import opinfo

FAST = ["add", "mul", "sub", "exp", "sum", "mm", "bmm", "addmm", "softmax", "transpose", "cat",
        "nn.functional.relu", "nn.functional.gelu", "nn.functional.layer_norm"]
SLOW = os.environ.get("TORCHDEVICE_SLOW") == "1"
TABLE = pathlib.Path(opinfo.__file__).resolve().parent / "OPS.md"


@pytest.mark.parametrize("info", opinfo.selected_opinfos(FAST), ids=lambda o: o.name)
def test_fast_subset_matches_torch_cpu(info):
    row = opinfo.check(info)
    assert row.forward == "pass", row
    assert row.backward in ("pass", "n/a"), row


@pytest.mark.skipif(not SLOW, reason="full OpInfo sweep: set TORCHDEVICE_SLOW=1")
def test_ops_table_is_current():
    rows = [opinfo.check(op) for op in opinfo.selected_opinfos()]
    assert TABLE.read_text() == opinfo.table(rows), (
        "regenerate: python -m torchdevice_mlx.opinfo plugins/torchdevice-mlx/torchdevice_mlx/OPS.md, then "
        "torchdevice matrix --write docs/compatibility.md")
