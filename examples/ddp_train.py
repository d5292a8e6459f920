"""Data-parallel training written for NVIDIA GPUs: one process per GPU, NCCL, DDP.

Plain PyTorch, nothing torchdevice-specific. On a CUDA machine::

    torchrun --nproc-per-node 2 examples/ddp_train.py --out /tmp/ddp

On any other machine (CPU here, MPS, XPU, MLX ...), unmodified::

    torchrun --nproc-per-node 2 -m torchdevice run examples/ddp_train.py --out /tmp/ddp

Every rank writes its final parameters to ``OUT/rank{RANK}.pt`` and rank 0
writes the per-step losses (averaged over ranks) to ``OUT/losses.pt``.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(nn.Module):
    def __init__(self, features=16, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.body(x)


def make_dataset(n=256, features=16, seed=1234):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = torch.sin(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="per GPU")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    assert torch.cuda.is_available() and local_rank < torch.cuda.device_count(), "one GPU per process"

    torch.manual_seed(0)
    model = Net().to(device)
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.MSELoss()

    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, pin_memory=True)

    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.cuda(non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            reported = loss.detach().clone()
            dist.all_reduce(reported, op=dist.ReduceOp.AVG)
            losses.append(reported.item())
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.6f}", flush=True)

    # every rank must hold the same parameters: check it the NCCL way
    flat = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(gathered[0], g) for g in gathered), "ranks disagree"

    os.makedirs(args.out, exist_ok=True)
    state = {k: v.cpu() for k, v in model.module.state_dict().items()}
    torch.save(state, os.path.join(args.out, f"rank{rank}.pt"))
    if rank == 0:
        torch.save(torch.tensor(losses), os.path.join(args.out, "losses.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
