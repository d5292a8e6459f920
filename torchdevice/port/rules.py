"""What ``torchdevice port`` does with each use ``torchdevice scan`` finds: the rewrite table.

A use's ``api`` (the scan's canonical name) is looked up here; the answer is one :class:`Rule`.
``torch.<family>.X`` names are split into the family's namespace and ``X``: ``X`` picks the rule,
the same for CUDA, MPS, XPU and MTIA.
"""
from __future__ import annotations

from dataclasses import dataclass

#: how a use is handled
ACCEL, TORCH, MODULE, AMP, KEPT, AGNOSTIC, UNPORTABLE, BUILT = (
    "accelerator", "torch", "module", "amp", "kept", "agnostic", "unportable", "built")


@dataclass(frozen=True)
class Rule:
    action: str  #: one of the names above
    target: str = ""  #: the new name (ACCEL: in torch.accelerator, TORCH: in torch, AMP: in torch.amp)
    why: str = ""  #: for UNPORTABLE: why there is no device-agnostic form; for KEPT: the comment added


#: the namespaces of each family whose functions have device-agnostic forms
FAMILY_NAMESPACES = {
    "cuda": ("torch.cuda",),
    "mps": ("torch.mps", "torch.backends.mps"),
    "xpu": ("torch.xpu",),
    "mtia": ("torch.mtia",),
}

#: ``torch.<family>.X`` -> ``torch.accelerator.Y`` (the same meaning; torch 2.13's torch.accelerator)
ACCELERATOR_NAMES = {
    "is_available": "is_available", "device_count": "device_count", "synchronize": "synchronize",
    "current_device": "current_device_index", "set_device": "set_device_index", "device": "device_index",
    "current_stream": "current_stream", "set_stream": "set_stream", "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated", "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved", "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats", "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats", "mem_get_info": "get_memory_info",
    "current_allocated_memory": "memory_allocated",  # MPS: bytes of live tensors, as memory_allocated
    "driver_allocated_memory": "memory_reserved",  # MPS: what the allocator holds, as translation reads it
}

#: ``torch.<family>.X`` -> ``torch.X``: the device-generic classes
TORCH_NAMES = {"Event": "Event", "Stream": "Stream", "OutOfMemoryError": "OutOfMemoryError"}

#: ``torch.<family>.amp.X`` -> ``torch.amp.X`` with the accelerator's type as the device
AMP_NAMES = frozenset({"autocast", "GradScaler"})

#: positional parameters of ``torch.cuda.amp.autocast`` (``torch.amp.autocast`` takes the device first, then
#: ``dtype``): they are passed by keyword in the port
AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")

_GRAPHS = "CUDA graphs: capture and replay have no device-agnostic form in torch"
_KERNELS = "a custom CUDA kernel or extension: it must be written for each device"
_NVTX = "NVTX ranges: use torch.profiler.record_function for a device-agnostic range"
_IPC = "CUDA IPC: sharing device memory between processes has no device-agnostic form"

#: ``torch.<family>.X`` (the first component of ``X``) with no device-agnostic form
UNPORTABLE_NAMES = {
    "graph": _GRAPHS, "graphs": _GRAPHS, "CUDAGraph": _GRAPHS, "make_graphed_callables": _GRAPHS,
    "graph_pool_handle": _GRAPHS, "is_current_stream_capturing": _GRAPHS,
    "jiterator": _KERNELS, "compile_shader": _KERNELS, "_sleep": _KERNELS,
    "nvtx": _NVTX, "ipc_collect": _IPC, "comm": "torch.cuda.comm: use torch.distributed collectives",
    "profiler": "a vendor profiler: use torch.profiler", "cudart": "the CUDA runtime itself",
    "amp": "a torch.cuda.amp function with no torch.amp equivalent taking a device",
}
_LEGACY = "a legacy per-device tensor type: use a dtype and a device instead"

#: whole names (not under a family namespace) that have no device-agnostic form
UNPORTABLE_APIS = {
    "torch.version.cuda": "the CUDA toolkit's version: no device-agnostic form (torch.version has one per vendor)",
    "torch.profiler.ProfilerActivity.CUDA": "a vendor's profiler activity: use torch.profiler.supported_activities()",
    "torch.cuda.*": "a star import: import the names it uses instead",
}

KEPT_COMMENT = "# torchdevice port: kept, a no-op off this vendor's kernels"


def _family_split(api: str) -> tuple[str, str, str] | None:
    """``(family, namespace, rest)`` for ``torch.<family>.rest`` under a ported namespace, else None."""
    for family, namespaces in FAMILY_NAMESPACES.items():
        for ns in namespaces:
            if api == ns or api.startswith(ns + "."):
                return family, ns, api[len(ns) + 1:]
    return None


def namespace_rule(api: str) -> Rule:
    """The rule for a dotted ``torch.*`` name the scan reports (kind ``namespace``)."""
    if api.startswith("torch.accelerator"):
        return Rule(AGNOSTIC)
    if api in UNPORTABLE_APIS:
        return Rule(UNPORTABLE, why=UNPORTABLE_APIS[api])
    if api.startswith(("torch.backends.cudnn", "torch.backends.cuda")):
        return Rule(KEPT, why=KEPT_COMMENT)
    if "CUDAExtension" in api or api.startswith("torch.utils.cpp_extension"):
        return Rule(UNPORTABLE, why=_KERNELS)
    split = _family_split(api)
    if split is None:
        return Rule(UNPORTABLE, why="no device-agnostic form known for this name")
    _, namespace, rest = split
    return _member_rule(namespace, rest)


def _member_rule(namespace: str, rest: str) -> Rule:
    head, _, tail = rest.partition(".")
    if not rest:
        return Rule(MODULE)  # the namespace itself: torch.get_device_module(...)
    if namespace == "torch.backends.mps":
        if rest == "is_available":
            return Rule(ACCEL, "is_available")
        if rest == "is_built":
            return Rule(BUILT)
        return Rule(UNPORTABLE, why="an MPS backend setting with no device-agnostic form")
    if head == "amp" and tail in AMP_NAMES:
        return Rule(AMP, tail)
    if head in UNPORTABLE_NAMES:
        return Rule(UNPORTABLE, why=UNPORTABLE_NAMES[head])
    if head.endswith("Tensor") or head.endswith("Storage"):
        return Rule(UNPORTABLE, why=_LEGACY)
    if not tail and head in ACCELERATOR_NAMES:
        return Rule(ACCEL, ACCELERATOR_NAMES[head])
    if not tail and head in TORCH_NAMES:
        return Rule(TORCH, TORCH_NAMES[head])
    return Rule(MODULE)  # the device module's own function: torch.get_device_module(...).X


def string_rule(kind: str) -> Rule:
    """The rule for a string use (kind ``device``, ``dist-backend``, ``tensor-type``, ``env``)."""
    if kind in ("device", "dist-backend"):
        return Rule(ACCEL)
    if kind == "tensor-type":
        return Rule(UNPORTABLE, why=_LEGACY)
    if kind == "env":
        return Rule(UNPORTABLE, why="a vendor's environment variable: each device has its own")
    return Rule(UNPORTABLE, why=f"no rewrite for a {kind} use")
