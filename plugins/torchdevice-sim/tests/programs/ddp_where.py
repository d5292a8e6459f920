"""Written for CUDA: where DDP's parameters live on each rank, and which engine carries them (saved per rank as JSON)."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
model = DDP(torch.nn.Linear(4, 2).cuda(), device_ids=[local_rank])
model(torch.ones(3, 4, device="cuda")).sum().backward()
report = {
    "param_device": str(next(model.parameters()).device),
    "grad_device": str(next(model.parameters()).grad.device),
    "current_device": torch.cuda.current_device(),
    "allocated": [torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count())],
    "backend": dist.get_backend(),
}
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
