"""torch's distributed machinery under translation sees the real machine: c10d's own
``is_nccl_available()`` checks, DCP's loader choice, and every site of the audit in docs/distributed.md."""
from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import load_file

from torchdevice import boundary

ROOT = Path(__file__).resolve().parents[2]
TORCH_DIR = os.path.dirname(torch.__file__)

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")


AUDIT = load_file("distributed_audit", ROOT / "scripts" / "distributed_audit.py")
#: zero-argument questions; every site must get the answer torch's own inductor gets (the real machine's)
PROBES = {
    "torch.cuda.is_available": "torch.cuda.is_available()",
    "torch.cuda.device_count": "torch.cuda.device_count()",
    "torch.cuda.is_initialized": "torch.cuda.is_initialized()",
    "torch.xpu.is_available": "torch.xpu.is_available()",
    "torch.xpu.device_count": "torch.xpu.device_count()",
    "torch.accelerator.is_available": "torch.accelerator.is_available()",
    "torch.accelerator.device_count": "torch.accelerator.device_count()",
    "torch.accelerator.current_accelerator": "torch.accelerator.current_accelerator()",
    "_get_available_device_type": "torch._utils._get_available_device_type()",
}
INDUCTOR = os.path.join(TORCH_DIR, "_inductor", "probe.py")


def _ask_from(filename: str, expression: str):
    """Evaluate ``expression`` as code living in ``filename`` (the caller the boundary sees)."""
    scope = {"torch": torch}
    exec(compile(f"result = {expression}", filename, "exec"), scope)
    return scope["result"]


@pytest.fixture
def nccl_group(translated):
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_set_pg_timeout_after_a_translated_nccl_group(nccl_group):
    """c10d asks its own ``is_nccl_available()`` before naming ``ProcessGroupNCCL`` (torchtitan calls this)."""
    assert dist.is_nccl_available()  # the program is still told NCCL is there
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=100), None)


def test_dcp_save_load_round_trip(nccl_group, tmp_path):
    """DCP's filesystem reader/writer ask ``torch.cuda.is_available()`` and ``_get_available_device_type()``:
    one machine's answers (a CUDA 'yes' then no device type failed with 'attribute name must be string')."""
    import torch.distributed.checkpoint as dcp

    saved = {"w": torch.arange(6.0, device="cuda").reshape(2, 3), "b": torch.ones(3, device="cuda", dtype=torch.bfloat16)}
    dcp.save(saved, checkpoint_id=str(tmp_path))
    loaded = {"w": torch.zeros(2, 3, device="cuda"), "b": torch.zeros(3, device="cuda", dtype=torch.bfloat16)}
    dcp.load(loaded, checkpoint_id=str(tmp_path))
    for key in saved:
        assert torch.equal(loaded[key], saved[key]), key


def _wrong_answer(rel: str, api: str) -> str | None:
    """How code at the audited site ``torch/rel`` asking ``api`` is answered wrongly, or None."""
    filename = os.path.join(TORCH_DIR, *rel.split("/"))
    if not boundary.torch_internal(filename):
        return f"torch/{rel}: {api} is answered as the program"
    if api in PROBES and (got := _ask_from(filename, PROBES[api])) != (real := _ask_from(INDUCTOR, PROBES[api])):
        return f"torch/{rel}: {PROBES[api]} = {got!r}, to torch's inductor {real!r}"
    return None


@pytest.fixture(scope="module")
def sites() -> dict[tuple[str, str], list[int]]:
    """The audited sites, read when a test here runs, not at collection (every pytest process collects this
    module; the sim run deselects it), and once for both tests (the table reads the same cached result)."""
    return AUDIT.sites(TORCH_DIR)


def test_every_audited_site_is_answered_for_the_real_machine(translated, sites):
    """Every row of the audit table (one translation for all rows: a parametrized test cost 1 s a row)."""
    assert _ask_from(INDUCTOR, "torch.cuda.is_available()") is torch.cuda.is_available.__torchdevice_real__()
    wrong = [w for rel, api in sites if (w := _wrong_answer(rel, api)) is not None]
    assert not wrong, "\n".join(wrong)
    assert len(sites) > 50


def test_the_program_is_still_told_cuda(translated):
    assert _ask_from("/home/user/train.py", "torch.cuda.is_available()") is True
    assert _ask_from("/home/user/train.py", "torch.distributed.is_nccl_available()") is True


@pytest.mark.skipif(torch.__version__.split("+")[0] != "2.13.0", reason="the table is torch 2.13.0's")
def test_docs_table_lists_every_site(sites):
    text = (ROOT / "docs" / "distributed.md").read_text()
    table = AUDIT.markdown(TORCH_DIR)
    assert table in text, "docs/distributed.md's audit table is stale: python scripts/distributed_audit.py"
    assert len(re.findall(r"^\| `", table, re.M)) == len(sites) > 50
