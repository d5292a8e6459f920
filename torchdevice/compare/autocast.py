"""Where two backends' autocast policies part: each torch function the program calls under autocast on
backend B is run again on the reference, under the reference's autocast with the same dtype, and the two
results' dtypes are compared.

Autocast casts above the dispatch mode of :mod:`.shadow`: the ops it sees already have their inputs cast,
so the reference, re-running them, computes in B's dtypes. An op that B's policy runs in float32 and the
reference's in bfloat16 (CUDA lists ``softmax`` as float32, the CPU does not) agrees op by op while the
whole runs differ. :class:`AutocastProbe`, a ``TorchFunctionMode``, sees the program's calls before
autocast (``torch.nn.functional.softmax``, ``Tensor.__matmul__``), only while B's autocast is on; the
reference's run happens with the shadow mode paused and the CPU generator restored afterwards (a random
function would otherwise move the program's random stream).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from .shadow import ShadowMode, first_line, program_location


def _float_dtype(value: object) -> torch.dtype | None:
    """The dtype of the first floating-point tensor in ``value``, or None."""
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf.dtype
    return None


def function_name(func: Callable[..., Any]) -> str:
    """``torch.nn.functional.softmax``, ``Tensor.softmax``: how the report names a torch function."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    module = getattr(func, "__module__", None)
    if name.startswith(("TensorBase.", "_TensorBase.")):
        return "Tensor." + name.split(".", 1)[1]
    if name.startswith("_VariableFunctionsClass."):  # torch.softmax and the other torch.* builtins
        return "torch." + name.split(".", 1)[1]
    if module is None or name.startswith("Tensor."):
        return name
    return f"{module}.{name}"


class AutocastProbe(TorchFunctionMode):
    """Records ``status: "autocast"`` entries through ``shadow.record`` for the functions whose result
    dtype under the reference's autocast differs from B's."""

    def __init__(self, shadow: ShadowMode, device_type: str) -> None:
        super().__init__()
        self.shadow = shadow
        self.device_type = device_type  # B's, as torch.is_autocast_enabled names it

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        self.shadow.cover()  # before torch.tensor(..., device=...), whose copy skips the dispatch mode
        out = func(*args, **kwargs)
        if (self.shadow.paused or self.device_type == self.shadow.ref_device.type  # one policy: nothing to find
                or not torch.is_autocast_enabled(self.device_type)):
            return out
        dtype = _float_dtype(out)
        if dtype is None or _float_dtype((args, kwargs)) is None:
            return out
        ref_dtype = self._reference_dtype(func, args, kwargs)
        if ref_dtype is not None and ref_dtype != dtype:
            self.shadow.record({"op": function_name(func), "module": self.shadow._module(),
                                "location": program_location(2), "status": "autocast",
                                "reference_dtype": str(ref_dtype).replace("torch.", ""),
                                "backend_dtype": str(dtype).replace("torch.", "")})
        return out

    def _reference_dtype(self, func: Callable[..., Any], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> torch.dtype | None:
        ref = self.shadow.ref_device
        to_ref = self.shadow._to_ref
        self.shadow.paused = True
        try:
            with torch.random.fork_rng(devices=[]):
                ref_args, ref_kwargs = tree_map(to_ref, (args, kwargs))
                if ref_kwargs.get("device") is not None:
                    ref_kwargs["device"] = ref
                with torch.autocast(ref.type, dtype=torch.get_autocast_dtype(self.device_type)):
                    return _float_dtype(func(*ref_args, **ref_kwargs))
        except Exception as exc:  # noqa: BLE001 - a call the reference cannot make: counted in the summary
            self.shadow.record({"op": function_name(func), "status": "autocast unprobed",
                                "error": f"{type(exc).__name__}: {first_line(exc)}"})
            return None
        finally:
            self.shadow.paused = False
