"""Run every torch.distributed example of the catalog on a 2-process group, translated to the CPU backend.

Usage: ``python tests/honesty/_dist_worker.py OUT.json``. Each rank turns
translation on (``torchdevice.use("cpu")``, ``torchdevice.patch()``) and calls
the examples of :data:`torchdevice.data.catalog_examples.DISTRIBUTED` in order
(``init_process_group("nccl", ...)`` first, ``destroy_process_group()`` last;
each send is paired with the peer's receive). Rank 0 writes, per function,
what happened on each rank: ``{"ok": true, "type": ...}`` or the exception.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import traceback


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _record(value) -> dict:
    return {"ok": True, "type": type(value).__name__}


def _call(results, name, fn, ctx, examples):
    args, kwargs = examples[name](ctx)
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 -- every outcome is reported to the test
        results[name] = {"ok": False, "error": type(exc).__name__, "message": str(exc),
                         "unsupported": type(exc).__name__ == "UnsupportedError",
                         "traceback": traceback.format_exc(limit=6)}
        return None
    results[name] = _record(value)
    return value


def worker(rank: int, world_size: int, init_method: str, scratch_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    import torchdevice
    from torchdevice import catalog, translate
    from torchdevice.data import catalog_examples as ex

    torchdevice.use("cpu")
    translate.patch()
    from torchdevice.data.catalog_examples import DistContext

    ctx = DistContext(rank, world_size, init_method)
    ctx.scratch["rendezvous_url"] = f"file://{scratch_dir}/rendezvous"
    returns = {e.name: ex.dist_documented_return(e.name, e.returns) for e in catalog.entries("DISTRIBUTED_COMPUTING")}
    results: dict = {}
    done: set = set()
    pending = []
    for name in ex.DISTRIBUTED:
        if name in done:
            continue
        order = [name]
        partner = ex.DIST_PAIRED.get(name)
        if partner is not None:
            order = [name, partner] if rank == 0 else [partner, name]
        for item in order:
            value = _call(results, item, getattr(dist, item), ctx, ex.DISTRIBUTED)
            done.add(item)
            if results[item]["ok"]:
                try:
                    results[item]["type_ok"] = ex.returns_ok(returns[item], value)
                except KeyError as exc:
                    results[item]["type_ok"] = False
                    results[item]["type_error"] = str(exc)
                results[item]["documented"] = returns[item]
            if item in ("isend", "irecv") and value is not None:
                pending.append(value)
        if name in ("isend", "irecv"):
            for work in pending:
                work.wait()
            pending.clear()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    translate.unpatch()


def main(out_path: str) -> int:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as out_dir:
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        mp.spawn(worker, args=(2, init_method, scratch, out_dir), nprocs=2, join=True)
        results = {}
        for rank in range(2):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                results[rank] = json.load(f)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
