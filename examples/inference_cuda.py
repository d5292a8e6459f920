"""Batch inference with a small CNN in float16 autocast; written for an NVIDIA GPU.

Loads weights from a checkpoint with ``map_location="cuda:0"``, feeds batches
through a pinned-memory DataLoader with ``non_blocking`` copies, runs under
``torch.inference_mode()`` and ``torch.autocast("cuda", dtype=torch.float16)``,
times the run with CUDA events and reports the device and its memory.

    python examples/inference_cuda.py --out result.json          # on a GPU
    torchdevice run examples/inference_cuda.py --out result.json  # anywhere

The explicit ``dtype=torch.float16`` is honoured on every backend whose
autocast supports it (the CPU's does). ``examples/ported/inference_cpu.py`` is
the hand port; the predictions and logits agree.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("INFERENCE_OUT"))
    return p.parse_args(argv)


def pretrained_checkpoint(directory: str, seed: int) -> str:
    """Stand-in for downloaded weights: a checkpoint saved from a GPU."""
    torch.manual_seed(seed)
    model = SmallNet().cuda()
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
    path = os.path.join(directory, "smallnet.pt")
    torch.save(model.state_dict(), path)
    return path


def main(argv=None) -> dict:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("this script needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda:0")

    with tempfile.TemporaryDirectory() as tmp:
        state = torch.load(pretrained_checkpoint(tmp, args.seed), map_location="cuda:0")
    model = SmallNet().to(device).eval()
    model.load_state_dict(state)

    g = torch.Generator().manual_seed(args.seed + 1)
    images = torch.rand(args.images, 3, 32, 32, generator=g)
    loader = DataLoader(TensorDataset(images), batch_size=args.batch_size, pin_memory=True)

    torch.cuda.reset_peak_memory_stats(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    predictions, confidences, logits_sum = [], [], 0.0
    start.record()
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
        for (batch,) in loader:
            batch = batch.cuda(non_blocking=True)
            logits = model(batch)
            probs = logits.float().softmax(dim=-1)
            confidence, predicted = probs.max(dim=-1)
            predictions += predicted.cpu().tolist()
            confidences += confidence.cpu().tolist()
            logits_sum += logits.double().sum().item()
            logits_dtype = str(logits.dtype)
    end.record()
    torch.cuda.synchronize(device)
    elapsed_ms = start.elapsed_time(end)
    properties = torch.cuda.get_device_properties(device)
    result = {
        "predictions": predictions,
        "confidences": confidences,
        "logits_sum": logits_sum,
        "logits_dtype": logits_dtype,
        "images_per_s": args.images / (elapsed_ms / 1000),
        "elapsed_ms": elapsed_ms,
        "device_name": torch.cuda.get_device_name(device),
        "device_total_memory": properties.total_memory,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device),
    }
    torch.cuda.empty_cache()
    print(f"{len(predictions)} images, {result['images_per_s']:.0f} images/s on {result['device_name']}, "
          f"logits {logits_dtype}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
