"""Importing MLX lazily, so that the plugin loads (and says why) where MLX does not (the lowest layer)."""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

_HINT = {
    "linux": "on Linux install mlx[cpu] (or mlx[cuda]): plain mlx has no libmlx there",
    "darwin": "install mlx (macOS on Apple silicon)",
}


_core: ModuleType | None = None


#: an ``mlx.core.array`` in annotations (MLX ships no type information that mypy reads; the name says what
#: is passed)
Array = Any


def mx() -> ModuleType:
    """``mlx.core``; raises whatever its import raises (kept once imported: this is on every op's path)."""
    global _core
    if _core is None:
        import mlx.core

        _core = mlx.core
    return _core


def import_problem() -> str | None:
    """``None`` if ``mlx.core`` imports, else why not (with an installation hint)."""
    try:
        mx()
    except Exception as exc:  # ImportError, or OSError from a missing libmlx.so
        hint = _HINT.get(sys.platform, "install mlx")
        return f"cannot import mlx.core ({type(exc).__name__}: {exc}); {hint}"
    return None


#: ``[mlx.core.array]`` once :func:`array_class` ran (the hot paths compare ``type(x) is ARRAY_CLASS[0]``)
ARRAY_CLASS: list[Any] = []  # Any, not type: `type(x) is ARRAY_CLASS[0]` must not narrow x to object


def array_class() -> Any:
    """``mlx.core.array`` (looked up once)."""
    if not ARRAY_CLASS:
        ARRAY_CLASS.append(mx().array)
    return ARRAY_CLASS[0]
