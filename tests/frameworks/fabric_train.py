"""A tiny Lightning Fabric training loop written for an NVIDIA GPU (run unmodified by the tests).

    python fabric_train.py --accelerator cuda --devices 1 --precision bf16-mixed [--out DIR]

Prints one JSON line (or, with ``--out``, writes DIR/rank<R>.json per process): losses, what the
forward saw, the accelerator and strategy Fabric chose.
"""
import argparse
import json
import os

import lightning as L
import torch

p = argparse.ArgumentParser()
p.add_argument("--accelerator", default="cuda")
p.add_argument("--devices", default="1")
p.add_argument("--precision", default="32-true")
p.add_argument("--strategy", default="auto")
p.add_argument("--out")
args = p.parse_args()
devices = int(args.devices) if args.devices.isdigit() else args.devices

fabric = L.Fabric(accelerator=args.accelerator, devices=devices, strategy=args.strategy, precision=args.precision)
fabric.launch()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
seen = []
net[0].register_forward_hook(lambda mod, inp, out: seen.append(
    {"dtype": str(out.dtype), "autocast_cuda": torch.is_autocast_enabled("cuda")}))
model = net
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = fabric.setup(model, optimizer)
x, y = torch.randn(32, 16, device=fabric.device), torch.randn(32, 1, device=fabric.device)
losses = []
for _step in range(3):
    loss = torch.nn.functional.mse_loss(model(x).float(), y)  # fabric runs the forward under its precision
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
result = json.dumps({"rank": fabric.global_rank, "world_size": fabric.world_size, "strategy": type(fabric.strategy).__name__,
                  "accelerator": type(fabric.accelerator).__name__, "device": str(fabric.device),
                  "precision": type(fabric._precision).__name__, "losses": losses, "seen": seen})
if args.out:
    with open(os.path.join(args.out, f"rank{fabric.global_rank}.json"), "w") as f:
        f.write(result)
else:
    print(result)
