"""A tiny accelerate training loop written for an NVIDIA GPU (run unmodified by the tests).

    python accelerate_train.py fp16|bf16|no [--cpu] [--oracle]

Prints one JSON line. ``--cpu`` is accelerate's own CPU run (``Accelerator(cpu=True)``);
``--oracle`` is the same loop hand-ported to plain torch on the CPU (autocast("cpu", dtype) and
GradScaler("cpu") for fp16), the native reference for fp16, which accelerate has no CPU path for.
"""
import json
import sys

import torch

mixed_precision = sys.argv[1]
cpu, oracle = "--cpu" in sys.argv, "--oracle" in sys.argv


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, 1)
        self.seen = []

    def forward(self, x):
        h = self.body(x)
        self.seen.append({"dtype": str(h.dtype), "autocast_cuda": torch.is_autocast_enabled("cuda")})
        return self.head(torch.relu(h))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(16, 16, generator=g), torch.randn(16, 1, generator=g)) for _ in range(4)]
losses, info = [], {}
if oracle:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(mixed_precision)
    scaler = torch.amp.GradScaler("cpu", enabled=mixed_precision == "fp16")
    for x, y in batches:
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        losses.append(loss.item())
else:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=mixed_precision, cpu=cpu)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x, y in batches:
        x, y = x.to(accelerator.device), y.to(accelerator.device)
        out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    scaler = accelerator.scaler
    info = {"device": str(accelerator.device), "native_amp": accelerator.native_amp,
            "scaler_device": getattr(scaler, "_device", None), "scaler_scale": scaler.get_scale() if scaler else None}
    model = accelerator.unwrap_model(model)
print(json.dumps({"losses": losses, "seen": model.seen, **info}))
