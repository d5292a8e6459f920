"""A tiny Lightning Fabric training loop written for an NVIDIA GPU (run unmodified by the tests).

    python fabric_train.py --accelerator cuda --devices 1 --precision bf16-mixed

Prints one JSON line: losses, what the forward saw, the accelerator Fabric chose.
"""
import argparse
import json

import lightning as L
import torch

p = argparse.ArgumentParser()
p.add_argument("--accelerator", default="cuda")
p.add_argument("--devices", default="1")
p.add_argument("--precision", default="32-true")
args = p.parse_args()
devices = int(args.devices) if args.devices.isdigit() else args.devices

fabric = L.Fabric(accelerator=args.accelerator, devices=devices, precision=args.precision)
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
print(json.dumps({"accelerator": type(fabric.accelerator).__name__, "device": str(fabric.device),
                  "precision": type(fabric._precision).__name__, "losses": losses, "seen": seen}))
