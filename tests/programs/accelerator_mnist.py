"""pytorch/examples' mnist written the device-agnostic way (torch.accelerator), small and seeded.

Natively on a machine without an accelerator it takes its CPU branch; translated it must take its
accelerator branch (``device`` is ``cuda``) and give the same numbers. ``--compile`` also runs a step
through ``torch.compile`` (inductor, dynamo: torch's machinery that asks torch.accelerator itself).
Prints one JSON line.
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

use_accel = torch.accelerator.is_available()
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
torch.manual_seed(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.fc1 = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.log_softmax(self.fc1(torch.flatten(x, 1)), dim=1)


model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(16, 1, 28, 28)
target = torch.randint(0, 10, (16,))
losses = []
for _ in range(3):
    x, y = data.to(device), target.to(device)
    optimizer.zero_grad()
    loss = F.nll_loss(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
if use_accel:
    torch.accelerator.synchronize()


def evaluate(x):
    return model(x).exp().sum()


compiled = torch.compile(evaluate) if "--compile" in sys.argv else evaluate
with torch.no_grad():
    out = compiled(data.to(device)).item()
print(json.dumps({
    "accelerator": use_accel, "device": str(device), "device_type": device.type, "losses": losses, "evaluated": out,
    "device_count": torch.accelerator.device_count(),
    "allocated": torch.accelerator.memory_allocated() if use_accel else None,
}))
