"""The device vocabulary every layer shares, defined once and torch-free (``scan`` imports it without torch).

* :data:`SOURCE_FAMILIES`: the device families a program can be written for, and that translation maps to
  the target -- each has a ``torch.<family>`` namespace (``torch.cuda`` ...) and a device type.
"""
from __future__ import annotations

#: the accelerator families torchdevice translates, in the order programs usually probe them
SOURCE_FAMILIES: tuple[str, ...] = ("cuda", "mps", "xpu", "mtia")
