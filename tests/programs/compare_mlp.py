"""A small CUDA-written program for `torchdevice compare`: a two-block MLP, a few training steps, losses printed.

``python compare_mlp.py [WIDTH DEPTH STEPS BATCH]`` (default 16 2 3 32; the benchmark runs a bigger one).
"""
import sys

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.proj = nn.Linear(2 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + self.proj(self.act(self.fc(self.norm(x))))


class Net(nn.Module):
    def __init__(self, width=16, depth=2):
        super().__init__()
        self.h = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.head(x)


width, depth, steps, batch = (int(a) for a in (sys.argv[1:] + ["16", "2", "3", "32"][len(sys.argv) - 1:])[:4])
torch.manual_seed(0)
device = torch.device("cuda")
model = Net(width, depth).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(batch, width, device=device)
y = torch.randn(batch, 1, device=device)
for step in range(steps):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
