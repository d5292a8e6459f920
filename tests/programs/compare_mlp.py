"""A small CUDA-written program for `torchdevice compare`: a two-block MLP, a few training steps, losses printed."""
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


torch.manual_seed(0)
device = torch.device("cuda")
model = Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(32, 16, device=device)
y = torch.randn(32, 1, device=device)
for step in range(3):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
