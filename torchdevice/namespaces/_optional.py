"""Optional operations (:data:`OPTIONAL_OPS`): a backend's own op when its Ops class defines one,
else the family's fallback. Runs after every family module has filled :data:`SPECS`.
"""
from __future__ import annotations

from typing import Callable

from . import devices, memory, nvtx, rng, streams  # noqa: F401 -- they fill SPECS first
from ._common import OPTIONAL_OPS, SPECS, Spec, _build_optional, optional_op


def _optional_builder(name: str, fallback: Callable | None):
    def build(fx, ns, short):
        family, _ = OPTIONAL_OPS[name]
        ops = getattr(fx, family)
        if ops is not None and callable(getattr(type(ops), name, None)):
            return _build_optional(fx, name, None)
        return fallback(fx, ns, short)

    return build


for _name, (_family, _call) in OPTIONAL_OPS.items():
    _old = SPECS[_name]
    SPECS[_name] = Spec(optional_op(_family, _name, _old.rule), _optional_builder(_name, _old.build) if _old.build
                        else _optional_builder(_name, lambda fx, ns, short: None), _old.kind)
