"""A short training loop in CUDA style (device, seeds, events, memory figures) through torchdevice's API.

Run by ``scripts/demo.sh``; it runs on whatever backend torchdevice selects.
"""
import torch
from torch import nn

import torchdevice as td

print(f"backend: {td.current_backend()} ({td.get_device_name()}), {td.device_count()} device(s)")
device = torch.device(td.device_type(), td.current_device())

td.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(512, 64, device=device)
y = (x @ torch.randn(64, 10, device=device)).argmax(dim=1)  # a learnable labelling

td.reset_peak_memory_stats()
start, end = td.Event(enable_timing=True), td.Event(enable_timing=True)
start.record()
losses = []
for step in range(60):
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
end.record()
td.synchronize()

print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} in 60 steps, {start.elapsed_time(end):.1f} ms")
print(f"memory allocated {td.memory_allocated() / 2**20:.0f} MiB, peak {td.max_memory_allocated() / 2**20:.0f} MiB")
assert losses[-1] < 0.7 * losses[0], "the model did not learn"
