"""A CUDA-written program whose whole runs differ between backends while no op does: dropout draws from
the device's generator, and bf16 autocast follows the device's op lists (tests/test_compare.py)."""
import torch
import torch.nn as nn

targets = torch.tensor([[0.5], [-0.5], [1.0], [0.0]], device="cuda")  # copied with the Python key skipped


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.drop(self.fc(x))
        return self.head(h * torch.softmax(h, dim=-1))


torch.manual_seed(0)
model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(4, 8, device="cuda")
for step in range(2):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = (out.float() - targets).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
