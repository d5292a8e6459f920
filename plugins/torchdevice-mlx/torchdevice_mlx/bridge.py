"""Moving data between torch tensors and MLX arrays.

* :func:`from_mlx` (MLX -> torch) is **zero-copy**: the tensor is a DLPack
  view of the MLX array's memory (measured ~1-3 us whatever the size). The
  array is evaluated first; the tensor keeps its buffer alive after the array
  is gone. MLX arrays are immutable by contract: writing into the tensor
  changes the array too, so write into ``from_mlx(a).clone()`` instead.
  ``copy=True`` returns an independent copy instead. Where torch cannot import
  MLX's DLPack export (a 0-d element of a larger buffer), the tensor views the
  array through NumPy's buffer protocol instead, also without a copy; bfloat16
  is zero-copy too (viewed as uint16, then as bfloat16).
* :func:`to_mlx` (torch -> MLX) **always copies** (~350-600 us per 10^6
  float32 on mlx[cpu]): MLX refuses to import host memory it did not allocate
  without a copy ("Cannot import a CPU array without a copy"), so the copy is
  made explicit and unconditional -- the array never aliases the tensor, on
  every platform. The tensor is detached (autograd does not cross), taken to
  the host if it is on an accelerator, and conjugate/negative views are
  resolved; strides need not be contiguous. Every dtype both sides have
  (float16/32/64, bfloat16, ints, uint8..64, bool, complex64) keeps its dtype; a dtype MLX lacks
  (complex128, the float8s ...) raises a TypeError naming it and the dtypes MLX holds (never a
  silent narrowing: MLX's DLPack import would turn complex128 into complex64).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .conversion import to_mx_dtype
from .runtime import Array, mx

if TYPE_CHECKING:
    import numpy


def to_mlx(tensor: torch.Tensor) -> Array:
    """Return a new MLX array holding a copy of ``tensor`` (see the module docstring)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"to_mlx expects a torch.Tensor, got {type(tensor).__name__}")
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.resolve_conj().resolve_neg()
    to_mx_dtype(data.dtype)  # a dtype MLX lacks: a TypeError naming it and those MLX holds
    if data.dtype == torch.float64:
        # MLX's DLPack import turns float64 into float32: through NumPy with the dtype named
        core = mx()
        return core.array(data.contiguous().numpy(), dtype=core.float64)
    return mx().from_dlpack(data, copy=True)


def from_mlx(array: Array, *, copy: bool = False) -> torch.Tensor:
    """Return a torch tensor on ``cpu`` viewing ``array``'s memory (a copy if ``copy=True``)."""
    core = mx()
    if not isinstance(array, core.array):
        raise TypeError(f"from_mlx expects an mlx.core.array, got {type(array).__name__}")
    core.eval(array)
    if _negative_strides(array):
        # an MLX view can have negative strides (a[::-1]), which torch's DLPack import cannot represent
        # (it aborts the process): made row-contiguous first
        array = core.contiguous(array)
        core.eval(array)
    try:
        tensor = torch.from_dlpack(array)
    except (TypeError, RuntimeError, BufferError, ValueError):
        # torch's DLPack import refuses some arrays MLX exports (a 0-d element of a larger buffer has a byte
        # offset): read through the buffer protocol instead, still without a copy
        tensor = _through_buffer(array)
    return tensor.clone() if copy else tensor


def _numpy_view(array: Array) -> numpy.ndarray:
    """A NumPy array viewing evaluated ``array``'s memory (bfloat16, which NumPy lacks, as uint16)."""
    import numpy

    core = mx()
    if array.dtype == core.bfloat16:
        array = core.view(array, core.uint16)  # a bit cast: same buffer, strides and offset
        core.eval(array)
    return numpy.asarray(array)


def _through_buffer(array: Array) -> torch.Tensor:
    view = _numpy_view(array)
    if not view.flags.writeable:  # torch warns on read-only NumPy memory: a copy, which it may write
        view = view.copy()
    tensor = torch.from_numpy(view)
    return tensor.view(torch.bfloat16) if array.dtype == mx().bfloat16 else tensor


def _negative_strides(array: Array) -> bool:
    """Whether evaluated ``array`` has a negative stride (read through NumPy's zero-copy view; where NumPy
    cannot view it, assumed so)."""
    try:
        return any(s < 0 for s in _numpy_view(array).strides)
    except (TypeError, ValueError, RuntimeError):
        return True
