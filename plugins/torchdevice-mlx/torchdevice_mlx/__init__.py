"""torchdevice backend ``mlx``: Apple's MLX runtime behind torch code written for CUDA.

torch tensors stay on the host (``device_type`` is ``"cpu"``: unified memory
on Apple silicon); memory figures, streams, synchronisation and seeding are
MLX's. See :mod:`torchdevice_mlx.backend` for what every operation means, and
:mod:`torchdevice_mlx.bridge` for :func:`to_mlx` (always a copy) and
:func:`from_mlx` (zero-copy).

Automatic selection takes ``mlx`` only where MLX has a GPU (Metal, or CUDA);
with ``mlx[cpu]`` ask for it: ``torchdevice.use("mlx")``.
"""
from __future__ import annotations

from . import dispatch as _dispatch  # noqa: F401 -- binds MLXTensor's dispatch (imports every part)
from . import translation as _translation  # noqa: F401 -- gives MLXTensor its .to/.cpu
from .backend import MLXBackend
from .bridge import from_mlx, to_mlx
from .conversion import fallback_counts
from .tensor import MLXTensor

__version__ = "1.0.0"
__all__ = ["MLXBackend", "MLXTensor", "fallback_counts", "plugin", "to_mlx", "from_mlx"]

plugin = MLXBackend()
