"""unpatch() gives torch back exactly: every attribute of every torch module and class, by identity."""
from __future__ import annotations

import copyreg
import sys
import warnings

import torch
import torch.distributed  # noqa: F401  (the installers patch these; import them before the snapshot)
import torch.nn
import torch.utils.data

import torchdevice


def _owners():
    """Every loaded torch module, and every class defined in one of them."""
    owners = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated aliases (torch.distributed.reduce_op) warn on access
        _collect(owners)
    return owners


def _collect(owners):
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch" or name.startswith("torch.")):
            continue
        owners[name] = module
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and getattr(value, "__module__", "").startswith("torch"):
                owners[f"{name}.{attr}"] = value


def _snapshot():
    return {key: dict(vars(obj)) for key, obj in _owners().items()}


def _diff(before, after):
    changed = []
    for key, old in before.items():
        new = after.get(key, {})
        for attr in set(old) | set(new):
            if attr in ("__slotnames__", "__annotations__", "__warningregistry__"):
                continue  # caches Python itself fills on first use
            if old.get(attr, KeyError) is not new.get(attr, KeyError):
                changed.append(f"{key}.{attr}")
    return changed


def test_unpatch_restores_every_torch_attribute_by_identity():
    torchdevice.use("cpu")
    try:
        with torchdevice.patched():
            pass  # first install imports what translation needs: not part of the comparison
        before, pickler = _snapshot(), copyreg.dispatch_table.get(torch.device)
        torchdevice.patch()
        patched = _snapshot()
        torchdevice.unpatch()
        after = _snapshot()
    finally:
        torchdevice.unpatch()
        torchdevice.use(None)
    assert _diff(before, patched), "patch() changed nothing: the comparison would prove nothing"
    assert _diff(before, after) == []
    assert copyreg.dispatch_table.get(torch.device) is pickler
