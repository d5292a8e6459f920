"""A CUDA-first profiling snippet, as the PyTorch profiler tutorial writes it.

Asks for CPU and CUDA activities, runs a few matmuls, prints the table's op names as JSON.
"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(64, 64, device=device)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
    for _ in range(3):
        y = x @ x
    if device == "cuda":
        torch.cuda.synchronize()
table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=5)
json.dump({"device": device, "has_table": "aten::matmul" in table,
           "ops": sorted({e.key for e in prof.key_averages() if e.key.startswith("aten::")})}, sys.stdout)
