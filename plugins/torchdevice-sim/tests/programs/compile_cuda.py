"""Written for CUDA: tests/programs/compile_train.py's compiled training loop, its data made on the host so that
sim and the CPU backend train on the same numbers (flex_attention is test_sim_compile's own test); prints the
device and the losses as JSON."""
import json
import sys

import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


model = Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(model)
x = torch.randn(64, 16).to(device)
y = torch.randint(0, 4, (64,)).to(device)
losses = []
for _ in range(5):
    opt.zero_grad()
    loss = F.cross_entropy(step(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
json.dump({"device": str(x.device), "losses": losses}, sys.stdout)
