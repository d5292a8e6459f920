"""torchdevice.memstats.NoPinnedHostMemory: the one definition of "no pinned host memory" (CUDA's
pinned statistics all 0, their resets no-ops, each tagged) that host backends mix in."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchdevice import memstats, translate
from torchdevice.backend import MemoryOps, Status
from torchdevice.status import status_of

ROOT = Path(__file__).resolve().parents[1]
TRIO = ("host_memory_stats", "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats")


class Mixed(memstats.NoPinnedHostMemory, MemoryOps):
    """A plugin author's memory family: the mixin and nothing else."""


def test_the_mixin_gives_cudas_pinned_keys_all_zero_and_no_op_resets():
    ops = Mixed("mine")
    stats = ops.host_memory_stats()
    assert set(stats) == memstats.HOST_KEYS and set(stats.values()) == {0}
    assert ops.host_memory_stats() is not stats  # a fresh dict each time: a caller may change its copy
    assert ops.reset_accumulated_host_memory_stats() is None and ops.reset_peak_host_memory_stats() is None
    assert status_of(ops, "host_memory_stats")[0] is Status.TRANSLATED
    assert [status_of(ops, op)[0] for op in TRIO[1:]] == [Status.NOOP, Status.NOOP]
    assert all(status_of(ops, op)[1] for op in TRIO), "every operation says why"


@pytest.mark.parametrize("where", ["torchdevice.cpu:CPUMemory", "torchdevice_mlx.backend:MLXMemory",
                                   "torchdevice_simchip:SimChipMemory"])
def test_host_backends_use_the_mixin_instead_of_copies(where, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "vendor-plugin"))  # the vendor example, from source
    module, _, name = where.partition(":")
    cls = getattr(pytest.importorskip(module), name)
    assert issubclass(cls, memstats.NoPinnedHostMemory)
    copies = [f"{klass.__name__}.{op}" for klass in cls.__mro__ for op in TRIO
              if klass is not memstats.NoPinnedHostMemory and op in vars(klass)]
    assert not copies, f"{where} defines its own: {copies}"


def test_translated_torch_cuda_answers_through_it(on_cpu):
    translate.unpatch()
    with translate.patched():
        stats = torch.cuda.host_memory_stats()
        torch.cuda.reset_peak_host_memory_stats()
        torch.cuda.reset_accumulated_host_memory_stats()
    assert set(stats) == memstats.HOST_KEYS and set(stats.values()) == {0}
