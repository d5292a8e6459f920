"""What each fronted API does on a backend, without installing anything (``torchdevice matrix``):
:func:`status`, :func:`api_status`, :func:`fronted`."""
from __future__ import annotations

from types import ModuleType

import torch

from ..backend import Status
from ..router import Target
from . import accelerator, legacy
from .rules import NATIVE, NOOP, TRANSLATED
from .table import NAMESPACES, NVTX_SPECS, SPECS, SUBMODULES, Spec


def spec_for(ns: str, name: str) -> Spec | None:
    """The :class:`Spec` of ``torch.<ns>.<name>`` (``name`` may be ``"nvtx.range_push"``)."""
    if name.startswith("nvtx."):
        return NVTX_SPECS.get(name[5:]) if ns == "cuda" else None
    return SPECS.get(name)


def status(target: Target, ns: str, name: str) -> tuple[Status, str] | None:
    """``(Status, note)`` of ``torch.<ns>.<name>`` on the backend ``target``; None if torchdevice has no spec for it.

    When the backend's device type *is* ``ns`` (``torch.cuda`` on the cuda
    backend), nothing is translated and every function is native.
    """
    spec = spec_for(ns, name)
    if spec is None:
        return None
    if ns == target.device_type:
        return NATIVE, f"torch.{ns} itself: code written for {ns} runs untranslated on the {target.name} backend"
    return spec.rule(target, ns)


#: Private names fronted where the namespace has them: programs call them (``torch.cuda._sleep`` makes pending work).
PRIVATE_FRONTED = ("_sleep",)


def _original_names() -> dict[str, set[str]]:
    """The names each namespace really has (before any patch), plus its catalog names."""
    from ..data.catalog_names import NAMES  # the catalog's names, without parsing it (activation reads this)

    names = {}
    for ns in NAMESPACES:
        module = getattr(torch, ns)
        found = set(getattr(module, "__all__", ())) | {n for n in vars(module) if not n.startswith("_")}
        found |= {n for n in PRIVATE_FRONTED if n in vars(module)}
        names[ns] = found | NAMES.get(f"torch.{ns}", frozenset()) | _submodule_names(module)
    return names


def _submodule_names(module: ModuleType) -> set[str]:
    """The ``"<submodule>.<name>"`` rows (``"memory._snapshot"``) whose function ``module``'s submodule has."""
    found = set()
    for row in SPECS:
        sub, dot, name = row.partition(".")
        submodule = vars(module).get(sub) if dot else None
        if submodule is not None and name in getattr(submodule, "__dict__", {}):
            found.add(row)
    return found


_ORIGINAL_NAMES = _original_names()  # read at import: this module is imported before patching


def fronted(ns: str) -> list[str]:
    """Every API torchdevice gives a behaviour while fronting ``torch.<ns>`` (catalog or not), sorted."""
    apis = {f"torch.{ns}.{n}" for n in SPECS if n in _ORIGINAL_NAMES[ns]}
    if ns == "cuda":
        apis |= {f"torch.cuda.nvtx.{n}" for n in NVTX_SPECS}
        apis |= {f"torch.cuda.comm.{n}" for n in COMM_FUNCTIONS}
    if ns == "mps":
        apis.add("torch.backends.mps.is_available")
    if ns == "cuda":
        apis |= {"torch.get_device_module", "torch.Tensor.record_stream", *LEGACY_CALLERS}
    return sorted(apis)


def api_status(target: Target, api: str) -> tuple[Status, str] | None:
    """``(Status, note)`` of any API :func:`install` fronts, on the backend ``target``; None if none.

    Accepts ``torch.cuda.X`` and the submodule spellings ``torch.cuda.memory.X``,
    ``torch.cuda.random.X``, ``torch.cuda.streams.X``, ``torch.cuda.graphs.X``,
    ``torch.cuda.nvtx.X``, ``torch.cuda.comm.X`` (likewise for mps, xpu, mtia),
    ``torch.backends.mps.is_available``, and ``torch.accelerator.X`` (for a CUDA program:
    :func:`torchdevice.namespaces.accelerator.status`).
    """
    if api == "torch.backends.mps.is_available":
        return status(target, "mps", "is_available")
    if api in ("torch.Tensor.record_stream", ".record_stream()"):
        return record_stream_status(target)
    if api.startswith("torch.accelerator."):
        return accelerator.status(target, api)
    if api in LEGACY_CALLERS:
        return legacy_caller_status(target, api)
    if api == "torch.get_device_module":
        return TRANSLATED, (
            f"a {', '.join(t for t in NAMESPACES if t != target.device_type)} device string gives the fronted "
            "torch.<type> namespace (which answers for the backend); anything else as torch"
        )
    parts = api.split(".")
    if len(parts) < 3 or parts[0] != "torch" or parts[1] not in NAMESPACES:
        return None
    ns, rest = parts[1], parts[2:]
    if len(rest) == 2 and rest[0] == "nvtx":
        return status(target, ns, "nvtx." + rest[1])
    if len(rest) == 2 and rest[0] == "comm":
        return comm_status(target, rest[1]) if ns == "cuda" and rest[1] in COMM_FUNCTIONS else None
    if ".".join(rest) in _ORIGINAL_NAMES[ns] and ".".join(rest) in SPECS:  # a submodule's own function
        return status(target, ns, ".".join(rest))
    if len(rest) == 2 and rest[0] in SUBMODULES[ns]:
        rest = rest[1:]
    if len(rest) != 1:
        return None
    return status(target, ns, rest[0])


def record_stream_status(target: Target) -> tuple[Status, str]:
    """``Tensor.record_stream(s)`` for a stream of the backend ``target`` (patched by :mod:`torchdevice.devices`)."""
    if target.device_type == "cpu":
        return NOOP, (
            f"the {target.name} backend's tensors live in host memory and its streams are host-synchronous: work "
            "queued on one is complete when its call returns, so the memory may be reused at once"
        )
    return NATIVE, "torch's own Tensor.record_stream with the backend's stream"


#: torch functions taking a legacy tensor type, translated for torch.cuda's (:mod:`.legacy`)
LEGACY_CALLERS = {"torch.Tensor.type": legacy.TENSOR_TYPE_NOTE,
                  "torch.set_default_tensor_type": legacy.DEFAULT_TYPE_NOTE}


def legacy_caller_status(target: Target, api: str) -> tuple[Status, str]:
    """``Tensor.type`` / ``torch.set_default_tensor_type`` given a ``torch.cuda`` legacy tensor type on ``target``."""
    if target.device_type == "cuda":
        return NATIVE, f"torch's own {api}: torch.cuda's legacy types are the {target.name} backend's own"
    return TRANSLATED, LEGACY_CALLERS[api].format(ns="cuda", backend=target.name)


COMM_FUNCTIONS = ("broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather")


def comm_status(target: Target, name: str) -> tuple[Status, str]:
    """``torch.cuda.comm.<name>`` on ``target``: the backend's collectives operation, as tagged."""
    if target.device_type == "cuda":
        return NATIVE, f"torch.cuda itself: code written for cuda runs untranslated on the {target.name} backend"
    return target.op("collectives", name)
