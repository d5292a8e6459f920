"""Run each collective twice, on sim tensors over the group under test and on CPU tensors over a gloo
group (the reference), and save both: ``python -m torch.distributed.run ... collectives_worker.py OUT BACKEND [device_id]``."""
import os
import sys

import torch
import torch.distributed as dist

import torchdevice_sim

torchdevice_sim.load()
out_dir, backend = sys.argv[1], sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
device = torch.device("sim", rank)
torch.sim.set_device(rank)
dist.init_process_group(backend, device_id=device if "device_id" in sys.argv else None)
gloo = dist.new_group(backend="gloo")


def cases(dev, group):
    """name -> result tensors of one collective on `dev` tensors over `group`."""
    base = (torch.arange(6.0) * (rank + 1) - 2).to(dev)
    r = {}
    for op in ("SUM", "MAX", "MIN", "AVG", "PRODUCT"):
        t = base.clone()
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=group)
        r["all_reduce_" + op] = [t]
    t = base.clone()
    dist.all_reduce(t, group=group, async_op=True).wait()
    r["all_reduce_async"] = [t]
    ts = [base.clone(), base[:2] * 5]
    dist.all_reduce_coalesced(ts, group=group)
    r["all_reduce_coalesced"] = ts
    t = base.clone()
    dist.broadcast(t, src=1, group=group)
    r["broadcast"] = [t]
    t = base.clone()
    dist.reduce(t, dst=0, group=group)
    r["reduce"] = [t] if rank == 0 else []
    outs = [torch.empty(6, device=dev) for _ in range(world)]
    dist.all_gather(outs, base, group=group)
    r["all_gather"] = outs
    flat = torch.empty(6 * world, device=dev)
    dist.all_gather_into_tensor(flat, base, group=group)
    r["all_gather_into_tensor"] = [flat]
    mine = torch.empty(3, device=dev)
    dist.reduce_scatter_tensor(mine, base, group=group)
    r["reduce_scatter_tensor"] = [mine]
    mine = torch.empty(3, device=dev)
    dist.reduce_scatter(mine, list(base.split(3)), group=group)
    r["reduce_scatter"] = [mine]
    got = torch.empty(6, device=dev)
    dist.all_to_all_single(got, base, group=group)
    r["all_to_all_single"] = [got]
    even = [torch.empty(3, device=dev) for _ in range(world)]
    dist.all_to_all(even, [base[:3] + peer for peer in range(world)], group=group)
    r["all_to_all"] = even
    sends = [base[: 1 + rank] + peer for peer in range(world)]  # NCCL takes uneven sizes; gloo only through the single form
    uneven = [torch.empty(1 + peer, device=dev) for peer in range(world)]
    if group is gloo:
        flat = torch.empty(sum(t.numel() for t in uneven))
        dist.all_to_all_single(flat, torch.cat(sends), [t.numel() for t in uneven], [t.numel() for t in sends], group=gloo)
        uneven = list(flat.split([t.numel() for t in uneven]))
    else:
        dist.all_to_all(uneven, sends, group=group)
    r["all_to_all_uneven"] = uneven
    gathered = [torch.empty(6, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(base, gathered, dst=0, group=group)
    r["gather"] = gathered or []
    piece = torch.empty(2, device=dev)
    dist.scatter(piece, list((torch.arange(4.0) * 10).to(dev).split(2)) if rank == 0 else None, src=0, group=group)
    r["scatter"] = [piece]
    peer = 1 - rank
    got = torch.empty(6, device=dev)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, base * 3, peer, group), dist.P2POp(dist.irecv, got, peer, group)])
    for w in works:
        w.wait()
    r["isend_irecv"] = [got]
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank}, group=group)
    r["all_gather_object"] = [torch.tensor([o["rank"] for o in objects])]
    dist.barrier(group=group)
    return r


on_sim = cases(device, None)
reference = cases(torch.device("cpu"), gloo)
devices = {name: [str(t.device) for t in ts] for name, ts in on_sim.items()}
torch.save({"sim": {k: [t.cpu() for t in v] for k, v in on_sim.items()}, "reference": reference, "devices": devices,
            "backend": dist.get_backend(), "group": type(dist.group.WORLD).__name__},
           os.path.join(out_dir, f"rank{rank}.pt"))
dist.destroy_process_group()
