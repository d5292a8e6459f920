"""Exceptions raised by torchdevice. Every message names the bad value and what would be valid."""
from __future__ import annotations

import torch


class TorchDeviceError(RuntimeError):
    """Base class of torchdevice's own errors."""


def did_you_mean(name: str, known: list[str]) -> str:
    """``"did you mean 'cuda'?"`` for a misspelled ``name`` close to one of ``known``; else ``""``."""
    import difflib  # only on this error path

    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {close[0]!r}?" if close else ""


class BackendNotFoundError(TorchDeviceError, ValueError):
    """A backend name that no installed plugin declares; the message suggests a close known name (and ``hint``,
    the router's, what to do instead)."""

    def __init__(self, name: str, known: list[str], available: list[str], source: str = "", hint: str = "") -> None:
        self.name, self.known, self.available = name, known, available
        where = "; ".join(filter(None, (f"from {source}" if source else "", did_you_mean(name, known))))
        where = f" ({where})" if where else ""
        super().__init__(
            f"unknown torchdevice backend {name!r}{where}{f'; {hint}' if hint else ''}; "
            f"known backends: {', '.join(known) or 'none'}; available here: {', '.join(available) or 'none'}"
        )


class ConfigError(TorchDeviceError, ValueError):
    """A ``TORCHDEVICE_*`` variable with a value torchdevice cannot use."""

    def __init__(self, variable: str, value: str, valid: str) -> None:
        self.variable, self.value, self.valid = variable, value, valid
        super().__init__(f"{variable}={value!r} is not valid: {valid}")


class BackendUnavailableError(TorchDeviceError):
    """A backend that is installed but cannot run on this machine; ``hint`` (the router's) says what to do
    instead, e.g. for a source family's name (``mps``) how to run a program written for it here."""

    def __init__(self, name: str, reason: str, available: list[str], source: str = "", hint: str = "") -> None:
        self.name, self.reason, self.available = name, reason, available
        where = f" (from {source})" if source else ""
        super().__init__(
            f"torchdevice backend {name!r}{where} is not available: {reason}{f'; {hint}' if hint else ''}; "
            f"available here: {', '.join(available) or 'none'}"
        )


class UnsupportedError(TorchDeviceError, NotImplementedError):
    """A function that the active backend cannot honour.

    Raised instead of returning a made-up value. The message names the
    function, the backend, and what to use instead.
    """

    def __init__(self, function: str, backend: str, instead: str = "") -> None:
        self.function, self.backend, self.instead = function, backend, instead
        msg = f"{function} is not supported on torchdevice backend {backend!r}"
        if instead:
            msg += f"; instead: {instead}"
        super().__init__(msg)


class SensorUnavailableError(TorchDeviceError):
    """A question about the device that the backend answers from a host reading this host does not expose.

    A query (``torch.cuda.temperature``, ``power_draw``, ``clock_rate`` on the
    cpu backend) is answered where the host has the reading -- a thermal
    sensor, RAPL energy counters, a cpufreq clock -- and raises this where it
    has none, or only for root (a VM or container without them, macOS): the
    answer depends on the host, not on the backend, so this is not
    :class:`UnsupportedError` (an action the backend refuses everywhere). CUDA
    raises too when NVML is absent. Never a made-up number instead. The message
    names the function, the backend, what was tried and what to use instead;
    ``tried`` and ``instead`` hold those parts.
    """

    def __init__(self, function: str, backend: str, tried: str, instead: str = "") -> None:
        self.function, self.backend, self.tried, self.instead = function, backend, tried, instead
        msg = f"{function} cannot be read on this host (torchdevice backend {backend!r}): {tried}"
        if instead:
            msg += f"; instead: {instead}"
        super().__init__(msg)


# torch.AcceleratorError exists from torch 2.8; older torch raised a plain RuntimeError.
_BASES = (torch.AcceleratorError, TorchDeviceError) if hasattr(torch, "AcceleratorError") else (TorchDeviceError,)


class InvalidDeviceError(*_BASES):  # type: ignore[misc]  # (bases depend on the torch version)
    """A device index beyond the backend's device count.

    Subclasses ``torch.AcceleratorError`` (a ``RuntimeError``), the class CUDA
    raises for an invalid device ordinal.
    """

    def __init__(self, index: object, count: int, backend: str) -> None:
        self.index, self.count, self.backend = index, count, backend
        super().__init__(
            f"invalid device ordinal {index!r} for torchdevice backend {backend!r}: "
            f"valid indices are 0..{count - 1}" if count else
            f"invalid device ordinal {index!r}: backend {backend!r} has no devices"
        )
