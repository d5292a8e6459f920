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


#: OpInfos whose lowerings call MLX primitives that compute float64 at float32 precision (exp, sin, cos,
#: sigmoid, erf, erfinv, softmax, logsumexp, logaddexp, round with decimals, convolution): float64 goes to the host
FLOAT64_PRONE = ["exp", "sin", "cos", "sigmoid", "erf", "erfinv", "softmax", "log_softmax", "logsumexp",
                 "nn.functional.gelu", "nn.functional.silu", "nn.functional.softplus", "nn.functional.conv2d",
                 "nn.functional.cross_entropy", "nn.functional.scaled_dot_product_attention", "round"]


@pytest.mark.parametrize("info", opinfo.selected_opinfos(FLOAT64_PRONE), ids=opinfo.row_name)
def test_float64_is_float64_precise(info):
    assert opinfo.check_float64(info) in ("pass", "n/a")


@pytest.mark.skipif(not SLOW, reason="full OpInfo sweep: set TORCHDEVICE_SLOW=1")
def test_every_lowered_op_is_float64_precise():
    failed = {opinfo.row_name(op): r for op in opinfo.selected_opinfos() if (r := opinfo.check_float64(op)).startswith("FAIL")}
    assert not failed, failed


@pytest.mark.skipif(not SLOW, reason="full OpInfo sweep: set TORCHDEVICE_SLOW=1")
def test_ops_table_is_current():
    rows = [opinfo.check(op) for op in opinfo.selected_opinfos()]
    assert TABLE.read_text() == opinfo.table(rows), (
        "regenerate: python -m torchdevice_mlx.opinfo plugins/torchdevice-mlx/torchdevice_mlx/OPS.md, then "
        "torchdevice matrix --write docs/compatibility.md")
