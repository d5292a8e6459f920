"""Translating the arguments of ``torch.distributed`` calls for the target: ``backend="nccl"`` to the
target's engine (:func:`map_backend`), ``device_id`` (:func:`map_device_id`), DDP's device ids; the state the
wrappers read, fixed at install (``_state``)."""
from __future__ import annotations

from typing import Any

import torch

from ..errors import InvalidDeviceError, UnsupportedError
from ..vocabulary import RealDevice as _Device


class _State:
    """What the wrappers read: fixed at install time."""

    target: Any = None  #: the router.Target installed (None before install)
    engine: str | None = None
    backend_name: str = ""
    foreign: frozenset = frozenset()
    #: the foreign engine of the source family (nccl for cuda): what is_*_available() claims
    claimed: frozenset = frozenset()


_state = _State()


def _engine_for(name: str, what: str) -> str:
    """The engine to use for engine ``name`` (lower case) requested by the program."""
    if name not in _state.foreign:
        return name
    if _state.engine is None:
        raise UnsupportedError(
            f"{what} with backend {name!r}",
            _state.backend_name,
            "this backend declares no torch.distributed engine; run the collectives on a backend that has one "
            "(TORCHDEVICE_BACKEND=cpu uses gloo)",
        )
    return _state.engine


def _engine_string(eng: str) -> str:
    """``eng`` as a backend argument: ``"gloo"``, or ``"cpu:gloo,mps:gloo"`` where torch does not
    list the target's device type among the engine's (gloo and mps in torch 2.13)."""
    import torch.distributed as dist

    device_type = _state.target.device_type
    capability = dist.Backend.backend_capability.get(eng)
    if capability is None or device_type in capability:
        return eng
    pairs = [f"{device_type}:{eng}"]
    if device_type != "cpu" and "cpu" in capability:
        pairs.insert(0, f"cpu:{eng}")
    return ",".join(pairs)


def map_backend(backend: Any, device_id: Any = None, what: str = "init_process_group") -> Any:
    """Translate a ``backend`` argument (None, ``"nccl"``, ``"cuda:nccl,cpu:gloo"``) for the target."""
    import torch.distributed as dist

    target = _state.target
    if backend is None or str(backend).lower() == "undefined":
        if _state.engine is None:
            return backend
        if device_id is None:
            # torch's own choice: the default engine of the accelerator it sees
            seen = torch._C._get_accelerator().type
            if seen == target.device_type and dist.Backend.default_device_backend_map.get(seen) == _state.engine:
                return backend
        return _engine_string(_state.engine)
    text = str(backend).lower()
    if ":" not in text:
        mapped = _engine_for(text, what)
        return backend if mapped == text else _engine_string(mapped)
    result: dict[str, str] = {}
    for pair in text.split(","):
        parts = pair.split(":")
        if len(parts) != 2:
            return backend  # malformed: torch explains the format
        device, eng = parts[0].strip(), parts[1].strip()
        new_device = target.device_type if device in target.sources else device
        new_eng = _engine_for(eng, what)
        if new_device in result and result[new_device] != new_eng:
            if device == new_device:  # the program's own entry for that device type wins
                result[new_device] = new_eng
            continue
        result[new_device] = new_eng
    return ",".join(f"{d}:{e}" for d, e in result.items())


def _check_index(index: int) -> None:
    target = _state.target
    if not 0 <= index < target.device_count:
        raise InvalidDeviceError(index, target.device_count, target.name)


def map_device_id(device_id: Any) -> Any:
    """Translate ``init_process_group``/``new_group``'s ``device_id`` for the target (None on a cpu target)."""
    target = _state.target
    if device_id is None:
        return None
    if isinstance(device_id, bool):
        return device_id
    if isinstance(device_id, int):
        index = device_id
        if index < 0:
            return device_id  # torch explains
    elif hasattr(device_id, "type") and hasattr(device_id, "index"):
        if device_id.type == target.device_type:
            return device_id if target.indexed else None
        if device_id.type not in target.sources:
            return device_id
        index = device_id.index
        if index is None:
            raise ValueError("Please use a device_id with index.")
    else:
        return device_id
    _check_index(index)
    return _Device(target.device_type, index) if target.indexed else None


def _ddp_index(device: Any) -> Any:
    """DDP's device_ids/output_device entry -> checked int index (or the entry, if not ours)."""
    target = _state.target
    if isinstance(device, bool):
        return device
    if isinstance(device, int):
        _check_index(device)
        return device
    if isinstance(device, str):
        device = _Device(device)
    if hasattr(device, "type") and hasattr(device, "index"):
        if device.type in target.sources or device.type == target.device_type:
            index = device.index
            if index is None:
                if device.type == "cpu":
                    return 0
                return target.streams.current_device()
            _check_index(index)
            return index
    return device
