"""Collectives for sim tensors (filled in below)."""
from __future__ import annotations


def register() -> None:
    """Register sim's process-group backend with torch.distributed (once)."""
