"""simccl, sim's process group (gloo on host views of sim memory), and torch.cuda.comm translated onto sim.

Every check compares with a reference run: the same collectives on CPU tensors over torch's own gloo
group, a single-process training run, or the definition of the comm function computed on the CPU.
"""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch
import torch.distributed as dist


def test_register_is_idempotent_and_claims_only_sim(sim):
    from torchdevice_sim import distributed

    before = list(dist.Backend.backend_list)
    distributed.register()
    assert dist.Backend.backend_list == before and before.count("simccl") == 1
    assert dist.Backend.default_device_backend_map["sim"] == "simccl"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # CPU programs keep gloo
    assert set(dist.Backend.backend_capability["simccl"]) == {"sim", "cpu"}


def test_foreign_device_tensors_are_refused_with_a_clear_error(sim):
    from torchdevice_sim import distributed

    with pytest.raises(ValueError, match="simccl carries sim and cpu tensors, not meta"):
        distributed.staged([torch.empty(2, device="meta")])


@pytest.mark.parametrize("backend, device_id", [("simccl", True), ("cpu:gloo,sim:simccl", False)])
def test_collectives_match_gloo_on_cpu(runner, tmp_path, backend, device_id):
    """Each collective on sim tensors over simccl gives gloo's result on the same values on the CPU."""
    runner.torchrun([str(runner.programs / "collectives_worker.py"), str(tmp_path), backend] + (["device_id"] if device_id else []))
    for rank in (0, 1):
        saved = torch.load(tmp_path / f"rank{rank}.pt")
        assert saved["backend"] == backend and saved["group"] == "SimProcessGroup"
        assert saved["sim"].keys() == saved["reference"].keys() and len(saved["sim"]) >= 20
        for name, results in saved["sim"].items():
            reference = saved["reference"][name]
            assert len(results) == len(reference), name
            for got, want in zip(results, reference):
                assert got.dtype == want.dtype and torch.equal(got, want), (rank, name, got, want)
            if name != "all_gather_object":
                assert set(saved["devices"][name]) <= {f"sim:{rank}"}, (rank, name, saved["devices"][name])


def _load_example(path):
    spec = importlib.util.spec_from_file_location("ddp_train_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _single_process_reference(example, epochs, batch, lr, world=2):
    """examples/ddp_train.py's training on one CPU process: each step on the union of the ranks' batches."""
    from torch.utils.data import DataLoader, DistributedSampler

    torch.manual_seed(0)
    model = example.Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    dataset = example.make_dataset()
    samplers = [DistributedSampler(dataset, num_replicas=world, rank=r, shuffle=True, seed=7) for r in range(world)]
    losses = []
    for epoch in range(epochs):
        for s in samplers:
            s.set_epoch(epoch)
        for parts in zip(*(DataLoader(dataset, batch_size=batch, sampler=s) for s in samplers)):
            x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)  # equal batches: the mean of the ranks' means
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return model.state_dict(), torch.tensor(losses)


def test_translated_cuda_ddp_matches_single_process(runner, tmp_path):
    """examples/ddp_train.py (NCCL, DDP) on 2 ranks translated onto sim: ranks agree, and match one process."""
    example = runner.repo / "examples" / "ddp_train.py"
    runner.torchrun(["-m", "torchdevice", "run", str(example), "--out", str(tmp_path), "--epochs", "1"], backend="sim")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    reference, reference_losses = _single_process_reference(_load_example(example), epochs=1, batch=16, lr=0.05)
    for name, value in reference.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        torch.testing.assert_close(ranks[0][name], value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.load(tmp_path / "losses.pt"), reference_losses, rtol=1e-5, atol=1e-6)


def test_translated_ddp_ranks_use_their_own_sim_device(runner, tmp_path):
    runner.torchrun(["-m", "torchdevice", "run", str(runner.programs / "ddp_where.py"), str(tmp_path)], backend="sim")
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["param_device"] == report["grad_device"] == f"sim:{rank}"
        assert report["current_device"] == rank and report["backend"] == "simccl"
        assert report["allocated"][rank] > 0 and report["allocated"][1 - rank] == 0, report["allocated"]


def test_translated_cuda_comm_on_sim(runner):
    """torch.cuda.comm translated onto sim: the values of the functions' definitions, on the devices asked for."""
    done = runner.run(["-m", "torchdevice", "run", str(runner.programs / "comm_cuda.py")], backend="sim")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    x, one, two, ten = torch.arange(6.0).reshape(3, 2), torch.arange(4.0), torch.arange(4.0) * 10, torch.arange(10.0)
    expected = {
        "broadcast": [["sim:0", x.tolist()], ["sim:1", x.tolist()]],
        "reduce_add": [["sim:1", (one + two).tolist()]],
        "scatter": [["sim:0", ten[:3].tolist()], ["sim:1", ten[3:].tolist()]],
        "gather": [["sim:1", torch.cat([one, two]).tolist()]],
        "gather_host": [["cpu", torch.cat([one, two]).tolist()]],
    }
    assert got == expected


def test_dtensor_random_ops_use_sims_philox_offsets(synced, tmp_path):
    """torch.distributed.tensor's RNG tracker reads the device's state as CUDA's (seed, offset) and moves the
    offset past the whole DTensor's elements; a single rank (world size 1), the tracker's whole protocol."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("simccl", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("sim", (1,))
        draws = []
        for _ in range(2):
            torch.manual_seed(5)
            tensor = distribute_tensor(torch.empty(10, 6, device="sim"), mesh, [Shard(0)])
            torch.nn.init.normal_(tensor)
            offset = int(synced.get_rng_state()[8:].view(torch.int64))
            dropped = torch.nn.functional.dropout(tensor, 0.5)
            draws.append((tensor.to_local().cpu(), dropped.to_local().cpu()))
        assert offset == 60  # the tracker's own rule: the DTensor's 60 elements, rounded up to a multiple of 4
        assert torch.equal(draws[0][0], draws[1][0]) and torch.equal(draws[0][1], draws[1][1])
        assert 0 < int((draws[0][1] == 0).sum()) < 60
    finally:
        dist.destroy_process_group()
