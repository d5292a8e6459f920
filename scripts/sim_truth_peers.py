"""The peers of sim's truth run (``python scripts/sim_truth.py --peers [--nanogpt CHECKOUT]``).

- ``PROGRAMS``: CUDA-written framework programs that go through the run's own check (compare on cpu,sim and
  sim alone): HF Trainer over every visible GPU (2 sim devices: ``nn.DataParallel``; sim_truth.ORACLES also
  runs it over 1), diffusers' UNet2D trained under fp16 and bf16 autocast in channels_last.
- nanoGPT (a checkout given): its ``train.py`` in bfloat16 through the same check (the autocast policies
  differ by design: the cause is named), and ``peer_nanogpt.py --backends cpu,sim`` in float32 without
  dropout, where every loss on sim must equal the CPU backend's.
- transformers' own model tests: ``peer_transformers.py --backends cpu,sim`` (natively, then translated
  onto each), wanting no test that passes natively to fail translated.
- torchvision and timm: Faster R-CNN under fp16 autocast (roi_align's autocast rule) and timm's training
  recipe (mixup, AMP, channels_last) through the same check, run by ``--vision-python`` (an environment
  that holds them: torchvision's PyPI wheels need a CUDA build of their one torch, so ``tox -e
  torch-newest``'s); where they do not load, the row says why.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
PROGRAMS = ["tests/frameworks/trainer_dataparallel.py", "tests/frameworks/diffusers_unet_amp.py"]
#: program -> the module it needs (probed first: the row says why where it does not load)
VISION = {"tests/frameworks/torchvision_detection_amp.py": "torchvision.ops", "tests/frameworks/timm_train.py": "timm"}
NANOGPT_COMPARE_ITERS = 2
NANOGPT_ITERS = 6


def _script(args: list[str], cwd: Path = ROOT, python: str = sys.executable) -> tuple[int, float, str]:
    """``python ARGS...``: (exit status, wall seconds, stdout and stderr)."""
    started = time.perf_counter()
    done = subprocess.run([python, *args], cwd=cwd, capture_output=True, text=True)
    return done.returncode, time.perf_counter() - started, done.stdout + done.stderr


def nanogpt_compare(checkout: Path, check: Callable[..., dict]) -> dict:
    """nanoGPT's train.py in bfloat16 (dropout off, not compiled) through sim_truth.check: a program row."""
    sys.path.insert(0, str(SCRIPTS))
    import peer_nanogpt

    dataset = peer_nanogpt.write_dataset(checkout)
    args = peer_nanogpt.train_settings(dataset, NANOGPT_COMPARE_ITERS, "0.0", "bfloat16", "False",
                                       checkout / "out-torchdevice-compare")
    row = check("train.py", args=args, cwd=checkout)
    row["program"] = f"nanoGPT train.py (bfloat16, {NANOGPT_COMPARE_ITERS} iterations)"
    return row


def nanogpt_losses(checkout: Path) -> dict:
    """peer_nanogpt.py --backends cpu,sim in float32 without dropout: every loss equal."""
    status, seconds, output = _script([str(SCRIPTS / "peer_nanogpt.py"), str(checkout), "--backends", "cpu,sim",
                                       "--iters", str(NANOGPT_ITERS)])
    lines = [line for line in output.splitlines() if line.startswith(("cpu", "sim"))]
    return {"peer": f"nanoGPT train.py (float32, no dropout, {NANOGPT_ITERS} iterations), cpu and sim",
            "result": "; ".join(lines) or output.strip()[-500:], "seconds": round(seconds), "ok": status == 0}


def transformers_tests() -> dict:
    """peer_transformers.py --backends cpu,sim: the counts per side and each backend's regressions."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sides.json"
        status, seconds, output = _script([str(SCRIPTS / "peer_transformers.py"), "--backends", "cpu,sim",
                                           "--json", str(out)])
        found = json.loads(out.read_text()) if out.exists() else None
    peer = "transformers' own model tests (BERT, Llama, GPT-2), native, cpu and sim"
    if found is None:
        return {"peer": peer, "result": f"failed ({status}): {output.strip()[-500:]}", "seconds": round(seconds),
                "ok": False}
    sides = found["sides"]
    native = sides["native"]
    parts = []
    for side, outcomes in sides.items():
        counts = {k: sum(1 for o in outcomes.values() if o == k) for k in ("passed", "failed", "skipped")}
        lost = [t for t, o in native.items() if o == "passed" and outcomes.get(t) != "passed"]
        parts.append(f"{side} {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
                     + (f", {len(lost)} native passes lost: {', '.join(lost)}" if lost else ""))
    return {"peer": peer, "result": "; ".join(parts), "seconds": round(seconds), "ok": status == 0}


def vision(check: Callable[..., dict], python: str) -> tuple[list[dict], list[dict]]:
    """torchvision's and timm's programs (:data:`VISION`) through ``check`` with ``python``, where the library
    loads beside that interpreter's torch: (program rows, peer rows saying why a library's program did not run).
    torchvision's wheels are built for one torch each (0.28 for 2.13, 0.29 for 2.14), and the CUDA builds
    PyPI has need torch's CUDA libraries: beside a CPU-only torch they do not load."""
    programs, peers = [], []
    for program, probe in VISION.items():
        status, seconds, output = _script(["-c", f"import {probe}, torch; print(torch.__version__)"], python=python)
        lines = [line for line in output.splitlines() if line.strip()]
        name = probe.split(".")[0]
        if status:
            peers.append({"peer": f"{name} program (`{program}`)", "seconds": round(seconds), "ok": True,
                          "result": f"not run: {name} does not load beside this torch ({lines[-1] if lines else status})"})
            continue
        row = check(program, python=python)
        row["environment"] = f"torch {lines[-1]}, {python}"
        programs.append(row)
    return programs, peers


def run(nanogpt: Path | None, check: Callable[..., dict], python: str = sys.executable) -> tuple[list[dict], list[dict]]:
    """(program rows for sim_truth's table, peer rows for :func:`table`)."""
    programs, peers = [], []
    if nanogpt is None:
        peers.append({"peer": "nanoGPT", "result": "not run: no checkout given (--nanogpt)", "seconds": 0,
                      "ok": True})
    else:
        checkout = nanogpt.resolve()
        programs.append(nanogpt_compare(checkout, check))
        peers.append(nanogpt_losses(checkout))
    peers.append(transformers_tests())
    more, why_not = vision(check, python)
    programs += more
    peers += why_not
    for row in peers:
        print(f"{row['peer']}: {'ok' if row['ok'] else 'NOT OK'}", file=sys.stderr, flush=True)
    return programs, peers


def table(rows: list[dict]) -> str:
    lines = ["| peer | result | wall |", "|---|---|---:|"]
    lines += [f"| {r['peer']} | {r['result']} | {r['seconds']} s |" for r in rows]
    return "\n".join(lines)
