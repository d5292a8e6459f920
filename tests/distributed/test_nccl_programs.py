"""torch.distributed for code written for NCCL, on the CPU backend's engine (gloo).

* In this process: the argument translation (``backend``, ``device_id``, DDP's
  ``device_ids``), a one-process group created with ``"nccl"``, exact
  restoration by ``unpatch()``, and the status of every catalog function.
* Two real processes on 127.0.0.1 under
  ``torchrun --nproc-per-node 2 -m torchdevice run PROGRAM``, unmodified:
  ``tests/dist_programs/nccl_collectives.py`` (every collective, compared
  with hand-computed values) and ``examples/ddp_train.py`` (final parameters
  identical on both ranks and equal to a hand-ported single-process run over
  the global batch).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from helpers import Result, run_python, run_torchdevice, torchrun

import torchdevice
import torchdevice.distributed as tddist
from torchdevice.backend import Status

ROOT = Path(__file__).resolve().parents[2]
#: the accelerator torch itself sees on this machine, read while translation is off (collection)
NATIVE_ACCELERATOR = torch._C._get_accelerator().type
EXAMPLE = ROOT / "examples" / "ddp_train.py"
COLLECTIVES = ROOT / "tests" / "dist_programs" / "nccl_collectives.py"
LAUNCH_TIMEOUT = 150

_Device = type(torch.empty(0).device)

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")


# -- in this process --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, on_a_host, on_a_device",  # the target's engine on a host target (gloo), or its type's own
    [
        ("nccl", "gloo", "{engine}"),
        ("NCCL", "gloo", "{engine}"),
        ("xccl", "gloo", "{engine}"),
        ("cuda:nccl", "cpu:gloo", "{type}:{engine}"),
        ("cpu:gloo,cuda:nccl", "cpu:gloo", "cpu:gloo,{type}:{engine}"),  # on a host target cpu's entry is cuda's
        ("cuda:nccl,cpu:mpi", "cpu:mpi", "{type}:{engine},cpu:mpi"),  # the program's own entry for cpu wins
        ("gloo", "gloo", "gloo"),
        ("mpi", "mpi", "mpi"),
        # torch's own default is the engine of the accelerator it sees: already gloo on a CPU-only
        # build (None passes through); nccl where CUDA is present, so gloo is named
        (None, None if NATIVE_ACCELERATOR == "cpu" else "gloo", None if NATIVE_ACCELERATOR == "cpu" else "gloo"),
    ],
)
def test_backend_argument_maps_to_the_backends_engine(translated, target, given, on_a_host, on_a_device):
    expected = on_a_device if target.indexed else on_a_host
    if expected is not None:
        expected = expected.format(type=target.device_type, engine=target.engine)
    assert tddist.map_backend(given) == expected


def _as_target(monkeypatch, device_type, engine, count=2):
    """Point the installed translation at another backend's shape (no such hardware needed)."""
    from torchdevice.router import Target
    from torchdevice.vocabulary import SOURCE_FAMILIES

    target = Target("fake-" + device_type, device_type, count, None, None, None, None,  # type: ignore[arg-type]
                    sources=frozenset(t for t in SOURCE_FAMILIES if t != device_type))
    monkeypatch.setattr(tddist._state, "target", target)
    monkeypatch.setattr(tddist._state, "engine", engine)
    monkeypatch.setattr(tddist._state, "backend_name", target.name)
    monkeypatch.setattr(tddist._state, "foreign",
                        frozenset(tddist._foreign_engines(device_type, target.sources)))


def test_backend_argument_on_other_backends(translated, monkeypatch):
    _as_target(monkeypatch, "xpu", "xccl")
    assert tddist.map_backend("nccl") == "xccl"
    assert tddist.map_backend("gloo") == "gloo"  # programs ask gloo for their CPU tensors
    assert tddist.map_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,xpu:xccl"
    assert tddist.map_device_id(_Device("cuda", 1)) == _Device("xpu", 1)
    assert tddist.map_device_id(1) == _Device("xpu", 1)
    with pytest.raises(torchdevice.InvalidDeviceError):
        tddist.map_device_id(_Device("cuda", 2))
    _as_target(monkeypatch, "mps", "gloo")  # torch 2.13 lists gloo for cpu and cuda only
    assert tddist.map_backend("nccl") == "cpu:gloo,mps:gloo"
    assert tddist.map_backend("cuda:nccl") == "mps:gloo"
    _as_target(monkeypatch, "mtia", None)
    with pytest.raises(torchdevice.UnsupportedError, match="nccl"):
        tddist.map_backend("nccl")
    assert tddist.map_backend("gloo") == "gloo"


@pytest.mark.cpu_only(reason="a host target drops device_id; on a device type of its own it is that device "
                             "(test_backend_argument_on_other_backends, the sim plugin's DDP tests)")
def test_device_id_is_checked_and_dropped_on_a_cpu_target(translated):
    assert tddist.map_device_id(torch.device("cuda", 0)) is None  # already translated to cpu
    assert tddist.map_device_id(_Device("cuda", 0)) is None
    assert tddist.map_device_id(0) is None
    for bad in (1, _Device("cuda", 3)):
        with pytest.raises(torchdevice.InvalidDeviceError) as info:
            tddist.map_device_id(bad)
        assert isinstance(info.value, torch.AcceleratorError)
    with pytest.raises(ValueError, match="with index"):
        tddist.map_device_id(_Device("cuda"))


def test_one_process_nccl_group_ddp_and_unpatch(on_cpu):
    originals = (dist.init_process_group, dist.all_gather, dist.distributed_c10d.new_group,
                 torch.nn.parallel.DistributedDataParallel.__init__)
    native_nccl = dist.is_nccl_available()  # torch's own answer: False on a CPU build, True with CUDA
    with torchdevice.patched():
        assert dist.is_nccl_available() and dist.is_backend_available("nccl")
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=torch.device("cuda:0"))
        try:
            assert dist.get_backend() == "gloo"
            torch.manual_seed(0)
            model = nn.Linear(3, 1).cuda()
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], output_device=0)
            assert ddp.device_ids is None  # as DDP wants for a CPU module
            ddp(torch.ones(2, 3, device="cuda")).sum().backward()
            assert model.weight.grad.tolist() == [[2.0, 2.0, 2.0]]
            with pytest.raises(torchdevice.InvalidDeviceError):
                torch.nn.parallel.DistributedDataParallel(model, device_ids=[1])
            stacked = torch.empty(1, 2, device="cuda")
            dist.all_gather_into_tensor(stacked, torch.tensor([1.0, 2.0], device="cuda"))
            assert stacked.tolist() == [[1.0, 2.0]]
            out = torch.empty(2, device="cuda")
            dist.reduce_scatter_tensor(out, torch.tensor([[3.0, 4.0]], device="cuda"))
            assert out.tolist() == [3.0, 4.0]
            t = torch.tensor([5.0], device="cuda")
            dist.broadcast(t, src=0)
            assert t.tolist() == [5.0]
            assert dist.get_backend(dist.new_group([0], backend="nccl")) == "gloo"
        finally:
            dist.destroy_process_group()
    assert (dist.init_process_group, dist.all_gather, dist.distributed_c10d.new_group,
            torch.nn.parallel.DistributedDataParallel.__init__) == originals
    assert dist.is_nccl_available() is native_nccl  # torch's own answer again


def test_a_translated_ddp_module_frees_its_group_last_from_python(on_target):
    import pickle

    from torchdevice.distributed.wrappers import LAST_GROUP_REFERENCE, LastGroupReference

    with torchdevice.patched():
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        try:
            ddp = torch.nn.parallel.DistributedDataParallel(nn.Linear(3, 1).cuda())
        finally:
            dist.destroy_process_group()
    keys = list(vars(ddp))
    # after the reducer and the logger (both hold the group in C++): freeing the module drops them first
    assert keys.index(LAST_GROUP_REFERENCE) > max(keys.index("reducer"), keys.index("logger"))
    kept = vars(ddp)[LAST_GROUP_REFERENCE]
    assert kept.group is ddp.process_group and kept.group is not None
    assert pickle.loads(pickle.dumps(kept)).group is None and isinstance(kept, LastGroupReference)
    del ddp  # the group is freed here, after its destroy_process_group, as at the end of a program's main


#: a DDP program that destroys its group and returns from main; DDP's reference cycle keeps the module
#: (and the group its reducer holds) alive after main; the callback says when Python frees it. No automatic
#: collection runs between main and the exit (one may, by chance, in a real program: then it exits cleanly)
FREED_WHEN = """
import gc, os, sys
import torch, torch.distributed as dist, torch.nn as nn
gc.disable()

class Freed:
    def __del__(self, write=os.write, finalizing=sys.is_finalizing):
        write(2, b"freed while finalizing: %d\\n" % finalizing())

def main():
    dist.init_process_group({backend!r}, store=dist.HashStore(), rank=0, world_size=1)
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 1).to({device!r}))
    ddp(torch.ones(2, 3, device={device!r})).sum().backward()
    dist.destroy_process_group()
    ddp.freed = Freed()

main()
"""


def test_a_translated_gloo_group_registers_the_collection_before_exit(on_cpu, monkeypatch):
    from torchdevice.distributed import teardown

    registered = []
    monkeypatch.setattr(teardown.atexit, "register", registered.append)
    monkeypatch.setattr(teardown, "_registered", False)
    with torchdevice.patched():
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        dist.destroy_process_group()
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        dist.destroy_process_group()
    assert registered == [teardown.collect_before_exit]  # once per process


def test_a_translated_ddp_cycle_is_freed_before_the_interpreter_finalizes(tmp_path):
    # natively, Python's last collection frees it while finalizing: a gloo worker that must take the GIL
    # then is ended by pthread_exit and the process aborts (docs/distributed.md, "An abort at exit after gloo DDP")
    native = run_python(FREED_WHEN.format(backend="gloo", device="cpu"))
    assert native.returncode == 0 and "freed while finalizing: 1" in native.stderr, native
    program = tmp_path / "ddp_cycle.py"
    program.write_text(FREED_WHEN.format(backend="nccl", device="cuda"))
    translated = run_torchdevice("run", "--backend", "cpu", str(program))
    assert translated.returncode == 0 and "freed while finalizing: 0" in translated.stderr, translated


def test_every_catalog_function_has_a_status(on_cpu):
    assert len(tddist.CATALOG) == 56
    statuses = {name: tddist.status(name) for name in tddist.CATALOG}
    for name, (status, note) in statuses.items():
        assert isinstance(status, Status) and note, name
    assert statuses["init_process_group"][0] is Status.TRANSLATED and "'gloo'" in statuses["init_process_group"][1]
    assert statuses["all_reduce"][0] is Status.NATIVE
    assert statuses["split_group"][0] is Status.EMULATED
    assert "uneven" in statuses["all_gather"][1]
    assert tddist.status("torch.distributed.get_backend")[0] is Status.NATIVE
    with pytest.raises(KeyError):
        tddist.status("all_reduce_everything")


def test_status_without_an_engine_is_unsupported(monkeypatch, on_cpu):
    class NoEngine:
        dist_backend = None

    active = torchdevice.router.active()
    monkeypatch.setattr(active, "collectives", NoEngine())
    assert tddist.status("all_reduce")[0] is Status.UNSUPPORTED
    assert tddist.status("init_process_group")[0] is Status.UNSUPPORTED
    assert tddist.status("get_rank")[0] is Status.NATIVE  # no engine needed


# -- two processes on 127.0.0.1 ------------------------------------------------------------------


def _torchrun(program: Path, *args: str) -> Result:
    """``torchrun --nproc-per-node 2 -m torchdevice run PROGRAM ARGS`` on the cpu backend; it must exit 0."""
    result = torchrun(program, *args, timeout=LAUNCH_TIMEOUT, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-6000:]
    return result


@pytest.fixture(scope="module")
def collectives(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    _torchrun(COLLECTIVES, str(out))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_collectives_run_on_gloo_and_look_like_cuda(collectives):
    for rank, r in enumerate(collectives):
        assert (r["rank"], r["world"], r["backend"]) == (rank, 2, "gloo")
        assert r["nccl_available"] is True and r["tensor_device_matches"] is True


def test_all_reduce_values(collectives):
    # rank 0 holds [1, 2, 3], rank 1 holds [2, 4, 6]
    for r in collectives:
        assert r["all_reduce_SUM"] == [3.0, 6.0, 9.0]
        assert r["all_reduce_MAX"] == [2.0, 4.0, 6.0]
        assert r["all_reduce_MIN"] == [1.0, 2.0, 3.0]
        assert r["all_reduce_AVG"] == [1.5, 3.0, 4.5]
        assert r["all_reduce_PRODUCT"] == [2.0, 8.0, 18.0]
        assert r["async_completed"] is True
    assert collectives[0]["reduce"] == [3.0, 6.0, 9.0]


def test_gather_family_values(collectives):
    for r in collectives:
        assert r["all_gather"] == [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]
        assert r["all_gather_uneven"] == [[10.0], [11.0, 11.0]]  # emulated on gloo
        assert r["all_gather_into_tensor"] == [1.0, 2.0, 3.0, 2.0, 4.0, 6.0]
        assert r["all_gather_into_tensor_stacked"] == [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]
        assert r["broadcast"] == [2.0, 4.0, 6.0]


def test_reduce_scatter_values(collectives):
    # rank r sends arange(4) + 100 r: the sum is [100, 102, 104, 106], rank i keeps its half
    assert collectives[0]["reduce_scatter_tensor"] == [100.0, 102.0]
    assert collectives[1]["reduce_scatter_tensor"] == [104.0, 106.0]
    assert collectives[0]["reduce_scatter_tensor_stacked_avg"] == [50.0, 51.0]
    assert collectives[1]["reduce_scatter_tensor_stacked_avg"] == [52.0, 53.0]
    # rank r's list is [r, r + 1]: rank i gets (0 + i) + (1 + i)
    assert collectives[0]["reduce_scatter"] == [1.0, 1.0]
    assert collectives[1]["reduce_scatter"] == [3.0, 3.0]


def test_reduce_ops_gloo_lacks_are_lowered_with_nccls_numbers(collectives):
    """PREMUL_SUM(f): every input times f (in its dtype), then summed; AVG: the mean. Rank r's tensors
    are (r + 1) times rank 0's, unless said otherwise."""
    bf16 = torch.bfloat16
    third = torch.tensor(1 / 3, dtype=bf16)  # NCCL takes the factor in the tensor's dtype
    expected_bf16 = [(torch.tensor(v, dtype=bf16) * third + torch.tensor(2 * v, dtype=bf16) * third).float().item()
                     for v in (3.0, 5.0)]
    for rank, r in enumerate(collectives):
        assert r["premul_all_reduce"] == [1.5, 3.0, 4.5]
        assert r["premul_all_reduce_bf16"] == expected_bf16
        assert r["premul_all_reduce_coalesced"] == [[0.75, 0.75], [2.0]]
        assert r["premul_reduce_scatter_tensor_input"] == [0.0 + 100 * rank, 1.0 + 100 * rank,
                                                          2.0 + 100 * rank, 3.0 + 100 * rank]
        # (arange(4) + 100 r) / 2 summed over r: [50, 51, 52, 53], rank i keeps its half
        assert r["premul_reduce_scatter_tensor"] == [[50.0, 51.0], [52.0, 53.0]][rank]
        assert r["premul_reduce_scatter_single"] == r["premul_reduce_scatter_tensor"]
        assert r["all_gather_single_stacked"] == [[50.0, 51.0], [52.0, 53.0]]
        assert r["premul_reduce_scatter_tensor_coalesced"] == [[[50.0, 51.0], [52.0, 53.0]][rank]] * 2
        assert r["premul_reduce_scatter"] == [[2.0, 2.0], [6.0, 6.0]][rank]  # 2 ((0 + i) + (1 + i))
        assert r["premul_all_reduce_async"] == [1.0, 1.0]
        assert r["avg_reduce_scatter"] == [[0.5, 0.5], [1.5, 1.5]][rank]
        assert r["avg_all_reduce_coalesced"] == [[1.5, 1.5], [4.0]]
        for name, shown in (("reduce", "torch.distributed.reduce"), ("int", "torch.int64")):
            error = r[f"premul_{name}_error"]
            assert error.startswith("UnsupportedError") and shown in error and "PREMUL_SUM" in error, error
            assert "gloo" in error, error


def test_all_to_all_and_point_to_point(collectives):
    # rank s sends (d + 1) copies of 10 s + d to rank d
    assert collectives[0]["all_to_all_uneven"] == [[0.0], [10.0]]
    assert collectives[1]["all_to_all_uneven"] == [[1.0, 1.0], [11.0, 11.0]]
    assert collectives[0]["all_to_all_single"] == [0.0, 10.0]
    assert collectives[1]["all_to_all_single"] == [1.0, 11.0]
    assert collectives[1]["recv"] == [42.0, 43.0]


def test_object_collectives_and_groups(collectives):
    for rank, r in enumerate(collectives):
        assert r["all_gather_object"] == [{"rank": 0, "name": "r0"}, {"rank": 1, "name": "r1"}]
        assert r["broadcast_object_list"] == ["hello from 0", 0]
        assert r["scatter_object_list"] == f"piece{rank}"
        assert r["new_group_backend"] == "gloo" and r["new_group_all_reduce"] == 2.0
        assert r["split_group_size"] == 1 and r["split_group_all_reduce"] == float(rank + 1)
        assert r["mesh_device_type"] == "cpu" and r["mesh_all_reduce"] == 2.0


# -- the DDP example against a hand-ported single-process run ------------------------------------------


class _Net(nn.Module):  # the example's model, hand-ported
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x):
        return self.body(x)


def _single_process_reference(epochs=2, batch=16, world=2, lr=0.05):
    """One process, no DDP: each step trains on both ranks' batches together (the global batch)."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    y = torch.sin(x @ w) + 0.05 * torch.randn(256, 1, generator=g)
    torch.manual_seed(0)
    model = _Net()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for epoch in range(epochs):
        order = torch.randperm(256, generator=torch.Generator().manual_seed(7 + epoch)).tolist()
        shards = [order[r::world] for r in range(world)]  # DistributedSampler(shuffle=True, seed=7)
        for start in range(0, len(shards[0]), batch):
            idx = [i for shard in shards for i in shard[start:start + batch]]
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return model.state_dict(), losses


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    result = _torchrun(EXAMPLE, "--out", str(out))
    ranks = [torch.load(out / f"rank{r}.pt") for r in range(2)]
    return ranks, torch.load(out / "losses.pt"), result.stdout


def test_ddp_ranks_end_identical(ddp_run):
    (rank0, rank1), _, _ = ddp_run
    assert rank0.keys() == rank1.keys()
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name


def test_ddp_matches_single_process_over_the_global_batch(ddp_run):
    (rank0, _), losses, _ = ddp_run
    expected, expected_losses = _single_process_reference()
    for name, value in expected.items():
        torch.testing.assert_close(rank0[name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert len(losses) == len(expected_losses) == 16
    torch.testing.assert_close(losses, torch.tensor(expected_losses), rtol=1e-5, atol=1e-6)
    assert not math.isclose(expected_losses[0], expected_losses[-1])  # it did train
