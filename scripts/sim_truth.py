"""sim's truth run over the project's own programs: each through ``torchdevice compare --backends cpu,sim``
(wanting 0 ops over tolerance, and a named cause -- random ops, autocast -- where the whole runs differ)
and through ``torchdevice run --backend sim`` alone (wanting it to run). One command::

    python scripts/sim_truth.py [--json OUT] [--peers [--nanogpt CHECKOUT] [--vision-python PY]] [PROGRAM ...]

Default programs: ``examples/*.py`` and ``tests/programs/*.py``. ``examples/ddp_train.py`` runs as rank
0 of a world of 1 (compare is one process). ``--peers`` adds the project's peers (``sim_truth_peers.py``):
the CUDA-written framework programs (HF Trainer over 2 sim devices, checked against 1 device too; diffusers'
UNet2D under fp16/bf16 autocast in channels_last), nanoGPT's own ``train.py`` (with ``--nanogpt``),
transformers' own model tests on cpu and sim, and torchvision's and timm's programs (run by
``--vision-python``, an environment that holds them; where they do not load, the row says why). Prints
Markdown tables (those in docs/testing.md) under the date and the machine's load; exits non-zero when an
op went over tolerance, a run failed, the whole runs differ with no cause named, or a peer fell short.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: program -> (environment, rtol, label): sim alone's printed numbers must match the same program's on sim under
#: that environment. HF Trainer over 2 sim devices (nn.DataParallel) against 1, the global batch the same.
ORACLES = {"tests/frameworks/trainer_dataparallel.py": ({"CUDA_VISIBLE_DEVICES": "0"}, 1e-6, "2 devices against 1")}
#: program -> the keys of its last printed line (JSON) that describe the machine, not the computation: each
#: backend answers them for itself (sim has 2 devices, the cpu backend 1; each counts its own memory)
MACHINE_FACTS = {"tests/programs/accelerator_mnist.py": frozenset({"device_count", "allocated"})}


def machine_facts(program: str, whole: dict) -> str:
    """The cause of a whole-run difference that lies only in ``MACHINE_FACTS[program]``, read from the two last
    lines ("" where the program has none, or where anything else differs: another line, another key)."""
    first = whole.get("first_difference") or {}
    facts = MACHINE_FACTS.get(program)
    if not facts or first.get("line") is None or whole.get("lines") != [first["line"]] * 2:
        return ""
    try:
        reference, backend = json.loads(first["reference"]), json.loads(first["backend"])
    except (TypeError, ValueError):
        return ""
    differing = sorted(k for k in reference.keys() | backend.keys() if reference.get(k) != backend.get(k))
    return f"machine facts ({', '.join(differing)})" if differing and set(differing) <= facts else ""


def _setup(program: str, tmp: str) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment a program needs."""
    if program.endswith("ddp_train.py"):
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        return ["--out", tmp], env
    return [], {}


def _run(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[int, float, str, str]:
    """(exit status, wall seconds, the last line of stderr, stdout)."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    tail = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "")
    return proc.returncode, time.perf_counter() - started, tail, proc.stdout


def _oracle(program: str, args: list[str], env: dict[str, str], cwd: Path, sim_stdout: str,
            python: str = sys.executable) -> tuple[str, bool]:
    """sim alone's output against the same program on sim under ``ORACLES[program]`` (one device for two):
    what the printed numbers did, and whether they matched ('-' and True where the program has no such oracle)."""
    if program not in ORACLES:
        return "-", True
    from torchdevice.compare import wholerun

    extra, rtol, label = ORACLES[program]
    status, _, tail, stdout = _run([python, "-m", "torchdevice", "run", "--backend", "sim", program, *args],
                                   env | extra, cwd)
    if status:
        return f"{label}: failed: {tail}", False
    found = wholerun.compare_outputs(stdout, sim_stdout, rtol=rtol, atol=0.0)
    within = found["first_difference"] is None
    return f"{label}: {'within' if within else 'NOT within'} rtol {rtol:g} (max rel {found['max_rel']:.2g})", within


def check(program: str, args: list[str] | None = None, cwd: Path = ROOT, python: str = sys.executable) -> dict:
    """Compare on cpu,sim and run on sim alone: the row of the table. ``args``: the program's own (default:
    what :func:`_setup` gives it); ``cwd``: where it runs (``program`` relative to it); ``python``: the
    interpreter (another environment's, for libraries this one cannot hold)."""
    with tempfile.TemporaryDirectory() as tmp:
        own, extra = _setup(program, tmp)
        args = own if args is None else args
        env = {k: v for k, v in os.environ.items() if k != "TORCHDEVICE_BACKEND"} | extra
        report = os.path.join(tmp, "report.json")
        status, compare_s, tail, _ = _run([python, "-m", "torchdevice", "compare", "--backends", "cpu,sim",
                                           "--out", report, program, *args], env, cwd)
        data = json.loads(Path(report).read_text()) if os.path.exists(report) else {}
        sim_status, sim_s, sim_tail, sim_stdout = _run([python, "-m", "torchdevice", "run", "--backend", "sim",
                                                        program, *args], env | {"MASTER_PORT": str(_free_port())}, cwd)
        oracle, oracle_ok = _oracle(program, args, env, cwd, sim_stdout, python) if sim_status == 0 else ("-", True)
    summary = data.get("summary", {})
    whole = data.get("whole_run") or {}
    differs = whole.get("first_difference") is not None
    causes = [machine_facts(program, whole) if differs else "",
              f"{sum(r['calls'] for r in data.get('random_ops', []))} random calls" if data.get("random_ops") else "",
              f"{len(data['autocast_dtypes'])} autocast dtypes" if data.get("autocast_dtypes") else ""]
    row = {"program": program, "compare_status": status, "ops_compared": summary.get("ops_compared"),
           "over_tolerance": summary.get("ops_over_tolerance"), "reference_failed": summary.get("reference_failed"),
           "whole_run_differs": differs, "causes": ", ".join(c for c in causes if c) or "-",
           "failed": [f"{f['run']}: {f.get('error')}" for f in data.get("failed", [])] or ([tail] if not data else []),
           "compare_s": round(compare_s, 1), "sim_status": sim_status, "sim_s": round(sim_s, 1),
           "sim_error": sim_tail if sim_status else "", "oracle": oracle}
    row["ok"] = (bool(data) and not row["failed"] and row["over_tolerance"] == 0 and sim_status == 0
                 and (not differs or row["causes"] != "-") and oracle_ok)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| program | ops compared | over tolerance | whole run | causes named | compare | sim alone | oracle on sim |",
             "|---|---:|---:|---|---|---|---|---|"]
    for r in rows:
        failed = "; ".join(r["failed"])
        where = f" ({r['environment']})" if r.get("environment") else ""
        lines.append(f"| `{r['program']}`{where} | {r['ops_compared']} | {r['over_tolerance']} | "
                     f"{'differs' if r['whole_run_differs'] else 'equal'} | {r['causes']} | "
                     f"{'failed: ' + failed if failed else 'ran'} ({r['compare_s']} s) | "
                     f"{'ran' if r['sim_status'] == 0 else 'failed: ' + r['sim_error']} ({r['sim_s']} s) | "
                     f"{r['oracle']} |")
    return "\n".join(lines)


def measured() -> str:
    """When and on what: the date, torch, the cores and the load average (the runs are timed)."""
    import torch

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"Measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, torch {torch.__version__}, "
            f"{os.cpu_count()} cores, load average {load} (1, 5, 15 min)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help="default: examples/*.py and tests/programs/*.py")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--peers", action="store_true", help="the peers too (sim_truth_peers.py)")
    parser.add_argument("--nanogpt", type=Path, help="with --peers: a karpathy/nanoGPT checkout")
    parser.add_argument("--vision-python", default=sys.executable,
                        help="with --peers: the interpreter for torchvision's and timm's programs, of an environment "
                             "that holds them (.tox/torch-newest/bin/python); default this one")
    args = parser.parse_args(argv)
    programs = args.programs or sorted(
        os.path.relpath(p, ROOT) for pattern in ("examples/*.py", "tests/programs/*.py")
        for p in glob.glob(str(ROOT / pattern)))
    print(measured() + " at the start", flush=True)
    if args.peers:
        import sim_truth_peers  # beside this file

        programs += sim_truth_peers.PROGRAMS
    rows = []
    for program in programs:
        rows.append(check(program))
        print(f"{program}: {'ok' if rows[-1]['ok'] else 'NOT OK'}", file=sys.stderr, flush=True)
    peers: list[dict] = []
    if args.peers:
        more, peers = sim_truth_peers.run(args.nanogpt, check, args.vision_python)
        rows += more
    print(table(rows))
    if peers:
        print("\n" + sim_truth_peers.table(peers))
    print("\n" + measured() + " at the end")
    if args.json:
        Path(args.json).write_text(json.dumps({"programs": rows, "peers": peers}, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows + peers) else 1


if __name__ == "__main__":
    sys.exit(main())
