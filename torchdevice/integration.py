"""What a framework integration is: the :class:`Integration` base class.

The ``torchdevice_integrations`` hook (:mod:`torchdevice.hookspecs`) returns these objects, so the
class lives in the backend API layer beside the hooks; the machinery that collects, watches and
installs them while translating is :mod:`torchdevice.integrations` (which re-exports this class as
``torchdevice.integrations.Integration``).
"""
from __future__ import annotations

from typing import Any


class Integration:
    """Base class of a framework integration (subclassing is optional: the attributes are what counts).

    ``install`` is called once for each of :attr:`modules`, when that module has been imported while
    translation is on; it changes the framework only through ``patcher.set(obj, name, value)``, so that
    :func:`torchdevice.unpatch` gives every touched attribute back exactly.
    """

    #: short unique lowercase name, e.g. ``"lightning"``
    name: str = ""
    #: what it adapts, in words (``torchdevice info``)
    framework: str = ""
    #: modules whose import activates it (``install`` is called once per module)
    modules: tuple[str, ...] = ()

    def install(self, patcher: Any, target: Any, module: Any) -> None:
        """Adapt ``module`` (one of :attr:`modules`, just imported) to ``target`` through ``patcher``."""
        raise NotImplementedError
