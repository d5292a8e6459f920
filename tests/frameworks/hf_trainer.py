"""A tiny transformers.Trainer run written for an NVIDIA GPU (run unmodified by the tests).

    python hf_trainer.py fp16|bf16|no [--cpu] [--tf32]

Prints one JSON line: the logged losses, what the forward saw, the device and GPU count
TrainingArguments chose and the Trainer's mixed-precision state.
"""
import json
import sys
import tempfile

import torch
from transformers import Trainer, TrainingArguments

mixed_precision = sys.argv[1]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, 1)
        self.seen = []

    def forward(self, x, labels=None):
        h = self.body(x)
        self.seen.append({"dtype": str(h.dtype), "autocast_cuda": torch.is_autocast_enabled("cuda")})
        out = self.head(torch.relu(h)).float()
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.x, self.y = torch.randn(64, 16, generator=g), torch.randn(64, 1, generator=g)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


torch.manual_seed(0)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, max_steps=3, per_device_train_batch_size=16, learning_rate=0.05,
                             report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
                             fp16=mixed_precision == "fp16", bf16=mixed_precision == "bf16",
                             use_cpu="--cpu" in sys.argv, tf32=True if "--tf32" in sys.argv else None)
    model = Net()
    trainer = Trainer(model=model, args=args, train_dataset=Data())
    trainer.train()
scaler = trainer.accelerator.scaler
print(json.dumps({
    "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h], "seen": model.seen,
    "device": str(args.device), "n_gpu": args.n_gpu, "native_amp": trainer.accelerator.native_amp,
    "scaler_device": getattr(scaler, "_device", None), "fp32_precision": torch.backends.fp32_precision,
}))
