"""MLX-backed torch tensors: :class:`MLXTensor` and its ATen dispatch (the plugin's public face).

An :class:`MLXTensor` is a torch wrapper subclass (``_make_wrapper_subclass``)
whose data is an ``mlx.core.array``; every ATen op reaching it goes through
``__torch_dispatch__`` (below autograd, so backward and optimizers work
unchanged): lowered to MLX where a lowering exists, else decomposed by torch,
else run on the host with torch (a counted, logged fallback). The tensor reports
device ``cpu`` to torch; views keep torch's strides and alias their base; MLX
evaluates lazily, and :func:`evaluate_pending` evaluates every pending tensor.

The implementation, lowest layer first (each module's docstring details its part):

- :mod:`torchdevice_mlx.conversion`: fallback counts, dtype maps, host <-> MLX copies,
  pending-evaluation tracking ("Evaluation");
- :mod:`torchdevice_mlx.views`: view geometry (torch's strides), reading views from their base,
  :func:`write` ("Aliasing and strides");
- :mod:`torchdevice_mlx.mlxtensor`: the :class:`MLXTensor` class ("Device identity");
- :mod:`torchdevice_mlx.dispatch`: :func:`dispatch` (the routing of an op: lowering, host random ops,
  decomposition, host fallback), making views, in-place ops.

This module imports them all, so ``import torchdevice_mlx`` binds the class's dispatcher, and names their
public functions; everything else is imported from the module that defines it.
"""
from __future__ import annotations

from .conversion import (
    array_from_torch,
    evaluate_pending,
    fallback_counts,
    reset_fallback_counts,
    to_mx_dtype,
    to_torch_dtype,
    torch_from_array,
)
from .dispatch import dispatch
from .mlxtensor import MLXTensor, mlx_subclass
from .views import write

__all__ = ["MLXTensor", "array_from_torch", "dispatch", "evaluate_pending", "fallback_counts", "mlx_subclass",
           "reset_fallback_counts", "to_mx_dtype", "to_torch_dtype", "torch_from_array", "write"]
