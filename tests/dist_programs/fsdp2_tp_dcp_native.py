"""The hand port of ``fsdp2_tp_dcp.py`` to CPU + gloo, run natively: ``torchrun --nproc-per-node 2
fsdp2_tp_dcp_native.py OUT [--load CKPT]`` (tests/distributed/test_fsdp2_tp_dcp.py compares it with the
CUDA program run through torchdevice).

What the port changes: ``cuda`` -> ``cpu``, ``nccl`` -> ``gloo``, no ``set_device``, and the
gradient divide factor: gloo has no ``ReduceOp.PREMUL_SUM``, so FSDP2 is told to sum and then
divide by the factor (``set_force_sum_reduction_for_comms``): equal to NCCL's "multiply by 1/4,
then sum" bit for bit because 4 is a power of two. ``--load CKPT`` also loads a checkpoint the
translated program saved into a fresh model (``dcp_loaded_from_translated``).

* FSDP2 with bf16 ``MixedPrecisionPolicy`` (fp32 reduce) and ``set_gradient_divide_factor(4.0)``:
  NCCL reduce-scatters with ``ReduceOp.PREMUL_SUM(0.25)``;
* AdamW and ``clip_grad_norm_`` over the DTensor gradients;
* the full state dict gathered from the DTensor shards, and AdamW's (``get_state_dict``);
* DCP save, then load into a freshly sharded model; model + optimizer saved and loaded back
  (``get_state_dict``/``set_state_dict``);
* tensor parallel (``ColwiseParallel``/``RowwiseParallel``) and DTensor ``Shard``/``Replicate``.
No random op runs on a DTensor; data and weights come from a CPU generator.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

STEPS = 4


def model() -> nn.Module:
    torch.manual_seed(0)  # weights made on the host, then moved: the same on every rank and machine
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))


def batches(rank: int) -> list:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)) for _ in range(STEPS)]


def sharded(mesh) -> nn.Module:
    m = model()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in (m[0], m[2], m[4]):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(m, mesh=mesh, mp_policy=policy)
    for layer in (m[0], m[2], m[4]):  # each fully_shard module's own parameters (the root holds none)
        layer.set_gradient_divide_factor(4.0)
        layer.set_force_sum_reduction_for_comms(True)  # gloo: SUM, then divide by 4
    return m


def full(state: dict) -> dict:
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu() for k, v in state.items()}


def train_fsdp(mesh, rank: int, out: dict) -> tuple:
    m = sharded(mesh)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses, norms = [], []
    for x, y in batches(rank):
        loss = (m(x).float() - y).pow(2).mean()
        loss.backward()
        norms.append(nn.utils.clip_grad_norm_(m.parameters(), 0.5).full_tensor().cpu())
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().cpu())
    out["fsdp_losses"] = torch.stack(losses)
    out["fsdp_grad_norms"] = torch.stack(norms)
    out["fsdp_full_state"] = full(m.state_dict())
    out["fsdp_optim_state"] = optim_state(m, opt)
    return m, opt


def optim_state(m: nn.Module, opt) -> dict:
    """AdamW's state, gathered whole (``get_state_dict`` with ``full_state_dict``), tensors only."""
    _, state = get_state_dict(m, opt, options=StateDictOptions(full_state_dict=True))  # on every rank
    return {f"{fqn}.{k}": v.detach().cpu() for fqn, entry in state["state"].items() for k, v in entry.items()}


def dcp_round_trip(m: nn.Module, opt, mesh, ckpt: str, out: dict) -> None:
    model_state, optim = get_state_dict(m, opt)
    dcp.save({"model": model_state, "optim": optim}, checkpoint_id=ckpt + "_with_optim")
    model_state, optim = get_state_dict(m, opt)
    dcp.load({"model": model_state, "optim": optim}, checkpoint_id=ckpt + "_with_optim")
    set_state_dict(m, opt, model_state_dict=model_state, optim_state_dict=optim)
    out["dcp_optim_state"] = optim_state(m, opt)
    dcp.save(m.state_dict(), checkpoint_id=ckpt)
    fresh = sharded(mesh)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=ckpt)
    fresh.load_state_dict(state)
    out["dcp_loaded_state"] = full(fresh.state_dict())


def tensor_parallel(mesh, rank: int, out: dict) -> None:
    m = model()
    parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    losses = []
    for x, y in batches(0):  # the same batch on both ranks, as TP wants
        loss = (m[:3](x) - y.repeat(1, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().cpu())
    out["tp_losses"] = torch.stack(losses)
    out["tp_full_state"] = full(m.state_dict())
    big = torch.arange(24.0, device="cpu").reshape(4, 6)
    d = distribute_tensor(big, mesh, [Shard(0)])
    out["dtensor_local_shard"] = d.to_local().cpu()
    out["dtensor_replicated_sum"] = (d.redistribute(mesh, [Replicate()]) * (rank + 1)).to_local().sum().cpu()
    out["dtensor_matmul"] = (d @ distribute_tensor(big.T.contiguous(), mesh, [Replicate()])).full_tensor().cpu()


def load_translated(mesh, ckpt: str, out: dict) -> None:
    fresh = sharded(mesh)
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=ckpt)
    fresh.load_state_dict(state)
    out["dcp_loaded_from_translated"] = full(fresh.state_dict())


def main(out_dir: str, load: str | None) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    out: dict = {}
    m, opt = train_fsdp(mesh, rank, out)
    dcp_round_trip(m, opt, mesh, os.path.join(out_dir, "ckpt"), out)
    tensor_parallel(mesh, rank, out)
    if load is not None:
        load_translated(mesh, load, out)
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3] if sys.argv[2:3] == ["--load"] else None)
