"""The compute capability a target without one answers with: the CUDA feature level it offers.

Programs gate features on ``torch.cuda.get_device_capability()`` (``>= (8, 0)`` for bf16, TF32
and flash paths; Lightning calls it unguarded), and real CUDA always answers while
``is_available()`` is True. A backend whose devices have no compute capability (CPU, MPS, MLX)
is therefore given the profile of the CUDA feature level it really offers:

* ``(8, 0)`` where the device computes bfloat16 (``is_bf16_supported()``), the first CUDA
  level with bf16: the capability and ``is_bf16_supported()`` never disagree;
* ``(7, 0)`` otherwise: float16 autocast, no bfloat16.

``TORCHDEVICE_CAPABILITY=MAJOR.MINOR`` (e.g. ``8.6``) replaces the profile. Backends with a
real capability (CUDA) keep theirs: the variable never overrides hardware.
"""
from __future__ import annotations

import dataclasses
import os
import re

from .backend import DeviceProperties
from .errors import ConfigError

ENV_CAPABILITY = "TORCHDEVICE_CAPABILITY"
BF16 = (8, 0)
NO_BF16 = (7, 0)
_FORM = re.compile(r"\s*(\d{1,2})\.(\d)\s*\Z")


def from_env() -> tuple[int, int] | None:
    """``TORCHDEVICE_CAPABILITY`` as ``(major, minor)``, None when unset; ConfigError when malformed."""
    raw = os.environ.get(ENV_CAPABILITY, "")
    if not raw.strip():
        return None
    found = _FORM.match(raw)
    if found is None:
        raise ConfigError(ENV_CAPABILITY, raw, "MAJOR.MINOR with a one-digit minor, e.g. 8.6 or 9.0")
    return int(found.group(1)), int(found.group(2))


def profile(props: DeviceProperties) -> tuple[int, int]:
    """The capability a device without one answers with (see the module docstring)."""
    return from_env() or (BF16 if props.bf16_supported else NO_BF16)


def complete(props: DeviceProperties) -> DeviceProperties:
    """``props`` with ``major``/``minor`` from :func:`profile` where the backend gave none."""
    if props.capability is not None:
        return props
    major, minor = profile(props)
    return dataclasses.replace(props, major=major, minor=minor)
