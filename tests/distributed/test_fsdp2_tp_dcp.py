"""A CUDA-written FSDP2 + DTensor TP + DCP program (tests/dist_programs/fsdp2_tp_dcp.py), run unmodified
through ``torchrun -m torchdevice run`` on the suite's target, against its hand port to CPU/gloo run natively
(``fsdp2_tp_dcp_native.py``): every number equal, and the port loads the translated run's DCP checkpoint."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import TARGET
from helpers import load_file, torchrun

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "dist_programs"

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")


def _run(program: str, out: Path, *args: str, backend: str | None) -> list[dict]:
    result = torchrun(PROGRAMS / program, str(out), *args, backend=backend, cwd=ROOT, timeout=240)
    assert result.returncode == 0, result.stdout[-6000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    translated_dir = tmp_path_factory.mktemp("translated")
    translated = _run("fsdp2_tp_dcp.py", translated_dir, backend=TARGET)
    native = _run("fsdp2_tp_dcp_native.py", tmp_path_factory.mktemp("native"), "--load",
                  str(translated_dir / "ckpt"), backend=None)
    return translated, native


def _assert_equal(got, expected, where: str) -> None:
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), where
        for key in expected:
            _assert_equal(got[key], expected[key], f"{where}/{key}")
        return
    assert got.dtype == expected.dtype and got.device == expected.device, where
    assert torch.equal(got, expected), f"{where}: {got} != {expected}"


@pytest.mark.parametrize("part", ["fsdp_losses", "fsdp_grad_norms", "fsdp_full_state", "fsdp_optim_state",
                                  "dcp_loaded_state", "dcp_optim_state", "tp_losses",
                                  "tp_full_state", "dtensor_local_shard", "dtensor_replicated_sum",
                                  "dtensor_matmul"])
def test_every_number_equals_the_native_port(on_target, runs, part):  # on_target: runs on every target
    translated, native = runs
    for rank in range(2):
        _assert_equal(translated[rank][part], native[rank][part], f"rank {rank}: {part}")


def test_it_trained_and_the_checkpoint_round_trips(on_target, runs):
    program = load_file("fsdp2_tp_dcp", PROGRAMS / "fsdp2_tp_dcp.py")
    initial = program.model().state_dict()
    translated, _ = runs
    for rank in range(2):
        changed = [k for k, v in translated[rank]["fsdp_full_state"].items() if not torch.equal(v, initial[k])]
        assert changed == list(initial), changed  # every weight trained
        assert len(translated[rank]["fsdp_optim_state"]) == 3 * len(initial)  # AdamW's step, exp_avg, exp_avg_sq
        _assert_equal(translated[rank]["dcp_loaded_state"], translated[rank]["fsdp_full_state"], "DCP round trip")
        _assert_equal(translated[rank]["dcp_optim_state"], translated[rank]["fsdp_optim_state"], "optimizer")
    _assert_equal(translated[0]["fsdp_full_state"], translated[1]["fsdp_full_state"], "ranks' full state")


def test_the_native_port_loads_the_translated_checkpoint(on_target, runs):
    translated, native = runs
    for rank in range(2):
        _assert_equal(native[rank]["dcp_loaded_from_translated"], translated[rank]["fsdp_full_state"], "loaded")


@pytest.mark.skipif(os.environ.get("TORCHDEVICE_MULTINODE_TESTS") != "1",
                    reason="8 processes, about a minute: TORCHDEVICE_MULTINODE_TESTS=1 runs it")
def test_two_nodes_two_agents_c10d_rendezvous(on_target, tmp_path):
    """``torchrun --nnodes 2 --nproc-per-node 2``, two agents meeting at a c10d rendezvous on localhost."""
    script = load_file("multinode_fsdp2", ROOT / "scripts" / "multinode_fsdp2.py")
    assert script.compare(TARGET, tmp_path) == []
