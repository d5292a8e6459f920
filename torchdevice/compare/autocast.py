"""Where two backends' autocast policies part: each torch function the program calls under autocast on
backend B is run again on the reference, under the reference's autocast with the same dtype, and the two
results' dtypes are compared.

Autocast casts above the dispatch mode of :mod:`.shadow`: the ops it sees already have their inputs cast,
so the reference, re-running them, computes in B's dtypes. An op that B's policy runs in float32 and the
reference's in bfloat16 (CUDA lists ``softmax`` as float32, the CPU does not) agrees op by op while the
whole runs differ. :class:`AutocastProbe`, a ``TorchFunctionMode``, sees the program's calls before
autocast (``torch.nn.functional.cross_entropy``, ``Tensor.__matmul__``), only while B's autocast is on:
the ATen ops each call runs on B (traced by the shadow mode) and on the reference are paired by name and
compared by output dtype. The reference's run happens with the shadow mode paused and the CPU generator
restored afterwards (a random function would otherwise move the program's random stream).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .shadow import ShadowMode, _float_dtype, first_line, program_location


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


#: ops whose dtype is the cast itself, not a policy's choice (autocast's casts, copies, aliases)
_CASTS = frozenset({"aten._to_copy.default", "aten.copy_.default", "aten.clone.default", "aten.detach.default",
                    "aten.alias.default", "aten.lift_fresh.default", "aten.t.default", "aten.view.default"})

Trace = list[tuple[str, "torch.dtype | None"]]


def differences(backend: Trace, reference: Trace) -> list[tuple[str, torch.dtype, torch.dtype]]:
    """The ops run in another dtype on each side: each op's calls paired in order by name (ops only one side
    runs, another kernel for the same work, left out), as (op, dtype on B, dtype on the reference)."""
    by_name: dict[str, list[torch.dtype | None]] = {}
    for name, dtype in reference:
        by_name.setdefault(name, []).append(dtype)
    seen: dict[str, int] = {}
    found = []
    for name, dtype in backend:
        k = seen[name] = seen.get(name, -1) + 1
        ref = by_name.get(name, [])
        if name in _CASTS or k >= len(ref):
            continue
        other = ref[k]
        if dtype is not None and other is not None and dtype != other and (name, dtype, other) not in found:
            found.append((name, dtype, other))
    return found


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class AutocastProbe(TorchFunctionMode):
    """Records ``status: "autocast"`` entries through ``shadow.record``: for each function, the ops it ran
    in another dtype under the reference's autocast policy than under B's (the function's own result may
    agree: ``cross_entropy`` ends in float32 on both, its ``log_softmax`` runs in bfloat16 under CUDA's
    lists and in float32 under the CPU's)."""

    def __init__(self, shadow: ShadowMode, device_type: str) -> None:
        super().__init__()
        self.shadow = shadow
        self.device_type = device_type  # B's, as torch.is_autocast_enabled names it

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        self.shadow.cover()  # before torch.tensor(..., device=...), whose copy skips the dispatch mode
        if (self.shadow.paused or self.device_type == self.shadow.ref_device.type  # one policy: nothing to find
                or not torch.is_autocast_enabled(self.device_type) or _float_dtype((args, kwargs)) is None):
            return func(*args, **kwargs)
        self.shadow.trace = []
        try:
            out = func(*args, **kwargs)
            backend = self.shadow.trace
        finally:
            self.shadow.trace = None
        if _float_dtype(out) is None:
            return out
        reference = self._reference_trace(func, args, kwargs)
        if reference is not None:
            for op, dtype, ref_dtype in differences(backend, reference):
                self.shadow.record({"op": function_name(func), "aten_op": op, "module": self.shadow._module(),
                                    "location": program_location(2), "status": "autocast",
                                    "reference_dtype": _dtype_name(ref_dtype), "backend_dtype": _dtype_name(dtype)})
        return out

    def _reference_trace(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Trace | None:
        """The ops ``func`` runs on copies of its inputs on the reference, under the reference's autocast."""
        ref = self.shadow.ref_device
        self.shadow.paused = True
        try:
            with torch.random.fork_rng(devices=[]):
                ref_args, ref_kwargs = tree_map(self.shadow._to_ref, (args, kwargs))
                if ref_kwargs.get("device") is not None:
                    ref_kwargs["device"] = ref
                self.shadow.trace = []
                with torch.autocast(ref.type, dtype=torch.get_autocast_dtype(self.device_type)):
                    func(*ref_args, **ref_kwargs)
                return self.shadow.trace
        except Exception as exc:  # noqa: BLE001 - a call the reference cannot make: counted in the summary
            self.shadow.record({"op": function_name(func), "status": "autocast unprobed",
                                "error": f"{type(exc).__name__}: {first_line(exc)}"})
            return None
        finally:
            self.shadow.paused = False
            self.shadow.trace = None
