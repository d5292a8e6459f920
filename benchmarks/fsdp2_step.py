"""The FSDP2 training step timed by bench_fsdp2.py, launched by torchrun with 2 ranks.

``--device cuda --backend nccl`` is the program as written for CUDA (run through
``torchdevice run``); ``--device cpu --backend gloo`` is its native CPU port, where gloo's
lack of ``PREMUL_SUM`` makes FSDP2 sum and then divide (``set_force_sum_reduction_for_comms``).
Rank 0 prints ``STEP_SECONDS <median>`` over the timed steps.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    mesh = init_device_mesh(args.device, (dist.get_world_size(),))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(args.width, args.width), nn.GELU()) for _ in range(4)])
    model = model.to(args.device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for block in model:  # each fully_shard module's own parameters (the root holds none)
        block.set_gradient_divide_factor(4.0)
        if args.backend == "gloo":
            block.set_force_sum_reduction_for_comms(True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(64, args.width, generator=torch.Generator().manual_seed(dist.get_rank())).to(args.device)
    times = []
    for step in range(args.steps + 5):
        start = time.perf_counter()
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if step >= 5:  # the first steps warm allocators and gloo's buffers
            times.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        print(f"STEP_SECONDS {statistics.median(times)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
