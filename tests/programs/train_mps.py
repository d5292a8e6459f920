"""A small training loop written for Apple's GPU (MPS), as people write it: not written for torchdevice.

Checks MPS is there, seeds torch.mps, draws its data on the device, trains under float16 autocast,
times the loop with MPS events, reads the memory MPS reports and round-trips the MPS RNG state.
Prints one JSON line.
"""
import json
import sys

import torch
from torch import nn

if not torch.backends.mps.is_available():
    raise SystemExit("this program needs an Apple GPU (MPS)")
device = torch.device("mps")
torch.manual_seed(0)
torch.mps.manual_seed(0)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4)).to("mps")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 16, device=device)  # drawn by the device's own generator
y = torch.randint(0, 4, (64,), device="mps")
start, end = torch.mps.Event(enable_timing=True), torch.mps.Event(enable_timing=True)
losses = []
start.record()
for _ in range(5):
    opt.zero_grad()
    with torch.autocast(device_type="mps", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x).float(), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
end.record()
torch.mps.synchronize()

state = torch.mps.get_rng_state()
draw = torch.rand(3, device="mps")
torch.mps.set_rng_state(state)
redraw = torch.rand(3, device="mps")
model.eval()
accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
allocated = torch.mps.current_allocated_memory()
driver = torch.mps.driver_allocated_memory()
torch.mps.empty_cache()
json.dump({
    "losses": losses,
    "accuracy": accuracy,
    "memory_bytes": allocated,
    "driver_bytes": driver,
    "rng_draw": draw.tolist(),
    "rng_redraw": redraw.tolist(),
    "elapsed_ms": start.elapsed_time(end),
}, sys.stdout)
