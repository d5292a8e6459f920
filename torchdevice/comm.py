"""Deprecated import path: ``torchdevice.comm``.

Its names moved: the translated ``torch.cuda.comm`` functions (``broadcast`` ... ``gather``, ``status``,
``FUNCTIONS``) are :mod:`torchdevice.namespaces.comm`, and the collectives family's two implementations
(``DeviceComm``, ``NativeCUDAComm``) are :mod:`torchdevice.collectives`. Each name read from here still
answers, with a ``DeprecationWarning`` naming its new home.
"""
from __future__ import annotations

import warnings
from typing import Any

_IMPLEMENTATIONS = ("DeviceComm", "NativeCUDAComm")
_FUNCTIONS = ("broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather", "status",
              "FUNCTIONS")


def __getattr__(name: str) -> Any:
    from . import collectives
    from .namespaces import comm

    if name not in _IMPLEMENTATIONS + _FUNCTIONS:
        raise AttributeError(f"module 'torchdevice.comm' has no attribute {name!r}")
    home = collectives if name in _IMPLEMENTATIONS else comm
    warnings.warn(f"torchdevice.comm.{name} is deprecated: import it from {home.__name__}", DeprecationWarning,
                  stacklevel=2)
    return getattr(home, name)
