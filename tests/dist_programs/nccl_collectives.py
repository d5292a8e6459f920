"""Collectives written for CUDA + NCCL, one GPU per process (run by tests/distributed/test_nccl_programs.py).

Launched unmodified through ``torchrun --nproc-per-node 2 -m torchdevice run``.
Each rank writes what every call returned to ``OUT/rank{RANK}.json``; the
test compares it with hand-computed values.
"""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist


def main(out_dir):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device(f"cuda:{local_rank}")
    r = {"rank": rank, "world": world}

    r["backend"] = dist.get_backend()
    r["nccl_available"] = dist.is_nccl_available()
    r["tensor_device_matches"] = torch.ones(1, device="cuda").device == torch.device("cuda")

    base = torch.tensor([1.0, 2.0, 3.0], device="cuda") * (rank + 1)
    for op in ("SUM", "MAX", "MIN", "AVG", "PRODUCT"):
        t = base.clone()
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        r[f"all_reduce_{op}"] = t.tolist()
    work = dist.all_reduce(base.clone(), async_op=True)
    work.wait()
    r["async_completed"] = work.is_completed()

    gathered = [torch.empty(3, device=dev) for _ in range(world)]
    dist.all_gather(gathered, base)
    r["all_gather"] = [g.tolist() for g in gathered]

    # uneven sizes: rank i contributes i + 1 elements (NCCL supports it)
    mine = torch.full((rank + 1,), float(rank + 10), device=dev)
    uneven = [torch.empty(i + 1, device=dev) for i in range(world)]
    work = dist.all_gather(uneven, mine, async_op=True)
    work.wait()
    r["all_gather_uneven"] = [u.tolist() for u in uneven]

    flat = torch.empty(3 * world, device="cuda")
    dist.all_gather_into_tensor(flat, base)
    r["all_gather_into_tensor"] = flat.tolist()
    stacked = torch.empty(world, 3, device="cuda")
    dist.all_gather_into_tensor(stacked, base)
    r["all_gather_into_tensor_stacked"] = stacked.tolist()

    src = torch.arange(2.0 * world, device="cuda") + 100 * rank
    out = torch.empty(2, device="cuda")
    dist.reduce_scatter_tensor(out, src)
    r["reduce_scatter_tensor"] = out.tolist()
    out = torch.empty(2, device="cuda")
    dist.reduce_scatter_tensor(out, src.view(world, 2), op=dist.ReduceOp.AVG)
    r["reduce_scatter_tensor_stacked_avg"] = out.tolist()

    out = torch.empty(2, device="cuda")
    dist.reduce_scatter(out, [torch.full((2,), float(rank + i), device="cuda") for i in range(world)])
    r["reduce_scatter"] = out.tolist()

    reduce_ops(r, rank, world)

    b = base.clone() if rank == 1 else torch.zeros(3, device="cuda")
    dist.broadcast(b, src=1)
    r["broadcast"] = b.tolist()

    red = base.clone()
    dist.reduce(red, dst=0)
    if rank == 0:
        r["reduce"] = red.tolist()

    # all_to_all with uneven pieces: rank s sends (d + 1) values s*10 + d to rank d
    inputs = [torch.full((d + 1,), float(rank * 10 + d), device="cuda") for d in range(world)]
    outputs = [torch.empty(rank + 1, device="cuda") for _ in range(world)]
    dist.all_to_all(outputs, inputs)
    r["all_to_all_uneven"] = [o.tolist() for o in outputs]

    a2a = torch.empty(world, device="cuda")
    dist.all_to_all_single(a2a, torch.arange(float(world), device="cuda") + 10 * rank)
    r["all_to_all_single"] = a2a.tolist()

    if rank == 0:
        dist.send(torch.tensor([42.0, 43.0], device="cuda"), dst=1)
    elif rank == 1:
        got = torch.empty(2, device="cuda")
        dist.recv(got, src=0)
        r["recv"] = got.tolist()

    dist.barrier(device_ids=[local_rank])

    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}"})
    r["all_gather_object"] = objs
    lst = [f"hello from {rank}", rank]
    dist.broadcast_object_list(lst, src=0)
    r["broadcast_object_list"] = lst
    scattered = [None]
    dist.scatter_object_list(scattered, [f"piece{i}" for i in range(world)] if rank == 0 else None, src=0)
    r["scatter_object_list"] = scattered[0]

    group = dist.new_group(ranks=list(range(world)), backend="nccl")
    r["new_group_backend"] = dist.get_backend(group)
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t, group=group)
    r["new_group_all_reduce"] = t.item()

    sub = dist.split_group(split_ranks=[[i] for i in range(world)])
    t = torch.full((1,), float(rank + 1), device="cuda")
    dist.all_reduce(t, group=sub)
    r["split_group_size"] = dist.get_world_size(sub)
    r["split_group_all_reduce"] = t.item()

    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cuda", (world,))
    r["mesh_device_type"] = mesh.device_type
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t, group=mesh.get_group())
    r["mesh_all_reduce"] = t.item()

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(r, f)
    dist.barrier()
    dist.destroy_process_group()


def reduce_ops(r, rank, world):
    """NCCL's PREMUL_SUM (FSDP2's gradient divide factor) and AVG on every reduce collective."""
    premul = dist.ReduceOp.PREMUL_SUM
    t = torch.tensor([1.0, 2.0, 3.0], device="cuda") * (rank + 1)
    dist.all_reduce(t, op=premul(0.5))
    r["premul_all_reduce"] = t.tolist()
    t = torch.tensor([3.0, 5.0], device="cuda", dtype=torch.bfloat16) * (rank + 1)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor(1 / 3, device="cuda")))  # a tensor factor
    r["premul_all_reduce_bf16"] = t.float().tolist()
    pair = [torch.ones(2, device="cuda") * (rank + 1), torch.full((1,), 4.0, device="cuda")]
    dist.all_reduce_coalesced(pair, op=premul(0.25))
    r["premul_all_reduce_coalesced"] = [p.tolist() for p in pair]
    src = torch.arange(2.0 * world, device="cuda") + 100 * rank
    out = torch.empty(2, device="cuda")
    dist.reduce_scatter_tensor(out, src, op=premul(0.5))
    r["premul_reduce_scatter_tensor"] = out.tolist()
    r["premul_reduce_scatter_tensor_input"] = src.tolist()  # NCCL leaves the input as it was
    single = torch.empty(2, device="cuda")
    dist.reduce_scatter_single(single, src.view(world, 2), op=premul(0.5))  # FSDP2's call, stacked input
    r["premul_reduce_scatter_single"] = single.tolist()
    stacked = torch.empty(world, 2, device="cuda")
    dist.all_gather_single(stacked, single)
    r["all_gather_single_stacked"] = stacked.tolist()
    dist.reduce_scatter(out, [torch.full((2,), float(rank + i), device="cuda") for i in range(world)], op=premul(2.0))
    r["premul_reduce_scatter"] = out.tolist()
    outs = [torch.empty(2, device="cuda") for _ in range(2)]
    with dist._coalescing_manager(async_ops=False):
        for o in outs:
            dist.reduce_scatter_tensor(o, src, op=premul(0.5))
    r["premul_reduce_scatter_tensor_coalesced"] = [o.tolist() for o in outs]
    work = dist.all_reduce(t := torch.ones(2, device="cuda"), op=premul(0.5), async_op=True)
    work.wait()
    r["premul_all_reduce_async"] = t.tolist()
    dist.reduce_scatter(out, [torch.full((2,), float(rank + i), device="cuda") for i in range(world)],
                        op=dist.ReduceOp.AVG)
    r["avg_reduce_scatter"] = out.tolist()
    pair = [torch.ones(2, device="cuda") * (rank + 1), torch.full((1,), 4.0, device="cuda")]
    dist.all_reduce_coalesced(pair, op=dist.ReduceOp.AVG)
    r["avg_all_reduce_coalesced"] = [p.tolist() for p in pair]
    for name, call in (("reduce", lambda: dist.reduce(torch.ones(2, device="cuda"), 0, op=premul(0.5))),
                       ("int", lambda: dist.all_reduce(torch.ones(2, device="cuda", dtype=torch.int64), op=premul(2)))):
        try:
            call()
            r[f"premul_{name}_error"] = None
        except NotImplementedError as exc:  # torchdevice.UnsupportedError is one
            r[f"premul_{name}_error"] = f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    main(sys.argv[1])
