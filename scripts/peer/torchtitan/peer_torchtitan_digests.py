"""``python -m peer_torchtitan_digests ARGS``: torchtitan's trainer (``-m torchtitan.train ARGS``), observed.

``scripts/peer_torchtitan.py --bitwise`` runs this in place of ``-m torchtitan.train`` on every side. It
wraps torchtitan's ``clip_grad_norm_`` (called once a step, after backward, before the optimizer) and,
on rank 0, appends one JSON line a step to ``$PEER_TORCHTITAN_DIGESTS``: a SHA-256 of the bytes of
every parameter and every gradient (gathered whole from their shards) and of the gradient norm.
torchtitan's log prints 5 decimals of the loss; equal digests mean equal bits. The trainer's code is
not changed: the wrapper only reads, and every rank gathers the same tensors, so all take part in the
same collectives.
"""
from __future__ import annotations

import hashlib
import json
import os
import runpy
from typing import Any, Callable

import torch

VARIABLE = "PEER_TORCHTITAN_DIGESTS"


def digest(tensor: torch.Tensor | None) -> str | None:
    """SHA-256 of a tensor's dtype, shape and bytes (whole, if a DTensor); None for a missing gradient."""
    if tensor is None:
        return None
    if hasattr(tensor, "full_tensor"):  # a DTensor: every rank gathers it, so every rank calls this
        tensor = tensor.full_tensor()
    host = tensor.detach().cpu().contiguous()
    head = f"{host.dtype} {tuple(host.shape)} ".encode()
    # reshape(-1): a 0-dim tensor (the norm) cannot be viewed as bytes
    return hashlib.sha256(head + host.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def observed(clip: Callable[..., torch.Tensor], path: str, rank: int) -> Callable[..., torch.Tensor]:
    """``clip`` that first records the digests of the parameters and gradients it is given, then of its norm."""

    def clip_grad_norm_(parameters: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        parameters = list(parameters)
        record = {"params": [digest(p) for p in parameters], "grads": [digest(p.grad) for p in parameters]}
        norm = clip(parameters, *args, **kwargs)
        record["norm"] = digest(norm)
        if rank == 0:
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")
        return norm

    return clip_grad_norm_


def main() -> None:
    import torchtitan.distributed.utils as dist_utils  # torchtitan.train calls it as dist_utils.clip_grad_norm_

    dist_utils.clip_grad_norm_ = observed(dist_utils.clip_grad_norm_, os.environ[VARIABLE],
                                          int(os.environ.get("RANK", "0")))
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
