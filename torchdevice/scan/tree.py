"""Scanning a tree: which files (:func:`iter_files`), in this process or a pool, the status of each
use on a backend (:func:`status_lookup`, from :mod:`torchdevice.matrix`), the :class:`ScanReport`."""
from __future__ import annotations

import fnmatch
import os
import sys
import time
from typing import Callable, Iterable, Iterator, Sequence

from .analysis import _scan_chunk, _scan_file
from .results import UNKNOWN, ScanError, ScanReport, Use
from .syntax import COMPARE_REAL, COMPARE_STRING

#: Trees with at least this many files are scanned by a process pool.
PARALLEL_THRESHOLD = 256

SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules"})
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")
SOURCE_SUFFIXES = (".py", ".pyw")


# -- walking --------------------------------------------------------------------


def iter_files(paths: Iterable[str], default_excludes: bool = True, exclude: Sequence[str] = ()) -> Iterator[str]:
    """Yield the Python files under ``paths`` in a stable order (see the module doc)."""
    seen: set[str] = set()

    def excluded(name: str, path: str) -> bool:
        return any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(path, pat) for pat in exclude)

    def walk(top: str) -> Iterator[str]:
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        if default_excludes and any(e.name in ENV_MARKERS for e in entries):
            return
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if default_excludes and (name.startswith(".") or name in SKIP_DIRS):
                    continue
                if exclude and excluded(name, entry.path):
                    continue
                yield from walk(entry.path)
            elif name.endswith(SOURCE_SUFFIXES):
                if exclude and excluded(name, entry.path):
                    continue
                try:
                    if not entry.is_file():
                        continue
                except OSError:
                    continue
                yield entry.path

    for top in paths:
        if os.path.isdir(top):
            files: Iterable[str] = walk(top)
        else:
            files = [top]
        for path in files:
            key = os.path.normpath(path)
            if key not in seen:
                seen.add(key)
                yield path


# -- statuses -------------------------------------------------------------------


def status_lookup(backend: str | None) -> tuple[Callable[[str], tuple[str, str]], str]:
    """Return ``(lookup, note)``: ``lookup(api) -> (status, note)`` on ``backend``.

    Statuses come from ``torchdevice.matrix.status_for`` (imported only when a backend is asked for);
    with no backend every status is ``"unknown"`` and ``note`` says so.
    """
    if backend is None:
        return (lambda api: (UNKNOWN, "")), "no statuses: no backend"
    from ..matrix import status_for

    cache: dict[str, tuple[str, str]] = {}

    def lookup(api: str) -> tuple[str, str]:
        hit = cache.get(api)
        if hit is None:
            try:
                answer = status_for(api, backend)
            except Exception as exc:  # a broken matrix entry must not stop a scan
                hit = (UNKNOWN, f"status lookup failed: {type(exc).__name__}: {exc}")
            else:
                if answer is None:
                    hit = (UNKNOWN, "")
                else:
                    status, note = answer
                    hit = (getattr(status, "value", str(status)), note or "")
            cache[api] = hit
        return hit

    return lookup, ""


def _compare_effect(api: str, context: str, literal: str, status: str) -> tuple[str, str]:
    """What a comparison with a device literal does under translation (see :data:`COMPARE_REAL`)."""
    family = api.partition(":")[2]
    if status == "native":  # the target's own device type (cuda on the cuda backend): compares as natively
        return status, f"{family} is the target's own device type: the comparison behaves as without torchdevice"
    if context == COMPARE_REAL:
        return "native", (
            f"compares with the device torch reports, which is the target's real one under translation: "
            f"{literal!r} never matches (the comparison is False, `!=` True), so the program takes its "
            f"non-{family} branch here; `x.is_{family}` is translated and True for the target's tensors")
    if status == UNKNOWN:
        return status, ""
    return status, (
        f"compares the program's own string: it holds {literal!r} when the program chose {family} "
        f"(torch.{family}.is_available() is True for the source family under translation), so the "
        f"program takes its {family} branch; the string is translated where it reaches torch")


# -- the scan -------------------------------------------------------------------------


def scan_paths(
    paths: Sequence[str],
    backend: str | None = None,
    *,
    jobs: int | None = None,
    default_excludes: bool = True,
    exclude: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
    lookup: Callable[[str], tuple[str, str]] | None = None,
) -> ScanReport:
    """Scan every Python file under ``paths``; statuses are those on ``backend``.

    ``jobs`` is the number of worker processes (default: the CPU count; 1
    scans in this process); a pool is only used for :data:`PARALLEL_THRESHOLD`
    files or more. ``progress(done, total)`` is called as files complete.
    """
    start = time.perf_counter()
    files = list(iter_files(paths, default_excludes, exclude))
    total = len(files)
    report = ScanReport(paths=list(paths), backend=backend, files_scanned=total)
    if jobs is None:
        try:
            jobs = len(os.sched_getaffinity(0))  # the CPUs this process may use (containers, taskset)
        except (AttributeError, OSError):
            jobs = os.cpu_count() or 1
    jobs = max(1, min(jobs, 32, total // 64 or 1))
    results: list[tuple[str, list[tuple], ScanError | None]] = []
    if progress:
        progress(0, total)
    if jobs > 1 and total >= PARALLEL_THRESHOLD:
        results = _scan_parallel(files, jobs, progress)
    else:
        step = max(1, total // 200)
        for i, path in enumerate(files, 1):
            results.append(_scan_file(path))
            if progress and (i % step == 0 or i == total):
                progress(i, total)
    if lookup is None:
        lookup, report.backend_note = status_lookup(backend)
    order = {p: i for i, p in enumerate(files)}
    results.sort(key=lambda r: order[r[0]])
    for path, found, error in results:
        if error is not None:
            report.errors.append(error)
        for line, col, api, kind, context, detail, code in found:
            status, note = lookup(api)
            if kind == "device" and context in (COMPARE_REAL, COMPARE_STRING):
                status, note = _compare_effect(api, context, detail, status)
            report.uses.append(Use(path, line, col, api, kind, context, detail, code, status, note))
    report.elapsed_s = time.perf_counter() - start
    return report


def _scan_parallel(files, jobs, progress):
    import concurrent.futures as cf
    import multiprocessing as mp

    # fork (where it is the safe default, Linux) avoids re-importing torch in every worker
    method = "fork" if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods() else None
    ctx = mp.get_context(method)
    size = max(8, min(256, len(files) // (jobs * 8)))
    chunks = [files[i:i + size] for i in range(0, len(files), size)]
    results = []
    done = 0
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(_scan_chunk, chunk) for chunk in chunks]
        for fut in cf.as_completed(futures):
            part = fut.result()
            results.extend(part)
            done += len(part)
            if progress:
                progress(done, len(files))
    return results
