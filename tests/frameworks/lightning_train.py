"""A tiny Lightning training script written for an NVIDIA GPU (run unmodified by the tests).

    python lightning_train.py --accelerator gpu --devices 1 --precision 16-mixed [--strategy ddp] --out DIR [--oracle]

Writes DIR/rank<R>.json: losses, what the forward saw (activation dtype, autocast on for
"cuda"), the accelerator/strategy Lightning chose; and DIR/checkpoint.json: the checkpoint it saved
(rank 0, after ``fit``) with the sum of the weights saved.
``--oracle`` runs the same single-device loop hand-ported to plain torch on the CPU
(``autocast("cpu", dtype)``, ``GradScaler("cpu")`` for 16-mixed), no Lightning: the native reference
for 16-mixed, which Lightning's own CPU accelerator runs as bfloat16.
"""
import argparse
import json
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accelerator", default="gpu")
    p.add_argument("--devices", default="1")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--strategy", default="auto")
    p.add_argument("--out", required=True)
    p.add_argument("--oracle", action="store_true")
    args = p.parse_args()
    devices = int(args.devices) if args.devices.isdigit() else args.devices
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
    model = Net()
    if args.oracle:
        dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(args.precision)
        optimizer = model.configure_optimizers()
        scaler = torch.amp.GradScaler("cpu", enabled=dtype is torch.float16)
        for batch_idx, batch in zip(range(3), DataLoader(data, batch_size=16)):
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = model.training_step(batch, batch_idx)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        result = {"losses": model.losses, "seen": model.seen, "param_sum": param_sum(model),
                  "scaler_scale": scaler.get_scale() if scaler.is_enabled() else None}
        with open(os.path.join(args.out, "rank0.json"), "w") as f:
            json.dump(result, f)
        return
    trainer = L.Trainer(accelerator=args.accelerator, devices=devices, strategy=args.strategy, precision=args.precision,
                        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=args.out, callbacks=[Record(args.out)])
    trainer.fit(model, DataLoader(data, batch_size=16))
    ckpt = os.path.join(args.out, "last.ckpt")
    trainer.save_checkpoint(ckpt)  # every rank calls it (a barrier); rank 0 writes
    if trainer.global_rank == 0:  # with ddp_spawn: the main process, holding the trained weights
        with open(os.path.join(args.out, "checkpoint.json"), "w") as f:
            json.dump({"checkpoint": ckpt, "param_sum": param_sum(model), "global_step": trainer.global_step}, f)


def param_sum(model):
    return sum(float(p.detach().double().sum()) for p in model.parameters())


class Record(L.Callback):
    """Writes what each training process saw (with ddp_spawn, the spawned processes train)."""

    def __init__(self, out):
        self.out = out

    def on_train_end(self, trainer, model):
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        result = {
            "rank": trainer.global_rank, "world_size": trainer.world_size, "num_devices": trainer.num_devices,
            "accelerator": type(trainer.accelerator).__name__, "strategy": type(trainer.strategy).__name__,
            "root_device": str(trainer.strategy.root_device),
            "precision_plugin": type(trainer.precision_plugin).__name__,
            "autocast_device": getattr(trainer.precision_plugin, "device", None),
            "scaler_device": getattr(scaler, "_device", None), "scaler_scale": scaler.get_scale() if scaler else None,
            "process_group_backend": (torch.distributed.get_backend() if torch.distributed.is_initialized() else None),
            "cuda_available": torch.cuda.is_available(), "device_count": torch.cuda.device_count(),
            "losses": model.losses, "seen": model.seen, "param_sum": param_sum(model),
        }
        with open(os.path.join(self.out, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(result, f)

if __name__ == "__main__":  # strategy="ddp_spawn" imports this module in its processes
    main()
