"""sim's truth run over the project's own programs: each through ``torchdevice compare --backends cpu,sim``
(wanting 0 ops over tolerance, and a named cause -- random ops, autocast -- where the whole runs differ)
and through ``torchdevice run --backend sim`` alone (wanting it to run). One command::

    python scripts/sim_truth.py [--json OUT] [PROGRAM ...]

Default programs: ``examples/*.py`` and ``tests/programs/*.py``. ``examples/ddp_train.py`` runs as rank
0 of a world of 1 (compare is one process). Prints a Markdown table (the one in docs/testing.md); exits
non-zero when an op went over tolerance, a run failed, or the whole runs differ with no cause named.
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


def _setup(program: str, tmp: str) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment a program needs."""
    if program.endswith("ddp_train.py"):
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        return ["--out", tmp], env
    return [], {}


def _run(cmd: list[str], env: dict[str, str]) -> tuple[int, float, str]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "")
    return proc.returncode, time.perf_counter() - started, tail


def check(program: str) -> dict:
    """Compare on cpu,sim and run on sim alone: the row of the table."""
    with tempfile.TemporaryDirectory() as tmp:
        args, extra = _setup(program, tmp)
        env = {k: v for k, v in os.environ.items() if k != "TORCHDEVICE_BACKEND"} | extra
        report = os.path.join(tmp, "report.json")
        status, compare_s, tail = _run([sys.executable, "-m", "torchdevice", "compare", "--backends", "cpu,sim",
                                        "--out", report, program, *args], env)
        data = json.loads(Path(report).read_text()) if os.path.exists(report) else {}
        sim_status, sim_s, sim_tail = _run([sys.executable, "-m", "torchdevice", "run", "--backend", "sim",
                                            program, *args], env | {"MASTER_PORT": str(_free_port())})
    summary = data.get("summary", {})
    whole = data.get("whole_run") or {}
    differs = whole.get("first_difference") is not None
    causes = [f"{sum(r['calls'] for r in data.get('random_ops', []))} random calls" if data.get("random_ops") else "",
              f"{len(data['autocast_dtypes'])} autocast dtypes" if data.get("autocast_dtypes") else ""]
    row = {"program": program, "compare_status": status, "ops_compared": summary.get("ops_compared"),
           "over_tolerance": summary.get("ops_over_tolerance"), "reference_failed": summary.get("reference_failed"),
           "whole_run_differs": differs, "causes": ", ".join(c for c in causes if c) or "-",
           "failed": [f"{f['run']}: {f.get('error')}" for f in data.get("failed", [])] or ([tail] if not data else []),
           "compare_s": round(compare_s, 1), "sim_status": sim_status, "sim_s": round(sim_s, 1),
           "sim_error": sim_tail if sim_status else ""}
    row["ok"] = (bool(data) and not row["failed"] and row["over_tolerance"] == 0 and sim_status == 0
                 and (not differs or row["causes"] != "-"))
    return row


def table(rows: list[dict]) -> str:
    lines = ["| program | ops compared | over tolerance | whole run | causes named | compare | sim alone |",
             "|---|---:|---:|---|---|---|---|"]
    for r in rows:
        failed = "; ".join(r["failed"])
        lines.append(f"| `{r['program']}` | {r['ops_compared']} | {r['over_tolerance']} | "
                     f"{'differs' if r['whole_run_differs'] else 'equal'} | {r['causes']} | "
                     f"{'failed: ' + failed if failed else 'ran'} ({r['compare_s']} s) | "
                     f"{'ran' if r['sim_status'] == 0 else 'failed: ' + r['sim_error']} ({r['sim_s']} s) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help="default: examples/*.py and tests/programs/*.py")
    parser.add_argument("--json", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    programs = args.programs or sorted(
        os.path.relpath(p, ROOT) for pattern in ("examples/*.py", "tests/programs/*.py")
        for p in glob.glob(str(ROOT / pattern)))
    rows = []
    for program in programs:
        rows.append(check(program))
        print(f"{program}: {'ok' if rows[-1]['ok'] else 'NOT OK'}", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
