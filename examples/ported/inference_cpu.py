"""``examples/inference_cuda.py`` ported to the CPU by hand.

``device="cpu"``, ``map_location="cpu"``, ``torch.autocast("cpu",
dtype=torch.float16)`` (the original asks for float16 explicitly, and the CPU's
autocast supports it), no pinned memory, wall-clock timing, the CPU's name
from ``/proc/cpuinfo``. Predictions and logits agree with the translated run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time

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
    torch.manual_seed(seed)
    model = SmallNet()
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
    path = os.path.join(directory, "smallnet.pt")
    torch.save(model.state_dict(), path)
    return path


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device("cpu")

    with tempfile.TemporaryDirectory() as tmp:
        state = torch.load(pretrained_checkpoint(tmp, args.seed), map_location="cpu")
    model = SmallNet().to(device).eval()
    model.load_state_dict(state)

    g = torch.Generator().manual_seed(args.seed + 1)
    images = torch.rand(args.images, 3, 32, 32, generator=g)
    loader = DataLoader(TensorDataset(images), batch_size=args.batch_size)

    predictions, confidences, logits_sum = [], [], 0.0
    start = time.perf_counter()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.float16):
        for (batch,) in loader:
            logits = model(batch)
            probs = logits.float().softmax(dim=-1)
            confidence, predicted = probs.max(dim=-1)
            predictions += predicted.tolist()
            confidences += confidence.tolist()
            logits_sum += logits.double().sum().item()
            logits_dtype = str(logits.dtype)
    elapsed_ms = (time.perf_counter() - start) * 1000
    result = {
        "predictions": predictions,
        "confidences": confidences,
        "logits_sum": logits_sum,
        "logits_dtype": logits_dtype,
        "images_per_s": args.images / (elapsed_ms / 1000),
        "elapsed_ms": elapsed_ms,
        "device_name": cpu_name(),
        "device_total_memory": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(f"{len(predictions)} images, {result['images_per_s']:.0f} images/s on {result['device_name']}, "
          f"logits {logits_dtype}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
