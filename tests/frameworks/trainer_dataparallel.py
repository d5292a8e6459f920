"""transformers.Trainer on every GPU the machine shows, written for NVIDIA GPUs (run unmodified by sim's truth run).

    python trainer_dataparallel.py [--steps 3]

With several GPUs visible, Trainer wraps the model in ``nn.DataParallel`` (``n_gpu > 1``): each step
scatters the batch over the GPUs, runs a replica on each and sums the gradients back onto GPU 0. The
program keeps the global batch at 32 whatever the GPU count (``per_device_train_batch_size`` is 32 over
the count), trains a tiny ``GPT2LMHeadModel`` (from its config, nothing downloaded, dropout off) with
plain SGD over batches in order, and prints each step's loss and the trained weights' sum on stdout: the
numbers one GPU and two give alike, up to the order of float sums (Trainer's own log lines, which hold
timings, are not printed). How it ran (GPU count, the wrapper) goes
to stderr, so ``torchdevice compare`` sets only the numbers side by side.
"""
import json
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, PrinterCallback, Trainer, TrainingArguments

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3
assert torch.cuda.is_available(), "written for NVIDIA GPUs"
gpus = torch.cuda.device_count()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                                   embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
tokens = torch.randint(0, 64, (32 * steps, 16), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": t, "labels": t} for t in tokens]
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=32 // gpus,
                             learning_rate=0.5, optim="sgd", lr_scheduler_type="constant", max_grad_norm=0.0,
                             train_sampling_strategy="sequential", report_to=[], logging_steps=1,
                             save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.remove_callback(PrinterCallback)  # its log lines hold timings; the losses are printed below
    trainer.train()
wrapper = type(trainer.model_wrapped).__name__
print(f"n_gpu {args.n_gpu}, cuda.device_count() {gpus}, model wrapped in {wrapper}", file=sys.stderr)
assert args.n_gpu == gpus and (wrapper == "DataParallel") == (gpus > 1), (args.n_gpu, gpus, wrapper)
print(json.dumps({"losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
                  "param_sum": sum(float(p.detach().double().sum()) for p in model.parameters())}))
