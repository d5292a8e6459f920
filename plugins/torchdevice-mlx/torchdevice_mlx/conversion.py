"""Bookkeeping under :class:`~torchdevice_mlx.tensor.MLXTensor`, below every other part but ``runtime``.

Owns: the fallback counts (:func:`fallback_counts`: every ATen op run on the host, counted and logged
once), the torch <-> MLX dtype maps and the pending-evaluation tracking. The data copies between torch
and MLX are :mod:`torchdevice_mlx.bridge`'s.

Evaluation
  MLX is lazy: an op builds a graph node. Data is computed when the program
  reads it (``.item()``, ``.cpu()`` ...), and every pending tensor is evaluated
  by :func:`evaluate_pending` -- called by the backend's ``synchronize`` and its
  memory queries, so ``torch.cuda.memory_allocated()`` counts what the program's
  tensors hold, as CUDA does when the kernels are launched.
"""
from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from typing import Any

import torch

from .runtime import mx

log = logging.getLogger("torchdevice.mlx")

_counts: Counter = Counter()
_logged: set = set()
_lock = threading.Lock()


def fallback_counts() -> dict[str, int]:
    """How many times each ATen op fell back to torch on the host (op name -> count)."""
    with _lock:
        return dict(_counts)


def reset_fallback_counts() -> None:
    with _lock:
        _counts.clear()


def _report_fallbacks() -> dict[str, int]:
    return fallback_counts()


try:  # `torchdevice run --report` lists the fallbacks (a core without the hook just has no section)
    from torchdevice import trace as _trace

    _trace.add_section("mlx: ATen ops run on the host (fallbacks)", _report_fallbacks)
except (ImportError, AttributeError):
    pass


def note_fallback(name: str) -> None:
    with _lock:
        _counts[name] += 1
        first = name not in _logged
        _logged.add(name)
    if first:
        # info, not warning: torchdevice prints nothing unless TORCHDEVICE_LOG asks (README)
        log.info("torchdevice mlx: %s has no MLX lowering; it runs on the host (torch CPU)", name)


# -- dtypes -----------------------------------------------------------------

def _dtype_pairs() -> list[tuple[torch.dtype, Any]]:
    """Every torch dtype MLX holds, with its MLX dtype (the one table; ``distributed._MX_DTYPES`` is checked
    against it by the tests)."""
    core = mx()
    pairs = [
        (torch.float32, core.float32), (torch.float16, core.float16), (torch.bfloat16, core.bfloat16),
        (torch.float64, core.float64), (torch.int8, core.int8), (torch.int16, core.int16),
        (torch.int32, core.int32), (torch.int64, core.int64), (torch.uint8, core.uint8),
        (torch.uint16, core.uint16), (torch.uint32, core.uint32), (torch.uint64, core.uint64),
        (torch.bool, core.bool_), (torch.complex64, core.complex64),
    ]
    return pairs


_T2M: dict[torch.dtype, Any] = {}
#: MLX dtype -> torch dtype, filled on first use (read directly on the hot path: every op's result)
TORCH_DTYPE_OF: dict[Any, torch.dtype] = {}


def _init_dtypes() -> None:
    for t, m in _dtype_pairs():
        _T2M[t], TORCH_DTYPE_OF[m] = m, t


def supported_dtypes() -> tuple[torch.dtype, ...]:
    """The torch dtypes an MLX tensor can have."""
    if not _T2M:
        _init_dtypes()
    return tuple(_T2M)


def _no_dtype(dtype: object) -> TypeError:
    names = ", ".join(str(d).replace("torch.", "") for d in supported_dtypes())
    return TypeError(f"MLX has no dtype for {dtype}: a tensor of it cannot be held by MLX "
                     f"(torchdevice's mlx backend holds {names}); cast it to one of those, or keep it on the host "
                     f"(device='cpu')")


def to_mx_dtype(dtype: torch.dtype) -> Any:  # an mlx.core.Dtype
    """The MLX dtype of torch ``dtype``; a TypeError naming it and the dtypes MLX holds if it has none."""
    try:
        return _T2M[dtype]
    except KeyError:
        if not _T2M:
            _init_dtypes()
            return to_mx_dtype(dtype)
        raise _no_dtype(dtype) from None


def to_torch_dtype(dtype: Any) -> torch.dtype:  # an MLX dtype
    try:
        return TORCH_DTYPE_OF[dtype]
    except KeyError:
        if not TORCH_DTYPE_OF:
            _init_dtypes()
            return to_torch_dtype(dtype)
        raise TypeError(f"torch has no dtype for MLX {dtype}") from None


# -- pending (unevaluated) tensors ------------------------------------------------

#: id(base tensor) -> weak reference, for every base tensor made or written since the last
#: evaluate_pending(); dead entries are dropped when the table outgrows PENDING_LIMIT. Mutated in place,
#: never rebound: tensor.new_base (every op's result) holds it by name.
PENDING: dict[int, weakref.ref[Any]] = {}  # to MLXTensors (tensor.MLXTensor, above this module)
PENDING_LIMIT = [4096]


def track(tensor: torch.Tensor) -> None:
    """Note ``tensor`` (a base tensor, made or written) for the next :func:`evaluate_pending`."""
    PENDING[id(tensor)] = weakref.ref(tensor)
    if len(PENDING) > PENDING_LIMIT[0]:
        compact_pending()


def compact_pending() -> None:
    """Drop the dead entries of :data:`PENDING` (and let it grow to twice the live ones before the next time)."""
    live = {k: r for k, r in list(PENDING.items()) if r() is not None}
    PENDING.clear()
    PENDING.update(live)
    PENDING_LIMIT[0] = max(4096, 2 * len(PENDING))


def evaluate_pending() -> int:
    """Evaluate the MLX graph of every live tensor made or written since the last call; returns how many."""
    refs = list(PENDING.values())
    PENDING.clear()
    arrays = []
    for ref in refs:
        tensor = ref()
        if tensor is not None:
            arrays.append(tensor._mx)
    if arrays:
        mx().eval(*arrays)
    return len(arrays)
