"""Two torchrun agents on this machine (``--nnodes 2 --nproc-per-node 2``, c10d rendezvous on 127.0.0.1)
run the CUDA-written FSDP2 + TP + DCP program (tests/dist_programs/fsdp2_tp_dcp.py) translated, then its
native CPU/gloo port the same way; every number of the 4 ranks must be equal. Outside the default test
run (8 processes, about a minute on 2 cores); tests/distributed/test_fsdp2_tp_dcp.py runs it with
TORCHDEVICE_MULTINODE_TESTS=1. Exits 0 when equal::

    python scripts/multinode_fsdp2.py [--backend cpu|sim] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "dist_programs"
NODES, PER_NODE = 2, 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(program: Path, out: Path, backend: str | None, timeout: float = 400) -> None:
    """Start ``NODES`` torchrun agents meeting at a c10d rendezvous on localhost; raise if one fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["PYTHONUNBUFFERED"] = "1"
    if backend is not None:
        env["TORCHDEVICE_BACKEND"] = backend
    port = _free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node", str(PER_NODE),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"issue31-{port}"]
    cmd += ["-m", "torchdevice", "run"] if backend is not None else []
    cmd += [str(program), str(out)]
    agents = [subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True) for _ in range(NODES)]
    failed = []
    for agent in agents:
        output, _ = agent.communicate(timeout=timeout)
        if agent.returncode != 0:
            failed.append(output[-4000:])
    if failed:
        raise RuntimeError(f"{program.name}: an agent failed:\n" + "\n".join(failed))


def _differences(got: object, expected: object, where: str) -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(got, dict) or got.keys() != expected.keys():
            return [f"{where}: keys differ"]
        return [d for k in expected for d in _differences(got[k], expected[k], f"{where}/{k}")]
    assert isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)
    same = got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected)
    return [] if same else [f"{where}: {got} != {expected}"]


def compare(backend: str, root: Path) -> list[str]:
    """Run both sides under ``root``; the differences (empty: every number equal)."""
    translated, native = root / "translated", root / "native"
    launch(PROGRAMS / "fsdp2_tp_dcp.py", translated, backend)
    launch(PROGRAMS / "fsdp2_tp_dcp_native.py", native, None)
    differences = []
    for rank in range(NODES * PER_NODE):
        t, n = torch.load(translated / f"rank{rank}.pt"), torch.load(native / f"rank{rank}.pt")
        differences += _differences(t, n, f"rank {rank}")
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--out", help="keep the runs' files here (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        differences = compare(args.backend, Path(args.out or tmp))
    print("\n".join(differences) or f"{NODES} nodes x {PER_NODE} ranks on {args.backend}: every number equal")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
