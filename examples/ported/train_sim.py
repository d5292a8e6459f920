"""``examples/train_cuda.py`` ported by hand to sim, torchdevice's simulated GPU (``torchdevice-sim``).

What a person writes for a vendor device with its own namespace (``torch.sim``, as ``torch.npu``):
``import torchdevice_sim`` and ``load()``; ``device="sim"``; ``torch.sim.*`` for events, memory,
RNG and synchronization; ``torch.autocast("sim")`` and ``torch.amp.GradScaler("sim")``;
``map_location="sim:0"``; no cuDNN/TF32 flags. ``torchdevice run --backend sim
examples/train_cuda.py`` must print the same numbers (tests/test_examples.py and the sim plugin's
tests compare them).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchdevice_sim

FEATURES, CLASSES = 32, 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("TRAIN_OUT"), help="write the results as JSON here")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def make_dataset(samples: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(samples, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    y = (torch.tanh(x) @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, hidden), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, CLASSES),
    )


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad(), torch.autocast(device_type="sim"):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.float(), y)
    accuracy = (logits.argmax(dim=1) == y).float().mean()
    return loss.item(), accuracy.item()


def main(argv=None) -> dict:
    args = parse_args(argv)
    torchdevice_sim.load()
    device = torch.device("sim")

    torch.manual_seed(args.seed)
    torch.sim.manual_seed_all(args.seed)

    dataset = make_dataset(args.samples, args.seed)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
        pin_memory=True, num_workers=args.workers, persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(args.seed),
    )
    model = make_model(args.hidden).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scaler = torch.amp.GradScaler("sim")

    torch.sim.reset_peak_memory_stats()
    start, end = torch.sim.Event(enable_timing=True), torch.sim.Event(enable_timing=True)
    losses = []
    start.record()
    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type="sim"):
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        if not args.quiet:
            print(f"epoch {epoch}: loss {sum(losses[-10:]) / 10:.4f}")
    end.record()
    torch.sim.synchronize()
    train_ms = start.elapsed_time(end)
    peak_bytes = torch.sim.max_memory_allocated()
    allocated_bytes = torch.sim.memory_allocated()

    # The RNG state round-trips: the same draws after restoring it.
    rng_state = torch.sim.get_rng_state()
    draw = torch.randn(4, device="sim")
    torch.sim.set_rng_state(rng_state)
    redraw = torch.randn(4, device="sim")

    # Checkpoint, reloaded onto the device.
    eval_x, eval_y = dataset.tensors[0][:512].to(device), dataset.tensors[1][:512].to(device)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(), "sim_rng": rng_state}, path)
        checkpoint = torch.load(path, map_location="sim:0")
    restored = make_model(args.hidden).to(device)
    restored.load_state_dict(checkpoint["model"])
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=args.lr, weight_decay=0.01)
    restored_optimizer.load_state_dict(checkpoint["optimizer"])
    restored_scaler = torch.amp.GradScaler("sim")
    restored_scaler.load_state_dict(checkpoint["scaler"])

    eval_loss, accuracy = evaluate(model, eval_x, eval_y)
    restored_loss, restored_accuracy = evaluate(restored, eval_x, eval_y)
    result = {
        "losses": losses,
        "eval_loss": eval_loss,
        "accuracy": accuracy,
        "restored_eval_loss": restored_loss,
        "restored_accuracy": restored_accuracy,
        "param_sum": sum(p.double().sum().item() for p in model.parameters()),
        "grad_scale": scaler.get_scale(),
        "restored_grad_scale": restored_scaler.get_scale(),
        "rng_draw": draw.tolist(),
        "rng_redraw": redraw.tolist(),
        "checkpoint_on": str(checkpoint["model"]["0.weight"].device.type),
        "train_ms": train_ms,
        "peak_memory_bytes": peak_bytes,
        "memory_bytes": allocated_bytes,
        "steps": len(losses),
    }
    if not args.quiet:
        print(f"eval loss {eval_loss:.4f}, accuracy {accuracy:.3f}, {train_ms:.0f} ms, "
              f"peak memory {peak_bytes / 2**20:.1f} MiB")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
