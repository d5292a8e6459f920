"""``--level module``: two independent runs, every module's outputs recorded and compared by module path.

For programs whose control flow lockstep would change (data-dependent branches, early stopping): B runs the
program in this process after the reference has run it in a process of its own (``python -m
torchdevice.compare.modules --backend A --out F PROGRAM...``); forward hooks record each module call's tensor
outputs (host copies) under ``<module path>#<call number>``, and the two records are compared in the order the
modules finished.
The errors are accumulated: a module's output carries every earlier difference.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from . import metrics
from .shadow import ModuleTracker


class _Recorder(ModuleTracker):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.tag_graph = False
        self.records: dict[str, list[torch.Tensor]] = {}
        self.calls: dict[str, int] = {}
        self.limit = limit

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: object) -> None:
        path = self.path
        super()._post(module, args, output)
        if len(self.records) >= self.limit:
            return
        n = self.calls[path] = self.calls.get(path, 0) + 1
        leaves, _ = tree_flatten(output)
        tensors = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                host = leaf.detach().to("cpu")
                same = type(host) is type(leaf) and host.device == leaf.device  # an alias of the live tensor
                tensors.append(host.clone() if same else host)
        if tensors:
            self.records[f"{path}#{n}"] = tensors


def record(backend: str, program: list[str], module: bool, out: str | None = None, limit: int = 100_000) -> tuple[int, dict]:
    """Run the program translated on ``backend`` with module outputs recorded: (exit status, records); the
    records are also saved to ``out`` when given (the reference's process hands them over that way)."""
    import torchdevice

    from .. import run as run_mod

    recorder = _Recorder(limit)
    status = 0
    try:
        with torchdevice.use(backend), recorder:
            status = run_mod.run(program[0], program[1:], module=module, backend=backend)
    except SystemExit as exc:
        status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    finally:
        if out is not None:
            torch.save({"status": status, "records": recorder.records}, out)
    return status, recorder.records


def compare_records(ref: dict, out: dict, rtol: float | None = None, atol: float | None = None) -> tuple[list, dict | None]:
    """Module rows (one per module path, worst over its calls) and the first module call over tolerance."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small ops: woken for each, torch's threads cost 15x the arithmetic beside MLX's
    try:
        return _compare_records(ref, out, rtol, atol)
    finally:
        torch.set_num_threads(threads)


def _compare_records(ref: dict, out: dict, rtol: float | None, atol: float | None) -> tuple[list, dict | None]:
    rows: dict[str, dict] = {}
    first = None
    for index, (key, outs) in enumerate(out.items(), 1):
        refs = ref.get(key)
        path = key.rsplit("#", 1)[0]
        row = rows.setdefault(path, {"module": path, "calls": 0, "over_tolerance": 0})
        row["calls"] += 1
        if refs is None:
            row["note"] = "not run by the reference"
            continue
        found = None
        for o, r in zip(outs, refs):
            found = metrics.worst(found, metrics.errors(o, r, rtol, atol))
        if found is None:
            continue
        for k in ("max_abs", "max_rel", "ulp"):
            row[k] = max(row.get(k, 0.0), found[k])
        row["cosine"] = min(row.get("cosine", 1.0), found["cosine"])
        if not found["within"]:
            row["over_tolerance"] += 1
            if first is None:
                first = {"index": index, "op": None, "module": path, "call": key, "location": None,
                         "phase": "forward", "errors": found}
    return list(rows.values()), first


def run_both(backends: tuple[str, str], program: list[str], module: bool, rtol: float | None = None,
             atol: float | None = None) -> tuple[list, dict | None, dict]:
    """Record the reference's run in a process of its own, then B's in this one, and compare: (module rows, first
    divergence, exit statuses)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "reference.pt")
        cmd = [sys.executable, "-m", "torchdevice.compare.modules", "--backend", backends[0], "--out", path,
               *(["-m"] if module else []), *program]
        env = dict(os.environ)
        env.pop("TORCHDEVICE_BACKEND", None)
        # the reference computes on one torch thread, as the op level's reference work does: on a small, shared
        # machine torch's thread pool made the reference's run 2-3x slower and its time erratic
        env["OMP_NUM_THREADS"] = "1"
        # one after the other: run side by side, the two processes' torch (and MLX) thread pools oversubscribe
        # a small machine's cores (measured 4.2x a plain run on 2 cores, against 2.5x in turn)
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = proc.stderr
        status, records = record(backends[1], program, module)
        if not os.path.exists(path):
            raise RuntimeError(f"the {backends[0]} run recorded nothing (exit status {proc.returncode}): "
                               f"{err.strip()[-500:]}")
        ref = torch.load(path, weights_only=False)["records"]
    rows, first = compare_records(ref, records, rtol, atol)
    return rows, first, {backends[0]: proc.returncode, backends[1]: status}


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m torchdevice.compare.modules")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("-m", dest="module", action="store_true")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    return record(args.backend, args.program, args.module, args.out)[0]


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
