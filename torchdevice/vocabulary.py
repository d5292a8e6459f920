"""The device vocabulary every layer shares, defined once; importing it does not import torch.

* :data:`SOURCE_FAMILIES`: the device families a program can be written for and that translation
  maps to the target. Each has a ``torch.<family>`` namespace (``torch.cuda`` ...) and a device type.
* :data:`RealDevice`: torch's own ``torch.device`` class. While translating, the attribute
  ``torch.device`` is a stand-in (:mod:`torchdevice.devices`), so code that needs the real class
  (to build a device without translating it, or to test ``isinstance``) takes this one:
  ``from torchdevice.vocabulary import RealDevice``. It is ``torch._C.device``, the class torch
  defines in C, which translation never replaces: the answer is the same whatever was imported or
  patched first. Reading it imports torch (the first time).
* Device-index parsing, for every function that takes a device argument (``None``, an ``int``, a
  string such as ``"cuda:1"``, or a ``torch.device``): :func:`index_in` (the index it names),
  :func:`parse_index` (a valid index of a backend, the current device for ``None``) and
  :func:`optional_index` (CUDA's ``_get_device_index(device, optional=True)``). A malformed string
  raises torch's own ``RuntimeError``, an index outside the backend
  :class:`~torchdevice.errors.InvalidDeviceError`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from torch import device as RealDevice  # noqa: F401  (served by __getattr__ below at run time)
    from torch.types import Device

#: The accelerator families torchdevice translates, in the order programs usually probe them.
SOURCE_FAMILIES: tuple[str, ...] = ("cuda", "mps", "xpu", "mtia")

_device_class: Any = None


def real_device_class() -> Any:
    """torch's own ``torch.device`` class (``torch._C.device``), never the translating stand-in."""
    global _device_class
    if _device_class is None:
        import torch

        _device_class = torch._C.device
    return _device_class


def __getattr__(name: str) -> Any:
    if name == "RealDevice":
        return real_device_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def index_in(device: Any) -> int | None:
    """The index a str/``torch.device``-like names (``"cuda:1"`` -> 1, ``"cuda"`` -> None).

    A malformed string raises torch's own ``RuntimeError`` naming it.
    """
    dev = (_device_class or real_device_class())(device) if isinstance(device, str) else device  # (str has .index)
    return dev.index


def parse_index(device: Device, current: int, count: int, backend: str) -> int:
    """Turn ``None``/int/str/``torch.device`` into a valid device index of ``backend``.

    ``None``, a negative int, or a device without index mean the current
    device. An index outside ``0..count-1`` raises :class:`InvalidDeviceError`.
    A malformed string raises torch's own ``RuntimeError`` naming it.
    """
    if device is None:
        index = current
    elif isinstance(device, bool):
        raise TypeError(f"expected a device index, str or torch.device, got {device!r}")
    elif isinstance(device, int):
        index = current if device < 0 else device
    elif isinstance(device, str) or hasattr(device, "index"):
        named = index_in(device)
        index = current if named is None else named
    else:
        raise TypeError(
            f"expected a device index, str or torch.device, got {type(device).__name__} {device!r}"
        )
    if not 0 <= index < count:
        from .errors import InvalidDeviceError

        raise InvalidDeviceError(index, count, backend)
    return index


def optional_index(device: Device, current: Callable[[], int]) -> int:
    """CUDA's ``_get_device_index(device, optional=True)``: -1 for None, an int as it is, else the
    index the device names (``current()`` for one without an index)."""
    if device is None:
        return -1
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str) or hasattr(device, "index"):
        named = index_in(device)
        return current() if named is None else named
    raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device!r}")
