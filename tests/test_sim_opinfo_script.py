"""scripts/sim_opinfo.py's classification, without sim: which ops it calls random (not compared) and what it
reports as a difference. The sweep itself runs by hand (docs/testing.md, "sim against torch's OpInfo database")."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sim_opinfo.py"


@pytest.fixture(scope="module")
def sweep():
    return load_file("sim_opinfo", SCRIPT)


def _info(name: str):
    from torch.testing._internal.common_methods_invocations import op_db

    return next(info for info in op_db if info.name == name)


def test_an_op_that_seeds_itself_is_random_and_a_pure_one_is_not(sweep):
    """OpInfo's dropout seeds itself (its CPU results do not change with the caller's seed); its aten op is
    tagged nondeterministic_seeded."""
    x = torch.ones(8, 8)
    assert sweep._random(_info("nn.functional.dropout"), (x,), {"p": 0.5, "training": True})
    assert not sweep._random(_info("add"), (x, x), {})


def test_a_difference_names_shape_or_size_and_rounding_is_equal(sweep):
    a = torch.ones(3)
    assert sweep._same([a], [a + 1e-6]) == ""
    assert sweep._same([a], [a + 1]).startswith("values differ by up to 1")
    assert sweep._same([a], [torch.ones(2)]) == "torch.float32 (2,), torch.float32 (3,) expected"
    assert sweep._same([a, None], [a, a]) == "a gradient is missing on one side"
