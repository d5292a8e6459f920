"""CUDA's memory statistics in CUDA's shape, filled in from what a backend really knows.

``torch.cuda.memory_stats()`` returns a flat dict with a fixed key set (see
:data:`CUDA_KEYS`, taken from the docstring of ``torch.cuda.memory_stats`` and
the keys ``torch.cuda.memory_summary`` reads); ``torch.cuda.host_memory_stats()``
another (:data:`HOST_KEYS`). A backend builds its answer with
:func:`device_stats` from the figures it has and says, per key, what the figure
means on it; every key it cannot know is filled by the rule documented for that
key in ``docs/memory.md`` -- never by an invented number:

* ``allocation``/``allocated_bytes``/``active``/``active_bytes``/``requested_bytes``
  carry the backend's live-allocation figures (bytes, and a block count where
  the backend counts blocks; active is allocated: a block is in use from its
  allocation to its free, there is no stream-ordered limbo);
* ``segment``/``reserved_bytes`` carry what the allocator holds (in use or
  cached);
* ``inactive_split``/``inactive_split_bytes``, ``oversize_*``, ``num_alloc_retries``,
  ``num_sync_all_streams``, ``num_oom_rejections`` and ``max_split_size`` describe
  mechanisms of CUDA's caching allocator (block splitting, retries after a cache
  flush, stream-synchronising frees, the over-size threshold) that a backend
  without them truly has zero of;
* ``num_ooms`` counts out-of-memory errors the backend saw (zero where none can
  be observed: a host allocation failure is a ``RuntimeError`` from the OS, not
  counted);
* a statistic whose figure the backend does not track (the historical
  ``allocated``/``freed`` totals of a counter read only as a current value) is 0,
  and the backend's docstring says so: ``current`` and ``peak`` are the figures
  programs read.

Pools: a backend has one pool, so ``all`` carries the figures and the
``large_pool``/``small_pool`` split follows CUDA's 1 MiB threshold only where the
backend can split by size; otherwise ``large_pool`` repeats ``all`` and
``small_pool`` is zero (see :func:`device_stats`).

A backend with no pinned host-memory allocator (its tensors are host memory already: the CPU
backend, MLX) mixes :class:`NoPinnedHostMemory` into its ``MemoryOps`` subclass: CUDA's pinned
statistics, all zero, and their two resets, tagged.
"""
from __future__ import annotations

from typing import Any

from .status import noop, translated

_METRICS = ("current", "peak", "allocated", "freed")
_POOLS = ("all", "large_pool", "small_pool")
_POOLED = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
           "active_bytes", "inactive_split_bytes", "requested_bytes")
_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
             "num_oom_rejections", "max_split_size")
_UNPOOLED = ("oversize_allocations", "oversize_segments")

#: The keys of ``torch.cuda.memory_stats()`` (CUDA's caching allocator, no private pools).
CUDA_KEYS: frozenset[str] = frozenset(
    [f"{stat}.{pool}.{metric}" for stat in _POOLED for pool in _POOLS for metric in _METRICS]
    + [f"{stat}.{metric}" for stat in _UNPOOLED for metric in _METRICS]
    + list(_COUNTERS)
)

_HOST_STATS = ("allocations", "allocated_bytes", "active_requests", "active_bytes")
_HOST_TIMES = ("host_alloc_time", "host_free_time")

#: The keys of ``torch.cuda.host_memory_stats()`` (CUDA's pinned host-memory allocator).
HOST_KEYS: frozenset[str] = frozenset(
    [f"{stat}.{metric}" for stat in _HOST_STATS for metric in _METRICS]
    + [f"{t}.{m}" for t in _HOST_TIMES for m in ("total", "max", "min", "count", "avg")]
    + ["num_host_alloc", "num_host_free"]
)


def _stat(current: int, peak: int, allocated: int = 0, freed: int = 0) -> dict[str, int]:
    return {"current": int(current), "peak": int(max(peak, current)), "allocated": int(allocated),
            "freed": int(freed)}


def device_stats(
    allocated: int,
    allocated_peak: int,
    reserved: int,
    reserved_peak: int,
    *,
    allocations: int | None = None,
    allocations_peak: int | None = None,
    device_alloc: int = 0,
    device_free: int = 0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``torch.cuda.memory_stats()``'s flat dict from a backend's figures (see the module docstring).

    ``allocated``/``allocated_peak`` (bytes of live allocations) fill
    ``allocated_bytes``, ``active_bytes`` and ``requested_bytes``;
    ``reserved``/``reserved_peak`` fill ``reserved_bytes``. ``allocations``
    (live blocks, where counted) fills ``allocation`` and ``active``. The
    ``large_pool`` entries repeat ``all`` and ``small_pool`` is zero: the
    backend has one pool and no size split. Historical ``allocated``/``freed``
    totals are 0 (not tracked). ``extra`` keys (the backend's raw figures,
    prefixed with its name) are added as they are.
    """
    blocks = allocations or 0
    blocks_peak = allocations_peak if allocations_peak is not None else blocks
    values: dict[str, dict[str, int]] = {
        "allocation": _stat(blocks, blocks_peak),
        "active": _stat(blocks, blocks_peak),
        "segment": _stat(0, 0),
        "inactive_split": _stat(0, 0),
        "allocated_bytes": _stat(allocated, allocated_peak),
        "active_bytes": _stat(allocated, allocated_peak),
        "requested_bytes": _stat(allocated, allocated_peak),
        "reserved_bytes": _stat(reserved, reserved_peak),
        "inactive_split_bytes": _stat(0, 0),
    }
    stats: dict[str, Any] = {}
    zero = _stat(0, 0)
    for name, stat in values.items():
        for pool, figures in (("all", stat), ("large_pool", stat), ("small_pool", zero)):
            for metric, value in figures.items():
                stats[f"{name}.{pool}.{metric}"] = value
    for name in _UNPOOLED:
        for metric in _METRICS:
            stats[f"{name}.{metric}"] = 0
    for name in _COUNTERS:
        stats[name] = 0
    stats["num_device_alloc"] = int(device_alloc)
    stats["num_device_free"] = int(device_free)
    if extra:
        stats.update(extra)
    return stats


def empty_host_stats() -> dict[str, Any]:
    """``torch.cuda.host_memory_stats()`` of a backend with no pinned host-memory allocator: all zero."""
    return {key: 0 for key in sorted(HOST_KEYS)}


class NoPinnedHostMemory:
    """Mixin for the ``MemoryOps`` of a backend without pinned host memory (its tensors live in host memory).

    ``torch.cuda.host_memory_stats()`` is CUDA's pinned-allocator keys, all 0 (:func:`empty_host_stats`:
    no pinned blocks exist), and ``reset_accumulated_host_memory_stats``/``reset_peak_host_memory_stats``
    are no-ops; each tagged, so the matrix and the call agree. Put it first among the bases::

        class MyMemory(NoPinnedHostMemory, MemoryOps): ...
    """

    @translated("CUDA's pinned-allocator keys, all 0: a host target has no pinned host-memory allocator, so no "
                "pinned blocks exist")
    def host_memory_stats(self) -> dict[str, Any]:
        return empty_host_stats()

    @noop("there are no pinned host-memory statistics to reset (host_memory_stats is all 0)")
    def reset_accumulated_host_memory_stats(self) -> None:
        return None

    @noop("there are no pinned host-memory statistics to reset (host_memory_stats is all 0)")
    def reset_peak_host_memory_stats(self) -> None:
        return None


def _size(value: int, pref: float) -> str:
    """CUDA's cell: the unit is chosen by ``pref`` (the metric's ``all`` figure), as torch's table does."""
    units = ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB")
    unit = units[0]
    for bigger in units[1:]:
        if pref < 768 * 1024:
            break
        unit = bigger
        value //= 1024
        pref /= 1024
    return f"{value:6d} {unit}"


def _count(value: int, pref: float) -> str:
    units = (" ", "K", "M")
    unit = units[0]
    for bigger in units[1:]:
        if pref < 750 * 1000:
            break
        unit = bigger
        value //= 1000
        pref /= 1000
    return f"{value:7d} {unit} "


def summary(stats: dict[str, Any], device: int, backend: str, abbreviated: bool = False) -> str:
    """A table in the layout of ``torch.cuda.memory_summary()`` from a flat :func:`device_stats` dict."""
    rule, thin = "=" * 75, "-" * 75
    lines = [rule, f" {'PyTorch CUDA memory summary, device ID ' + str(device):<73} ",
             f" {'(torchdevice: backend ' + repr(backend) + '; see docs/memory.md for what each row means)':<73} ",
             thin,
             f" {'CUDA OOMs: ' + str(stats.get('num_ooms', 0)):<30} | "
             f"{'cudaMalloc retries: ' + str(stats.get('num_alloc_retries', 0)):<40} ",
             rule, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ", thin]
    rows = (("allocated_bytes", "Allocated memory", _size), ("active_bytes", "Active memory", _size),
            ("requested_bytes", "Requested memory", _size), ("reserved_bytes", "GPU reserved memory", _size),
            ("inactive_split_bytes", "Non-releasable memory", _size), ("allocation", "Allocations", _count),
            ("active", "Active allocs", _count), ("segment", "GPU reserved segments", _count),
            ("inactive_split", "Non-releasable allocs", _count))
    for key, title, fmt in rows:
        pools = [("all", title)] if abbreviated else [
            ("all", title), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        prefs = [int(stats.get(f"{key}.all.{m}", 0)) for m in _METRICS]
        for pool, name in pools:
            p = f"{key}.{pool}."
            lines.append(f" {name:<21} | " + " | ".join(
                fmt(int(stats.get(p + m, 0)), pref) for m, pref in zip(_METRICS, prefs)) + " ")
        lines.append(thin)
    for key, title in (("oversize_allocations", "Oversize allocations"), ("oversize_segments", "Oversize GPU segments")):
        figures = [int(stats.get(f"{key}.{m}", 0)) for m in _METRICS]
        lines.append(f" {title:<21} | " + " | ".join(_count(v, v) for v in figures) + " ")
        lines.append(thin)
    lines.append(rule)
    return "|" + "|\n|".join(lines) + "|\n"
