"""A CUDA-first training loop with torch.compile, as people write it (not written for torchdevice).

Picks "cuda" when torch says it is there, gates TF32/bf16 on the compute capability, compiles
the model and a flex_attention call, and prints the losses as JSON. Run natively on a machine
without CUDA it takes its CPU path: that is the native port the translated run is compared with.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
    torch.backends.cuda.matmul.allow_tf32 = True
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
x = torch.randn(64, 16, device=device)
y = torch.randint(0, 4, (64,), device=device)
losses = []
for _ in range(5):
    opt.zero_grad()
    loss = F.cross_entropy(step(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())

q, k, v = (torch.randn(1, 2, 16, 8, device=device) for _ in range(3))
attention = torch.compile(flex_attention)(q, k, v)
reference = F.scaled_dot_product_attention(q, k, v)
json.dump({
    "device": device,
    "losses": losses,
    "flex_max_error": (attention - reference).abs().max().item(),
}, sys.stdout)
