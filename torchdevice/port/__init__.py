"""``torchdevice port``: turn CUDA/MPS/XPU/MTIA-written code into device-agnostic torch code.

The scan (:mod:`torchdevice.scan`) finds every device-specific use; :mod:`.rules` says what each
becomes (``torch.accelerator``, ``torch.get_device_module``, ``torch.Event``/``torch.Stream``,
``torch.amp`` with the accelerator's type, the accelerator's default distributed backend) or why it
stays; :mod:`.transform` makes the edits with libcst, keeping comments and layout; :mod:`.command`
is the command line. Ported code imports torch only and resolves the accelerator once, in one
module-level line (``ACCELERATOR = torch.accelerator.current_accelerator(check_available=True) or
torch.device("cpu")``). Porting ported code changes nothing.
"""
from __future__ import annotations

from typing import Any

from .command import add_arguments, run

__all__ = ["PortError", "PortResult", "Unported", "add_arguments", "port_source", "run"]


def __getattr__(name: str) -> Any:
    # the codemod (and libcst) load on first use: the command line builds its parser on every start
    if name in ("PortError", "PortResult", "Unported", "port_source"):
        from . import transform

        return getattr(transform, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
