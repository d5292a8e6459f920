"""The compatibility matrix: how every catalog function behaves on every installed backend.

``torchdevice matrix [--backend NAME] [--format md|json] [--write FILE]``
answers the seed catalog's empty CPU/CUDA/MPS/MLX columns (see
:mod:`torchdevice.catalog`) from the code: each status is *derived* from what
the backends register -- the status tags on their Ops operations
(:func:`torchdevice.backend.status_of`) read through the same specification
table (:data:`torchdevice.namespaces.SPECS`) that builds the functions when
translation is on -- plus a declared kind for facade-level functions that map
to no operation (``is_available``, ``get_device_properties`` ...). Nothing
here is a hand-kept table of answers.

A backend's Ops objects come from its plugin's family hooks, which need no
hardware: the matrix covers every *installed* backend (cpu, mlx, and cuda,
mps, xpu, mtia when their plugins are installed), available on this machine
or not. ``torch.distributed`` statuses come from :mod:`torchdevice.distributed`,
AMP's from :mod:`torchdevice.amp`, ``torch.cuda.comm``'s from the backend's
collectives operations.

``docs/compatibility.md`` is ``torchdevice matrix --write docs/compatibility.md``;
``tests/test_matrix.py`` fails when it is stale.

:func:`status_for` answers for one API (used by ``torchdevice scan``). Besides
real API names it accepts these pseudo-API names for uses that are not calls:

============================== ================================================================
``torch.cuda.X``               any fronted function or class, also spelled ``torch.cuda.memory.X``,
                               ``torch.cuda.random.X``, ``torch.cuda.streams.X``, ``torch.cuda.graphs.X``,
                               ``torch.cuda.nvtx.X``, ``torch.cuda.comm.X`` (mps, xpu, mtia alike)
``torch.distributed.X``        a ``torch.distributed`` function
``torch.cuda.amp.X``           AMP: ``torch.cuda.amp.autocast``, ``torch.amp.GradScaler``, ``torch.autocast`` ...;
                               ``torch.cuda.amp`` alone means ``torch.cuda.amp.autocast``
``torch.backends.cudnn.X``     a cuDNN flag or query (``benchmark``, ``deterministic``, ``allow_tf32``,
                               ``enabled``, ``is_available`` ...)
``torch.backends.cuda.X``      ``torch.backends.cuda.matmul.allow_tf32`` and the other cuda backend flags
``torch.backends.mps.X``       ``torch.backends.mps.is_available`` / ``is_built``
``device:cuda``                a device string or ``torch.device`` of that type (``"cuda"``, ``"cuda:1"``,
                               ``torch.device("cuda", 1)``); likewise ``device:mps``, ``device:xpu``,
                               ``device:mtia``, ``device:cpu``
``.cuda()``                    ``Tensor.cuda()`` / ``Module.cuda()``; likewise ``.xpu()``, ``.mtia()``;
                               ``.is_cuda`` (and ``.is_xpu`` ...) for the tensor property
``dist-backend:nccl``          a ``torch.distributed`` engine name (``"nccl"``, ``"xccl"``, ``"gloo"`` ...)
============================== ================================================================
"""
from __future__ import annotations

import argparse
import json
import threading
from dataclasses import dataclass
from typing import Any, Iterable

from . import amp, catalog, distributed, namespaces, plugins, router
from .backend import Status
from .router import Target
from .vocabulary import SOURCE_FAMILIES

#: The project's own backends, in the order the matrix shows them (others follow, by name).
PROJECT_BACKENDS = ("cpu", "mlx", "cuda", "mps", "xpu", "mtia", "sim")

STATUS_ORDER = (Status.NATIVE, Status.TRANSLATED, Status.EMULATED, Status.NOOP, Status.UNSUPPORTED)
LEGEND = {
    Status.NATIVE: "passed through to torch untouched (or the backend's own function of that name)",
    Status.TRANSLATED: "the backend's real equivalent, under another name or shape",
    Status.EMULATED: "the real semantics, implemented by torchdevice or the backend's plugin",
    Status.NOOP: "does nothing, because doing nothing is the correct semantics on that backend",
    Status.UNSUPPORTED: "raises torchdevice.UnsupportedError naming the function, the backend and what to use instead",
}

_lock = threading.RLock()
_views: dict[str, Target] = {}
_view_problems: dict[str, list[str]] = {}
_cache: dict[tuple[str, str], tuple[Status, str] | None] = {}


def _invalidate() -> None:
    with _lock:
        _views.clear()
        _view_problems.clear()
        _cache.clear()


router.on_change(_invalidate)


# -- backends -------------------------------------------------------------------------------------


def installed_backends() -> list[str]:
    """Every installed backend (a plugin that declared it), the project's first, in matrix order."""
    names = [r.name for r in router.discover().values() if r.device_type is not None]
    known = [b for b in PROJECT_BACKENDS if b in names]
    return known + sorted(n for n in names if n not in PROJECT_BACKENDS)


def view(name: str) -> Target:
    """The :class:`~torchdevice.router.Target` of backend ``name``, built from its plugin's hooks.

    The active backend's is the router's resolved one; any other backend's is built
    by calling its family hooks, which need no hardware (its device count taken as 1).
    """
    with _lock:
        cached = _views.get(name)
        if cached is not None:
            return cached
        records = router.discover()
        record = records.get(name)
        if record is None or record.device_type is None:
            known = ", ".join(installed_backends())
            raise ValueError(f"unknown backend {name!r}; installed backends: {known}")
        active = router._active
        if active is not None and active.name == name:
            result = active
            problems: list[str] = []
        else:
            errors: list[plugins.Problem] = []
            families: dict[str, Any] = {}
            for family in ("memory", "streams", "rng", "collectives"):
                _, families[family] = plugins.call_first(f"torchdevice_{family}", errors, name=name)
            result = Target(name, record.device_type, 1, **families, priority=record.priority or 0,
                            owner=record.plugin)
            problems = [str(e) for e in errors]
        _views[name] = result
        _view_problems[name] = problems
        return result


def _default_backend() -> str:
    try:
        return router.active().name
    except Exception:  # no backend resolvable: answer for the built-in one
        return "cpu"


# -- statuses --------------------------------------------------------------------------------------


def _as_status(answer: tuple[Any, Any] | None) -> tuple[Status, str] | None:
    if answer is None:
        return None
    status, note = answer
    return Status(status), str(note or "")


def _amp(v: Target, api: str) -> tuple[Status, str] | None:
    if v.device_type == "cuda" and api.startswith("torch.cuda."):
        return Status.NATIVE, f"torch.cuda itself: code written for cuda runs untranslated on the {v.name} backend"
    table = amp.status_for(v)
    if api == "torch.cuda.amp":
        api = "torch.cuda.amp.autocast"
    return _as_status(table.get(api))


def amp_apis(v: Target) -> list[str]:
    """The AMP APIs :mod:`torchdevice.amp` answers for on backend ``v``, sorted."""
    return sorted(amp.status_for(v))


def _distributed(v: Target, api: str) -> tuple[Status, str]:
    try:
        return distributed.status(api, v)
    except KeyError:  # not a function of the catalog
        return Status.NATIVE, (
            "passed through to torch.distributed untouched (torchdevice.distributed declares no translation)")


def _dist_backend(v: Target, name: str) -> tuple[Status, str] | None:
    """A ``torch.distributed`` engine name used by the program (``"nccl"``) on backend ``v``."""
    engine = getattr(v.collectives, "dist_backend", None)
    if name == engine:
        return Status.NATIVE, f"the {v.name} backend's own torch.distributed engine"
    foreign = distributed._foreign_engines(v.device_type, [t for t in SOURCE_FAMILIES if t != v.device_type])
    if name in foreign:
        init = _distributed(v, "torch.distributed.init_process_group")
        if init[0] is Status.UNSUPPORTED:
            return init
        return Status.TRANSLATED, (
            f"process groups asked for {name!r} are created on {engine!r}, the {v.name} backend's engine"
        )
    return Status.NATIVE, f"{name!r} is passed to torch as it is (usable where this torch build has it)"


_FLAG_NATIVE = {"is_available", "version", "is_built", "is_acceptable"}


def _backend_flag(v: Target, api: str) -> tuple[Status, str] | None:
    parts = api.split(".")
    if len(parts) < 4:
        return None
    family, leaf = parts[2], parts[-1]
    if family == "mps":
        if leaf == "is_available":
            return namespaces.api_status(v, api)
        return Status.NATIVE, "a fact about this torch build, passed through"
    if family not in ("cudnn", "cuda"):
        return None
    if leaf in _FLAG_NATIVE:
        return Status.NATIVE, "a fact about this torch build (what it was compiled with), passed through"
    if v.device_type == "cuda":
        return Status.NATIVE, f"torch's own {family} flag, honoured by the {v.name} backend's kernels"
    what = "cuDNN" if family == "cudnn" else "cuBLAS/CUDA"
    return Status.NOOP, (
        f"torch stores the flag and reads it back; the {v.name} backend runs no {what} kernels, so it has no "
        "effect (every value is honoured trivially)"
    )


def _device_use(v: Target, kind: str, device_type: str) -> tuple[Status, str] | None:
    if device_type == "cpu" and kind == "device":
        return Status.NATIVE, "explicit cpu stays on the CPU"
    if device_type not in SOURCE_FAMILIES:
        return None
    if device_type == v.device_type:
        return Status.NATIVE, f"{device_type} is the {v.name} backend's own device type: nothing to translate"
    target = "cpu (CPU tensors carry no index)" if v.device_type == "cpu" else f"{v.device_type} (index kept)"
    if kind == "device":
        return Status.TRANSLATED, f"{device_type!r} and {device_type}:N map to the {v.name} backend's {target}"
    if kind == "method":
        return Status.TRANSLATED, f"moves to the {v.name} backend's device: {target}"
    return Status.TRANSLATED, f"True for tensors on the {v.name} backend's device, where {device_type} tensors live"


def _compute(v: Target, api: str) -> tuple[Status, str] | None:
    answer = namespaces.api_status(v, api)
    if answer is not None:
        return answer
    if api.startswith("torch.distributed."):
        return _distributed(v, api)
    if api.startswith("dist-backend:"):
        return _dist_backend(v, api.partition(":")[2].strip().lower())
    if api.startswith(("torch.cuda.amp", "torch.amp.", "torch.autocast")) or api in (
        "torch.is_autocast_enabled", "torch.set_autocast_enabled", "torch.get_autocast_dtype",
        "torch.set_autocast_dtype", "torch.get_autocast_gpu_dtype", "torch.set_autocast_gpu_dtype",
    ):
        return _amp(v, api)
    if api.startswith("torch.backends."):
        return _backend_flag(v, api)
    if api.startswith("device:"):
        return _device_use(v, "device", api.partition(":")[2].partition(":")[0].strip().lower())
    if api.startswith(".") and api.endswith("()"):
        return _device_use(v, "method", api[1:-2])
    if api.startswith(".is_"):
        return _device_use(v, "property", api[4:])
    return None


def status_for(api: str, backend: str | None = None) -> tuple[Status, str] | None:
    """``(Status, note)`` of ``api`` on ``backend`` (default: the backend that is or would be active).

    ``api`` is a dotted API name or one of the pseudo-API names in the module
    docstring; None when torchdevice has nothing to say about it (a torch API
    that involves no device). Cheap after the first call per backend (cached).
    """
    name = backend or _default_backend()
    key = (name, api)
    with _lock:
        if key in _cache:
            return _cache[key]
    result = _compute(view(name), api)
    with _lock:
        _cache[key] = result
    return result


# -- the matrix -----------------------------------------------------------------------------------


@dataclass
class Row:
    api: str
    section: str  #: the catalog section, or "" for an API fronted beyond the catalog
    statuses: dict[str, tuple[Status, str]]
    entry: catalog.Entry | None = None


def _resolve_backends(backends: Iterable[str] | str | None) -> list[str]:
    if backends is None:
        return installed_backends()
    if isinstance(backends, str):
        backends = [backends]
    installed = installed_backends()
    for name in backends:
        if name not in installed:
            raise ValueError(f"unknown backend {name!r}; installed backends: {', '.join(installed)}")
    return list(backends)


def rows(backends: Iterable[str] | str | None = None) -> list[Row]:
    """One :class:`Row` per catalog function, in catalog order."""
    names = _resolve_backends(backends)
    result = []
    for entry in catalog.entries():
        statuses = {}
        for b in names:
            answer = status_for(entry.api, b)
            if answer is None:  # every catalog function must have a defined behaviour
                raise AssertionError(f"no status for catalog function {entry.api} on {b}")
            statuses[b] = answer
        result.append(Row(entry.api, entry.section, statuses, entry))
    return result


def extra_rows(backends: Iterable[str] | str | None = None) -> list[Row]:
    """APIs torchdevice fronts beyond the catalog (classes, nvtx, comm, aliases, AMP)."""
    names = _resolve_backends(backends)
    in_catalog = {e.api for e in catalog.entries()}
    apis: list[str] = []
    for ns in SOURCE_FAMILIES:
        apis += [a for a in namespaces.fronted(ns) if a not in in_catalog]
    apis += namespaces.accelerator.apis()
    if names:
        apis += [a for a in amp_apis(view(names[0])) if a not in in_catalog and a not in apis]
    result = []
    for api in apis:
        statuses = {}
        for b in names:
            answer = status_for(api, b)
            if answer is not None:
                statuses[b] = answer
        result.append(Row(api, "", statuses))
    return result


def property_rows(backends: Iterable[str] | str | None = None) -> list[Row]:
    """One row per field of CUDA's device properties (:data:`torchdevice.backend.CUDA_PROPERTY_FIELDS`):
    what ``get_device_properties(i).<field>`` answers on each backend."""
    from .backend import CUDA_PROPERTY_FIELDS
    from .capability import FILLED
    from .cpu import CPUBackend

    names = _resolve_backends(backends)
    result = []
    for name in CUDA_PROPERTY_FIELDS:
        statuses: dict[str, tuple[Status, str]] = {}
        for b in names:
            if view(b).device_type == "cuda":
                statuses[b] = (Status.NATIVE, "the real CUDA property (translated namespaces carry the same value)")
            elif b == CPUBackend.name:
                statuses[b] = (Status.TRANSLATED, CPUBackend.PROPERTY_NOTES.get(name) or FILLED[name])
            else:
                if name in ("name", "total_memory"):
                    rest = ""
                elif name == "is_integrated" and view(b).device_type != "cpu":
                    rest = "; 0 where it gives none"
                else:
                    rest = f"; where it gives none, {FILLED[name]}" if name in FILLED else "; 0 where it gives none"
                statuses[b] = (Status.TRANSLATED, f"the {b} backend's value{rest}")
        result.append(Row(f"get_device_properties().{name}", "", statuses))
    return result


def counts(table: list[Row], backends: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """``{section: {backend: {status: n}}}``."""
    result: dict = {}
    for row in table:
        per = result.setdefault(row.section, {})
        for b in backends:
            st = row.statuses[b][0].value
            per.setdefault(b, {s.value: 0 for s in STATUS_ORDER})[st] += 1
    return result


def data(backends: Iterable[str] | str | None = None) -> dict[str, Any]:
    """The matrix as a JSON-ready dict."""
    names = _resolve_backends(backends)
    table = rows(names)

    def encode(row: Row) -> dict:
        out: dict[str, Any] = {"api": row.api}
        if row.entry is not None:
            out.update(section=row.section, arguments=list(row.entry.arguments),
                       more_arguments=row.entry.more_arguments, returns=row.entry.returns)
        out["status"] = {b: {"status": s.value, "note": n} for b, (s, n) in row.statuses.items()}
        return out

    return {
        "backends": names,
        "legend": {s.value: LEGEND[s] for s in STATUS_ORDER},
        "counts": counts(table, names),
        "functions": [encode(r) for r in table],
        "also_fronted": [encode(r) for r in extra_rows(names)],
        "device_properties": [encode(r) for r in property_rows(names)],
        "problems": {b: _view_problems.get(b, []) for b in names if _view_problems.get(b)},
    }


def render_json(backends: Iterable[str] | str | None = None) -> str:
    return json.dumps(data(backends), indent=1) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _own_name(note: str, backend: str) -> str:
    return note.replace("the <backend> backend", f"the {backend} backend").replace("backend <backend>", f"backend {backend!r}")


def _notes_block(row: Row, names: list[str]) -> str:
    groups: dict[tuple[str, str], list[str]] = {}
    for b in names:
        if b in row.statuses:
            st, note = row.statuses[b]
            # notes that differ only by the backend's own name are shown once
            note = note.replace(f"the {b} backend", "the <backend> backend").replace(f"backend {b!r}", "backend <backend>")
            groups.setdefault((st.value, note), []).append(b)
    parts = [
        # a note shown for one backend names it; "<backend>" stands only for several
        f"{', '.join(bs)}: {_own_name(note, bs[0]) if len(bs) == 1 else note or st}"
        if note else f"{', '.join(bs)}: {st}"
        for (st, note), bs in groups.items()
    ]
    return f"- `{row.api}` — " + "; ".join(_md_cell(p) for p in parts)


def render_md(backends: Iterable[str] | str | None = None) -> str:
    """The matrix as Markdown (what ``docs/compatibility.md`` holds)."""
    names = _resolve_backends(backends)
    table = rows(names)
    extras = extra_rows(names)
    single = len(names) == 1
    out = [
        "# Compatibility matrix",
        "",
        f"<!-- generated by `torchdevice matrix --write docs/compatibility.md`; do not edit. backends: {','.join(names)} -->",
        "",
        "How every device function of the seed catalog behaves on each installed torchdevice backend while "
        "translation is on (`torchdevice.patch()` / `torchdevice run`). The statuses are derived from the "
        "code -- the status tags on each backend's operations, read through the table that also builds the "
        "translated functions -- so this page cannot drift from what a call does (`tests/honesty/test_published_status.py` "
        "calls every function on the CPU backend to check). Backends whose hardware is absent are derived "
        "the same way: no hardware is needed to read their operations.",
        "",
        "A namespace run on its own device type is not translated: `torch.cuda` on the `cuda` backend is "
        "torch's own, hence native.",
        "",
        "`torch.cuda.is_available()` is True while translating, also on an accelerator-less backend (cpu, "
        "mlx), so CUDA-only programs take their GPU path; set `TORCHDEVICE_REPORT_AVAILABLE=0` (or "
        "`torchdevice.patch(report_available=False)`) to make it False, with `device_count()` 0.",
        "",
        "Only the *source family* -- the device type the program is written for: `cuda` by default, else "
        "`TORCHDEVICE_SOURCE=mps|xpu|mtia` (`torchdevice run --source`, `torchdevice.patch(source=...)`) -- "
        "reports a device: the other translated namespaces' `is_available()` is False and `device_count()` 0 "
        "(`torch.backends.mps.is_available()` too unless the source is mps; `is_nccl_available()` is True "
        "for cuda, `is_xccl_available()` for xpu), while their other functions translate as listed. The "
        "statuses below hold whatever the source family.",
        "",
        "A query answered from a reading of the host (a note ending \"elsewhere SensorUnavailableError\": "
        "the cpu backend's `clock_rate`, `temperature`, `power_draw`) keeps its status on a host that exposes no "
        "such reading, and raises `torchdevice.SensorUnavailableError` there, saying what was tried and what to "
        "use instead -- as CUDA raises without NVML; never a made-up number.",
        "",
        "| status | meaning |",
        "|---|---|",
    ]
    out += [f"| {s.value} | {LEGEND[s]} |" for s in STATUS_ORDER]
    out += ["", "## Summary", "", "| section | backend | " + " | ".join(s.value for s in STATUS_ORDER) + " |",
            "|---|---|" + "---:|" * len(STATUS_ORDER)]
    for section, per in counts(table, names).items():
        label = f"{catalog.SECTION_NAMESPACE[section]} ({sum(per[names[0]].values())})"
        for b in names:
            out.append(f"| {label} | {b} | " + " | ".join(str(per[b][s.value]) for s in STATUS_ORDER) + " |")
    for section in catalog.SECTIONS:
        section_rows = [r for r in table if r.section == section]
        out += ["", f"## {catalog.SECTION_NAMESPACE[section]} ({len(section_rows)} functions)", ""]
        out += _md_table(section_rows, names, single)
    if extras:
        out += ["", "## Also fronted (not in the catalog)", "",
                "Classes, submodule spellings, NVTX, `torch.cuda.comm`, AMP entry points and `torch.accelerator` "
                "(answering as the source family's namespace: `torch.cuda` here) that translation gives a "
                "behaviour too.", ""]
        out += _md_table(extras, names, single)
    out += ["", "## Device properties", "",
            "Every field of `torch.cuda.get_device_properties(i)` (torch's `_CudaDeviceProperties`; likewise "
            "`torch.xpu`/`mps`/`mtia`'s) as a translated program reads it. A query is answered honestly in "
            "CUDA's shape: 0 means the device has no such thing, or it cannot be read. torch's own code "
            "(inductor, the profiler) reads the real machine's properties instead (the boundary rule, README).", ""]
    out += _md_table(property_rows(names), names, single)
    out += _plugin_sections(names)
    return "\n".join(out) + "\n"


def _plugin_sections(names: list[str]) -> list[str]:
    """Markdown a backend's plugin object adds about itself: its ``compatibility_markdown()``, if it defines
    one (the mlx plugin: its ATen lowerings checked against torch's OpInfo database)."""
    out: list[str] = []
    records = router.discover()
    for name in names:
        record = records.get(name)
        obj = plugins.pm.get_plugin(record.plugin) if record is not None else None
        extra = getattr(obj, "compatibility_markdown", None)
        text = extra() if callable(extra) else None
        if text:
            out += ["", text.rstrip("\n")]
    return out


def _md_table(table: list[Row], names: list[str], single: bool) -> list[str]:
    if single:
        b = names[0]
        lines = ["| function | status | note |", "|---|---|---|"]
        for row in table:
            st, note = row.statuses.get(b, (None, ""))
            lines.append(f"| `{row.api}` | {st.value if st else '-'} | {_md_cell(note)} |")
        return lines
    lines = ["| function | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row in table:
        cells = [row.statuses[b][0].value if b in row.statuses else "-" for b in names]
        lines.append(f"| `{row.api}` | " + " | ".join(cells) + " |")
    lines += ["", "<details><summary>notes</summary>", ""]
    lines += [_notes_block(row, names) for row in table]
    lines += ["", "</details>"]
    return lines


# -- command line ------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help="only this backend (repeatable); default: every installed backend")
    parser.add_argument("--format", choices=("md", "json"), default="md", help="output format (default: md)")
    parser.add_argument("--write", metavar="FILE", help="write to FILE instead of standard output")


def run(args: argparse.Namespace) -> int:
    import sys

    try:
        text = render_json(args.backend) if args.format == "json" else render_md(args.backend)
    except ValueError as exc:
        print(f"torchdevice matrix: error: {exc}", file=sys.stderr)
        return 2
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
