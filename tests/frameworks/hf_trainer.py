"""A tiny transformers.Trainer run written for an NVIDIA GPU (run unmodified by the tests).

    python hf_trainer.py fp16|bf16|no [--cpu] [--tf32] [--plain [--oracle]] [--gpt2]

Prints one JSON line: the logged losses, what the forward saw, the device and GPU count
TrainingArguments chose and the Trainer's mixed-precision state. ``--plain`` trains with SGD at a
constant learning rate, no gradient clipping, batches in order; ``--plain --oracle`` is that loop
hand-ported to plain torch on the CPU (``autocast("cpu", dtype)``, ``GradScaler("cpu")`` for fp16),
no transformers: the native reference for fp16, which the Trainer has no CPU path for.
``--gpt2`` trains a real transformers model instead, a tiny ``GPT2LMHeadModel`` built from its config
(nothing downloaded): what runs through transformers' own model code (attention masks, ``is_tracing()``),
"seen" recorded by a forward hook on its first MLP layer.
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


plain = "--plain" in sys.argv
torch.manual_seed(0)
if "--oracle" in sys.argv:
    assert plain, "--oracle is the hand port of --plain"
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(mixed_precision)
    model, data = Net(), Data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", enabled=dtype is torch.float16)
    losses = []
    for step in range(3):
        batch = {"x": data.x[16 * step:16 * step + 16], "labels": data.y[16 * step:16 * step + 16]}
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = model(**batch)["loss"]
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        losses.append(loss.item())
    print(json.dumps({"losses": losses, "seen": model.seen, "scaler_scale": scaler.get_scale() if scaler.is_enabled() else None,
                      "param_sum": sum(float(p.detach().double().sum()) for p in model.parameters())}))
    raise SystemExit(0)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, max_steps=3, per_device_train_batch_size=16, learning_rate=0.05,
                             report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
                             fp16=mixed_precision == "fp16", bf16=mixed_precision == "bf16",
                             use_cpu="--cpu" in sys.argv, tf32=True if "--tf32" in sys.argv else None,
                             **(dict(optim="sgd", lr_scheduler_type="constant", max_grad_norm=0.0,
                                     train_sampling_strategy="sequential") if plain else {}))
    if "--gpt2" in sys.argv:
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
        model.seen = []
        model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda mod, inp, out: model.seen.append(
            {"dtype": str(out.dtype), "autocast_cuda": torch.is_autocast_enabled("cuda")}))
        tokens = torch.randint(0, 64, (64, 16), generator=torch.Generator().manual_seed(1))
        data = [{"input_ids": t, "labels": t} for t in tokens]
    else:
        model, data = Net(), Data()
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
scaler = trainer.accelerator.scaler
print(json.dumps({
    "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h], "seen": model.seen,
    "device": str(args.device), "n_gpu": args.n_gpu, "native_amp": trainer.accelerator.native_amp,
    "scaler_device": getattr(scaler, "_device", None), "scaler_scale": scaler.get_scale() if scaler else None,
    "fp32_precision": torch.backends.fp32_precision,
    "param_sum": sum(float(p.detach().double().sum()) for p in model.parameters()),
}))
