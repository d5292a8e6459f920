"""``torch.<ns>`` memory functions: the allocator's figures, empty_cache, the memory fraction."""
from __future__ import annotations

from typing import Any, Callable, Iterator, cast

from .. import trace as _trace
from ..router import Target
from .rules import NOOP, TRANSLATED, UNSUPPORTED, declared, op_rule, optional_op, when_op
from .table import Builder, declare_unsupported, fronts


def device_op_builder(family: str, op: str) -> Builder:
    """Builder of ``torch.<ns>.<name>(device=None)``: the backend's ``family.op`` on that device's index."""

    def build(target: Target, ns: str, name: str) -> Callable[..., Any]:
        fn, index = getattr(getattr(target, family), op), target.index

        def impl(device: Any = None) -> Any:
            return fn(index(device))

        impl.__name__ = impl.__qualname__ = name
        return impl

    build.__qualname__ = f"device_op_builder({family!r}, {op!r})"
    return build


for _name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
              "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_stats", "mem_get_info",
              "get_per_process_memory_fraction"):
    fronts(_name, op_rule("memory", _name))(device_op_builder("memory", _name))

_DEPRECATED = {
    "memory_cached": ("memory_reserved", "`torch.{ns}.memory_cached` has been renamed to `torch.{ns}.memory_reserved`"),
    "max_memory_cached": ("max_memory_reserved",
                          "`torch.{ns}.max_memory_cached` has been renamed to `torch.{ns}.max_memory_reserved`"),
    "reset_max_memory_allocated": ("reset_peak_memory_stats",
                                   "torch.{ns}.reset_max_memory_allocated now calls torch.{ns}.reset_peak_memory_stats, "
                                   "which resets /all/ peak memory stats."),
    "reset_max_memory_cached": ("reset_peak_memory_stats",
                                "torch.{ns}.reset_max_memory_cached now calls torch.{ns}.reset_peak_memory_stats, "
                                "which resets /all/ peak memory stats."),
}


def deprecated_alias_builder(op: str, message: str) -> Builder:
    """Builder of a deprecated name: a FutureWarning (``message``, as torch's), then ``memory.<op>``."""

    def build(target: Target, ns: str, name: str) -> Callable[..., Any]:
        fn, index, text = getattr(target.memory, op), target.index, message.format(ns=ns)

        def impl(device: Any = None) -> Any:
            _trace.warn(text, FutureWarning)
            return fn(index(device))

        impl.__name__ = impl.__qualname__ = name
        return impl

    build.__qualname__ = f"deprecated_alias_builder({op!r})"
    return build


for _name, (_target, _message) in _DEPRECATED.items():
    fronts(_name, op_rule("memory", _target, how=f"deprecated alias of {_target} (FutureWarning, as torch)"))(
        deprecated_alias_builder(_target, _message))


@fronts("empty_cache", op_rule("memory", "empty_cache"))
def build_empty_cache(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn = target.memory.empty_cache

    def empty_cache() -> None:
        fn()

    return empty_cache


@fronts("set_per_process_memory_fraction", op_rule("memory", "set_per_process_memory_fraction"))
def build_set_per_process_memory_fraction(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = target.memory.set_per_process_memory_fraction, target.index

    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        fn(float(fraction), index(device))

    return set_per_process_memory_fraction


def current_device_figure_builder(op: str) -> Builder:
    """Builder of a no-argument figure of the current device: ``memory.<op>(current())``."""

    def build(target: Target, ns: str, name: str) -> Callable[..., Any]:
        fn, current = getattr(target.memory, op), target.streams.current_device

        def impl() -> int:
            return fn(current())

        impl.__name__ = impl.__qualname__ = name
        return impl

    build.__qualname__ = f"current_device_figure_builder({op!r})"
    return build


# torch.mps's names for the current device's figures
fronts("current_allocated_memory", op_rule("memory", "memory_allocated", how="memory_allocated() of the current device"))(
    current_device_figure_builder("memory_allocated"))
fronts("driver_allocated_memory", op_rule("memory", "memory_reserved", how="memory_reserved() of the current device"))(
    current_device_figure_builder("memory_reserved"))


def _nest(stats: dict) -> dict:
    result: dict = {}
    for key, value in stats.items():
        node = result
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a key that is also a prefix: keep both
                child = node[part] = {"": child}
            node = child
        node[parts[-1]] = value
    return result


@fronts("memory_stats_as_nested_dict", op_rule("memory", "memory_stats", how="memory_stats() nested on '.'"))
def build_memory_stats_as_nested_dict(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = target.memory.memory_stats, target.index

    def memory_stats_as_nested_dict(device: Any = None) -> dict:
        return _nest(fn(index(device)))

    return memory_stats_as_nested_dict


@fronts("memory_summary", op_rule("memory", "memory_stats", how="CUDA's table layout, from memory_stats()"))
def build_memory_summary(target: Target, ns: str, name: str) -> Callable[..., Any]:
    from .. import memstats

    fn, index, backend = target.memory.memory_stats, target.index, target.name

    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        idx = index(device)
        return memstats.summary(fn(idx), idx, backend, abbreviated)

    return memory_summary


@fronts("device_memory_used", op_rule("memory", "mem_get_info", how="total minus free of mem_get_info()"))
def build_device_memory_used(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = target.memory.mem_get_info, target.index

    def device_memory_used(device: Any = None) -> int:
        free, total = fn(index(device))
        return int(total - free)

    return device_memory_used


@fronts("caching_allocator_enable", when_op(
    "memory", "empty_cache", NOOP,
    (NOOP, "the {backend} backend's allocator keeps no cache (its empty_cache is a no-op), so there is no "
           "caching to enable or disable"),
    "the {backend} backend's caching allocator cannot be switched off from Python",
))
def build_caching_allocator_enable(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def caching_allocator_enable(value: bool = True) -> None:
        return None

    return caching_allocator_enable


@fronts("caching_allocator_disabled", when_op(
    "memory", "empty_cache", NOOP,
    (NOOP, "a context that changes nothing: the {backend} backend's allocator keeps no cache (its empty_cache is a "
           "no-op)"),
    "the {backend} backend's caching allocator cannot be switched off from Python",
))
def build_caching_allocator_disabled(target: Target, ns: str, name: str) -> Callable[..., Any]:
    import contextlib

    @contextlib.contextmanager
    def caching_allocator_disabled() -> Iterator[None]:
        yield

    return caching_allocator_disabled


declare_unsupported("caching_allocator_alloc",
                    "allocate through a tensor: torch.empty(size, dtype=torch.uint8, device=...)")
declare_unsupported("caching_allocator_delete", "free the memory by dropping the tensor that owns it")
declare_unsupported("change_current_allocator", "the {backend} backend's allocator cannot be replaced from Python")
declare_unsupported("get_allocator_backend",
                    "the {backend} backend has no configurable allocator backend (PYTORCH_CUDA_ALLOC_CONF is CUDA's)")


@fronts("memory_snapshot", declared(TRANSLATED, "the {backend} backend exposes no caching-allocator segments: an "
                                                "empty list, the snapshot CUDA gives before its first allocation (a "
                                                "question answered, not refused; a backend with segments defines "
                                                "MemoryOps.memory_snapshot)"))
def build_memory_snapshot(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> list:
        return []

    return memory_snapshot


declare_unsupported(("host_memory_stats", "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats"),
                    "the {backend} backend reports no pinned host-memory statistics; use torch.{ns}.memory_stats()")


@fronts("host_memory_stats_as_nested_dict", optional_op(
    "memory", "host_memory_stats",
    declared(UNSUPPORTED, "the {backend} backend reports no pinned host-memory statistics; use torch.{ns}.memory_stats()"),
))
def build_host_memory_stats_as_nested_dict(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn = cast(Any, target.memory).host_memory_stats  # an optional operation: its rule checked it is there

    def host_memory_stats_as_nested_dict() -> dict:
        return _nest(fn())

    return host_memory_stats_as_nested_dict

declare_unsupported("use_mem_pool", "memory pools are a feature of CUDA's caching allocator; allocate normally")
declare_unsupported("list_gpu_processes",
                    "needs NVML and an NVIDIA GPU; torch.{ns}.memory_stats() gives this process's figures")
declare_unsupported(("memory_usage", "utilization", "temperature", "power_draw", "clock_rate"),
                    "device telemetry comes from NVML/amd-smi on NVIDIA/AMD GPUs only; read the {backend} "
                    "machine's own monitoring tools")
declare_unsupported("record_memory_history",
                    "allocator history is a feature of the {ns} allocator; use torch.{ns}.memory_stats()")


_EMPTY_SNAPSHOT = ("the {backend} backend exposes no allocator segments and records no history: "
                   "{{'segments': [], 'device_traces': [[] per device]}}, the empty snapshot")


@fronts("snapshot", declared(TRANSLATED, _EMPTY_SNAPSHOT))
def build_snapshot(target: Target, ns: str, name: str) -> Callable[..., Any]:
    count = target.device_count

    def snapshot() -> dict:
        return {"segments": [], "device_traces": [[] for _ in range(count)]}

    return snapshot


# The allocator-history functions torch.cuda.memory (and torch.xpu.memory) define without re-exporting them
# (the memory-visualizer recipe: _record_memory_history, run, _dump_snapshot): rows "memory.<name>", patched
# in the submodule only. torch's own reach for torch._C's CUDA allocator and raise AttributeError on other builds.
declare_unsupported(("memory._record_memory_history", "memory._record_memory_history_impl",
                     "memory._record_memory_history_legacy", "memory._set_memory_metadata",
                     "memory._get_memory_metadata"),
                    "allocator history is a feature of the {ns} caching allocator; use torch.{ns}.memory_stats() "
                    "(or torchdevice.memory_stats()) for the allocator's figures")
declare_unsupported("memory._get_current_allocator", "the {backend} backend's allocator is not a {ns} allocator object; "
                                                     "torch.{ns}.memory_stats() gives its figures")


@fronts("memory._snapshot", declared(TRANSLATED, _EMPTY_SNAPSHOT))
def build_private_snapshot(target: Target, ns: str, name: str) -> Callable[..., Any]:
    count, index = target.device_count, target.index

    def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict:
        index(device)  # an invalid device raises, as CUDA's
        return {"segments": [], "device_traces": [[] for _ in range(count)]}

    return _snapshot


@fronts("memory._dump_snapshot", declared(TRANSLATED, "pickles _snapshot() to the file, as torch: " + _EMPTY_SNAPSHOT))
def build_dump_snapshot(target: Target, ns: str, name: str) -> Callable[..., Any]:
    count = target.device_count

    def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
        import pickle

        with open(filename, "wb") as f:
            pickle.dump({"segments": [], "device_traces": [[] for _ in range(count)]}, f)

    return _dump_snapshot


@fronts("ipc_collect", declared(NOOP, "no {ns} IPC handles exist on the {backend} backend: there is nothing to collect"))
def build_ipc_collect(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def ipc_collect() -> None:
        return None

    return ipc_collect
