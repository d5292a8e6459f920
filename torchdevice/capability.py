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

The other fields of CUDA's properties a backend left empty are filled the same way, with what
is true of the device (:data:`FILLED`): CUDA guarantees them, and programs read them.
"""
from __future__ import annotations

import dataclasses
import os
import platform
import re
import uuid

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


#: CUDA property -> what a device answers when its backend left the field empty (``None``/0/"")
FILLED = {
    "major": "the CUDA feature level the device offers: 8 with bfloat16, else 7 (TORCHDEVICE_CAPABILITY overrides)",
    "minor": "0 (with major: the feature level; TORCHDEVICE_CAPABILITY overrides)",
    "is_integrated": "1 where the backend's tensors are host (cpu) tensors: they live in host memory",
    "gcnArchName": "the device name, as CUDA builds of torch answer (the field is HIP's)",
    "uuid": "a UUID derived from the backend, the device index and name and this machine: stable and distinct per "
            "device here",
    "warp_size": "1: no group of threads executing in lockstep is known",
    "max_threads_per_multi_processor": "1: one thread per core is all that is known",
}


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                found = f.read().strip()
        except OSError:
            continue
        if found:
            return found
    return platform.node()


def device_uuid(backend: str, index: int, name: str) -> str:
    """The UUID a device without one answers with (see :data:`FILLED`)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"torchdevice://{_machine_id()}/{backend}/{index}/{name}"))


def complete(props: DeviceProperties, backend: str = "", index: int = 0, device_type: str = "") -> DeviceProperties:
    """``props`` with every field a backend left empty filled as :data:`FILLED` says (``major``/``minor``
    from :func:`profile`); ``device_type`` is the backend's tensors' device type."""
    changes: dict = {}
    if props.capability is None:
        changes["major"], changes["minor"] = profile(props)
    if not props.is_integrated and device_type == "cpu":
        changes["is_integrated"] = 1
    if not props.gcnArchName:
        changes["gcnArchName"] = props.name
    if not props.uuid:
        changes["uuid"] = device_uuid(backend or props.type, index, props.name)
    if props.warp_size <= 0:
        changes["warp_size"] = 1
    if props.max_threads_per_multi_processor <= 0:
        changes["max_threads_per_multi_processor"] = 1
    return dataclasses.replace(props, **changes) if changes else props
