"""A tiny Lightning training script written for an NVIDIA GPU (run unmodified by the tests).

    python lightning_train.py --accelerator gpu --devices 1 --precision 16-mixed --out DIR

Writes DIR/rank<R>.json: losses, what the forward saw (activation dtype, autocast on for
"cuda"), the accelerator/strategy Lightning chose, and the checkpoint it saved (rank 0).
"""
import argparse
import json
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--accelerator", default="gpu")
p.add_argument("--devices", default="1")
p.add_argument("--precision", default="32-true")
p.add_argument("--out", required=True)
args = p.parse_args()
devices = int(args.devices) if args.devices.isdigit() else args.devices


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, 1)
        self.seen = []
        self.losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        h = self.body(x)
        self.seen.append({"dtype": str(h.dtype), "device": str(h.device),
                          "autocast_cuda": torch.is_autocast_enabled("cuda")})
        loss = torch.nn.functional.mse_loss(self.head(torch.relu(h)).float(), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
model = Net()
trainer = L.Trainer(accelerator=args.accelerator, devices=devices, precision=args.precision, max_steps=3,
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, default_root_dir=args.out)
trainer.fit(model, DataLoader(data, batch_size=16))
ckpt = os.path.join(args.out, "last.ckpt")
trainer.save_checkpoint(ckpt)
scaler = getattr(trainer.precision_plugin, "scaler", None)
result = {
    "rank": trainer.global_rank, "world_size": trainer.world_size, "num_devices": trainer.num_devices,
    "accelerator": type(trainer.accelerator).__name__, "strategy": type(trainer.strategy).__name__,
    "root_device": str(trainer.strategy.root_device),
    "precision_plugin": type(trainer.precision_plugin).__name__,
    "autocast_device": getattr(trainer.precision_plugin, "device", None),
    "scaler_device": getattr(scaler, "_device", None), "scaler_scale": scaler.get_scale() if scaler else None,
    "process_group_backend": (torch.distributed.get_backend() if torch.distributed.is_initialized() else None),
    "cuda_available": torch.cuda.is_available(), "losses": model.losses, "seen": model.seen,
    "param_sum": sum(float(p.detach().double().sum()) for p in model.parameters()),
    "checkpoint": ckpt if trainer.global_rank == 0 else None,
}
with open(os.path.join(args.out, f"rank{trainer.global_rank}.json"), "w") as f:
    json.dump(result, f)
