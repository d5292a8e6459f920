"""The comparison's data: :class:`Collector` gathers the per-op records, :func:`report_dict` makes the report.

The report (JSON-ready dict) has:

* ``first_divergence``: the first op (or, at ``--level module``, module call) over tolerance, with its aten
  name, module path, program ``file:line``, phase and errors; ``None`` when there is none;
* ``ops``: one row per (op, module, location, phase), in the order first run, with its count, how many calls
  went over tolerance and the worst errors of its calls;
* ``modules``: one row per module path (ops run directly in it), in the order first seen, worst errors;
* ``whole_run``: the two whole runs' printed numbers compared line by line (or ``None`` when not run);
* ``failed``: each run that ended with a non-zero status (the program under compare, a whole run), with
  its exception's last line where known; empty when every run finished;
* ``random_ops``: the random ops (tagged ``nondeterministic_seeded``) that drew on backend B's device, one
  row per (op, module, location): each draws from its backend's own generator, so they are not compared
  op by op and explain whole runs that differ while no op does;
* ``autocast_dtypes``: under autocast, the ATen ops (``aten_op``) that ran in another dtype under the
  reference's autocast policy than under B's, with the torch function the program called (``op``), one
  row per function, op, module, location and dtype pair;
* ``summary``: counts (ops compared, over tolerance, reference failures, not re-run).
"""
from __future__ import annotations

import math
from typing import cast

_METRICS = ("max_abs", "max_rel", "cosine", "ulp")


class Collector:
    """Receives one record per op (from :class:`~torchdevice.compare.shadow.ShadowMode`) and aggregates."""

    def __init__(self) -> None:
        self.first_divergence: dict | None = None
        self.ops: dict[tuple, dict] = {}
        self.modules: dict[str, dict] = {}
        self.compared = 0
        self.diverged = 0
        self.reference_failed = 0
        self.failures: dict[str, int] = {}
        self.random: dict[tuple, dict] = {}
        self.autocast: dict[tuple, dict] = {}
        self.unprobed: dict[str, str] = {}  # functions the autocast probe could not run on the reference

    def record(self, entry: dict) -> None:
        status = entry.get("status", "")
        if status == "random":
            _count(self.random, entry, ("op", "module", "location", "device"))
            return
        if status == "autocast":
            _count(self.autocast, entry, ("op", "aten_op", "module", "location", "reference_dtype", "backend_dtype"))
            return
        if status == "autocast unprobed":
            self.unprobed.setdefault(entry["op"], entry["error"])
            return
        key = (entry["op"], entry["module"], entry["location"], entry["phase"])
        row = self.ops.get(key)
        if row is None:
            row = self.ops[key] = {"op": entry["op"], "module": entry["module"], "location": entry["location"],
                                   "phase": entry["phase"], "first_index": entry["index"], "calls": 0,
                                   "over_tolerance": 0, "reference_failed": 0}
        row["calls"] += 1
        if status.startswith("reference failed"):
            self.reference_failed += 1
            row["reference_failed"] += 1
            row.setdefault("note", status)
            self.failures[entry["op"]] = self.failures.get(entry["op"], 0) + 1
            return
        if "max_abs" not in entry:
            return
        self.compared += 1
        errs = {k: entry[k] for k in (*_METRICS, "within", "dtype", "shape", "rtol", "atol")}
        for k in _METRICS:
            row[k] = errs[k] if k not in row else (min if k == "cosine" else max)(row[k], errs[k])
        row.setdefault("dtype", errs["dtype"])
        module = self.modules.get(entry["module"])
        if module is None:
            module = self.modules[entry["module"]] = {"module": entry["module"], "ops": 0, "over_tolerance": 0}
        module["ops"] += 1
        for k in _METRICS:
            module[k] = errs[k] if k not in module else (min if k == "cosine" else max)(module[k], errs[k])
        if not errs["within"]:
            self.diverged += 1
            row["over_tolerance"] += 1
            module["over_tolerance"] += 1
            if self.first_divergence is None:
                self.first_divergence = {k: entry[k] for k in ("index", "op", "module", "location", "phase")}
                self.first_divergence["errors"] = errs

    def summary(self) -> dict:
        return {"ops_compared": self.compared, "ops_over_tolerance": self.diverged,
                "reference_failed": self.reference_failed, "reference_failed_ops": dict(self.failures),
                "autocast_unprobed": dict(self.unprobed)}


def _count(rows: dict[tuple, dict], entry: dict, fields: tuple[str, ...]) -> None:
    """One row per distinct ``fields`` of ``entry``, counting its calls."""
    key = tuple(entry[f] for f in fields)
    row = rows.get(key)
    if row is None:
        row = rows[key] = {**{f: entry[f] for f in fields}, "calls": 0}
    row["calls"] += 1


def _clean(value: object) -> object:
    """JSON has no infinity: inf/nan become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def report_dict(*, command: list[str], backends: tuple[str, str], level: str, collector: Collector | None,
                whole_run: dict | None, program_status: int | None, tolerance: dict, modules: list[dict] | None = None,
                module_first: dict | None = None, duration: float = 0.0, device_type: str | None = None,
                program_error: str | None = None) -> dict:
    """The report; ``device_type``: backend B's (its random ops are those that drew on it),
    ``program_error``: the exception that ended the program's run under compare, if one did."""
    from .. import __version__

    random_ops: list[dict] = []
    autocast_dtypes: list[dict] = []
    if collector is not None:
        first = collector.first_divergence
        ops = list(collector.ops.values())
        module_rows = list(collector.modules.values())
        summary = collector.summary()
        random_ops = [r for r in collector.random.values() if device_type is None or r["device"] == device_type]
        autocast_dtypes = list(collector.autocast.values())
    else:
        first, ops, module_rows = module_first, [], modules or []
        summary = {"modules_compared": len(module_rows),
                   "modules_over_tolerance": sum(1 for m in module_rows if m.get("over_tolerance"))}
    return cast(dict, _clean({
        "torchdevice": __version__,
        "command": command,
        "reference": backends[0],
        "backend": backends[1],
        "level": level,
        "tolerance": tolerance,
        "program_status": program_status,
        # at level tests pytest's status is the tests' outcomes, compared test by test instead
        "failed": [] if level == "tests" else _failures(backends, program_status, program_error, whole_run),
        "duration_s": round(duration, 3),
        "first_divergence": first,
        "summary": summary,
        "whole_run": whole_run,
        "ops": ops,
        "modules": module_rows,
        "random_ops": random_ops,
        "autocast_dtypes": autocast_dtypes,
    }))


def _failures(backends: tuple[str, str], status: int | None, error: str | None, whole_run: dict | None) -> list[dict]:
    """Each run that ended with a non-zero status: the program under compare (on B), each whole run."""
    failed = []
    if status:
        failed.append({"run": f"under compare on {backends[1]}", "exit_status": status, "error": error})
    for backend, code in ((whole_run or {}).get("exit_status") or {}).items():
        if code:
            failed.append({"run": f"whole run on {backend}", "exit_status": code,
                           "error": (whole_run or {}).get("errors", {}).get(backend)})
    return failed


def diverged(data: dict) -> bool:
    """Whether the report shows a divergence beyond tolerance (the command's exit status 1)."""
    whole = data.get("whole_run") or {}
    return data.get("first_divergence") is not None or whole.get("first_difference") is not None

