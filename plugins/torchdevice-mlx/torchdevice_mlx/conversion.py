"""Conversions and bookkeeping under :class:`~torchdevice_mlx.mlxtensor.MLXTensor`.

Owns: the fallback counts (:func:`fallback_counts`: every ATen op run on the host, counted and logged
once), the torch <-> MLX dtype maps, the host <-> MLX copies (:func:`array_from_torch`,
:func:`torch_from_array`) and the pending-evaluation tracking.

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
from typing import TYPE_CHECKING, Any

import torch

from ._mlx import Array, mx

if TYPE_CHECKING:
    from .mlxtensor import MLXTensor

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


def _note_fallback(name: str) -> None:
    with _lock:
        _counts[name] += 1
        first = name not in _logged
        _logged.add(name)
    if first:
        # info, not warning: torchdevice prints nothing unless TORCHDEVICE_LOG asks (README)
        log.info("torchdevice mlx: %s has no MLX lowering; it runs on the host (torch CPU)", name)


# -- dtypes -----------------------------------------------------------------

def _dtype_pairs():
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


_T2M: dict = {}
_M2T: dict = {}


def _init_dtypes() -> None:
    for t, m in _dtype_pairs():
        _T2M[t], _M2T[m] = m, t


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


def to_mx_dtype(dtype: torch.dtype):
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
        return _M2T[dtype]
    except KeyError:
        if not _M2T:
            _init_dtypes()
            return to_torch_dtype(dtype)
        raise TypeError(f"torch has no dtype for MLX {dtype}") from None


# -- host <-> MLX -----------------------------------------------------------

def array_from_torch(tensor: torch.Tensor):
    """A new MLX array holding a copy of a host torch tensor."""
    from .bridge import to_mlx

    return to_mlx(tensor)


def torch_from_array(array: Array) -> torch.Tensor:
    """A host torch tensor holding a copy of ``array``'s data (evaluates it)."""
    from .bridge import from_mlx

    return from_mlx(array, copy=True)


# -- pending (unevaluated) tensors ------------------------------------------------

#: id(base tensor) -> weak reference, for every base tensor made or written since the last
#: evaluate_pending(); dead entries are dropped when the table outgrows _pending_limit. Mutated in place,
#: never rebound: mlxtensor._new_base (every op's result) holds it by name.
_pending: dict[int, weakref.ref] = {}
_pending_limit = [4096]


def _track(tensor: MLXTensor) -> None:
    _pending[id(tensor)] = weakref.ref(tensor)
    if len(_pending) > _pending_limit[0]:
        _compact_pending()


def _compact_pending() -> None:
    live = {k: r for k, r in list(_pending.items()) if r() is not None}
    _pending.clear()
    _pending.update(live)
    _pending_limit[0] = max(4096, 2 * len(_pending))


def evaluate_pending() -> int:
    """Evaluate the MLX graph of every live tensor made or written since the last call; returns how many."""
    refs = list(_pending.values())
    _pending.clear()
    arrays = []
    for ref in refs:
        tensor = ref()
        if tensor is not None:
            arrays.append(tensor._mx)
    if arrays:
        mx().eval(*arrays)
    return len(arrays)


# -- mlx.core.array --------------------------------------------------------------

_MX_ARRAY: list = []


def _mx_array():
    """``mlx.core.array`` (looked up once)."""
    if not _MX_ARRAY:
        _MX_ARRAY.append(mx().array)
    return _MX_ARRAY[0]
