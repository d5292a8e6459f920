"""sim's settings, read from the environment when sim is loaded (never at import).

* ``TORCHDEVICE_SIM_DEVICES``: how many devices sim has (default 2, 1 to 16): its physical devices;
* ``TORCHDEVICE_SIM_VISIBLE_DEVICES`` (sim natively) or ``CUDA_VISIBLE_DEVICES`` (sim loaded by
  torchdevice, as translation's target): which of them the process sees, in which order, as a CUDA
  driver reads ``CUDA_VISIBLE_DEVICES``: ``1,0`` makes ``sim:0`` physical device 1; empty: none. Unset:
  all. Natively sim leaves ``CUDA_VISIBLE_DEVICES`` alone (it hides the host's GPUs, not sim's), as
  ``torch_npu`` reads its own variable;
* ``TORCHDEVICE_SIM_MEMORY``: each device's capacity, e.g. ``2GiB``, ``512MiB``, ``1.5GB`` or
  bytes (default ``8GiB``, a small GPU's, and what two devices can hold on a 24 GiB host);
* ``TORCHDEVICE_SIM_RACECHECK``: ``1`` turns on the stream race checker (:mod:`.racecheck`),
  ``0`` (the default) leaves it off.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

DEVICES_VAR = "TORCHDEVICE_SIM_DEVICES"
MEMORY_VAR = "TORCHDEVICE_SIM_MEMORY"
RACECHECK_VAR = "TORCHDEVICE_SIM_RACECHECK"
VISIBLE_VAR = "TORCHDEVICE_SIM_VISIBLE_DEVICES"  #: sim's own, read when sim is loaded natively
CUDA_VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"  #: read when torchdevice loads sim (translation's target)
MAX_MEMORY = 2**63 - 1  # the allocator's capacity is an int64
DEFAULT_DEVICES = 2
DEFAULT_MEMORY = 8 * 1024**3
MAX_DEVICES = 16
CLOCK_KHZ = 1_410_000  # 1.41 GHz: what torch.cuda._sleep's cycles are counted at
MULTIPROCESSORS = 8

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


@dataclass(frozen=True)
class Config:
    devices: int
    memory: int  #: bytes per device
    racecheck: bool = False  #: the stream race checker on from the start
    visible: tuple[int, ...] | None = None  #: the physical devices seen, in order (None: all of them)

    @property
    def physical(self) -> tuple[int, ...]:
        """The physical device behind each device index the process sees."""
        return tuple(range(self.devices)) if self.visible is None else self.visible


def parse_size(text: str) -> int:
    """``"2GiB"`` -> 2147483648; ValueError naming the value and the accepted forms."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{MEMORY_VAR}={text!r} is not a size: use bytes or a number with a unit "
                         f"(KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 2GiB")
    size = int(float(match.group(1)) * _UNITS[unit])
    if not 1024**2 <= size <= MAX_MEMORY:
        raise ValueError(f"{MEMORY_VAR}={text!r} is out of range: a device has from 1MiB to {MAX_MEMORY} bytes "
                         "(8EiB, an int64)")
    return size


def parse_devices(text: str) -> int:
    """``"4"`` -> 4; ValueError naming the value and the valid range."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(f"{DEVICES_VAR}={text!r} is not a device count: use a whole number from 1 to {MAX_DEVICES}")
    return count


def parse_racecheck(text: str) -> bool:
    """``"1"`` -> True, ``"0"`` -> False; ValueError naming the value and the valid ones."""
    if text not in ("0", "1"):
        raise ValueError(f"{RACECHECK_VAR}={text!r} is not valid: use 1 (check streams for races) or 0 (off, the default)")
    return text == "1"


def parse_visible(var: str, text: str, devices: int) -> tuple[int, ...]:
    """``"1,0"`` -> (1, 0): the physical devices ``var`` makes visible, in order; ``""`` -> none.
    ValueError naming the variable, the value and what is valid."""
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    found: list[int] = []
    for item in items:
        index = int(item) if item.isdigit() else -1
        if not 0 <= index < devices or index in found:
            raise ValueError(f"{var}={text!r} is not valid: use distinct indices of sim's {devices} devices (0 to "
                             f"{devices - 1}, {DEVICES_VAR}) separated by commas, e.g. 0 or "
                             f"{max(devices - 1, 0)},0, or an empty value for none")
        found.append(index)
    return tuple(found)


def read(visible_var: str = VISIBLE_VAR) -> Config:
    """The settings in force, the visible devices read from ``visible_var``; ValueError for a bad variable."""
    devices = os.environ.get(DEVICES_VAR, "").strip()
    memory = os.environ.get(MEMORY_VAR, "").strip()
    racecheck = os.environ.get(RACECHECK_VAR, "").strip()
    count = parse_devices(devices) if devices else DEFAULT_DEVICES
    visible = os.environ.get(visible_var)
    return Config(count, parse_size(memory) if memory else DEFAULT_MEMORY, parse_racecheck(racecheck) if racecheck else False,
                  None if visible is None else parse_visible(visible_var, visible, count))
