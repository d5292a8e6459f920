"""Whole-run comparison: the program run once on each backend (``torchdevice run --backend X`` in a process
of its own), every number it prints compared line by line.

Numbers are the floats and integers in each stdout line (``step 3 loss 1.2345e-01``: 3 and 0.12345); a line
*differs* when its text without the numbers differs, when it holds a different count of numbers, or when a
pair of numbers is farther apart than ``atol + rtol * |reference|``. The first such line is reported, with
the largest drift seen over all lines: the error the whole run accumulates, beside each op's own.
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)\b", re.IGNORECASE)

#: (rtol, atol) for printed numbers when --rtol/--atol are not given: printed values are usually rounded
WHOLE_RUN_TOLERANCE = (1e-4, 1e-6)


def numbers(line: str) -> tuple[list[float], str]:
    """The numbers in ``line`` and the line with each replaced by ``#``."""
    found = [float(m.group()) for m in _NUMBER.finditer(line)]
    return found, _NUMBER.sub("#", line)


def compare_outputs(ref: str, out: str, rtol: float | None = None, atol: float | None = None) -> dict:
    """Compare two programs' stdout texts line by line (module docstring)."""
    d_rtol, d_atol = WHOLE_RUN_TOLERANCE
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    ref_lines, out_lines = ref.splitlines(), out.splitlines()
    first = None
    max_abs = max_rel = 0.0
    compared = 0
    for n, (r_line, o_line) in enumerate(zip(ref_lines, out_lines), 1):
        r_nums, r_text = numbers(r_line)
        o_nums, o_text = numbers(o_line)
        why = None
        if r_text != o_text or len(r_nums) != len(o_nums):
            why = "the text differs"
        else:
            for r, o in zip(r_nums, o_nums):
                compared += 1
                if math.isnan(r) and math.isnan(o):
                    continue
                diff = abs(o - r) if not (math.isinf(r) and r == o) else 0.0
                max_abs = max(max_abs, diff)
                if r != 0:
                    max_rel = max(max_rel, diff / abs(r))
                if not diff <= atol + rtol * abs(r) and why is None:
                    why = f"{o!r} against {r!r} (|diff| {diff:.3g})"
        if why is not None and first is None:
            first = {"line": n, "reference": r_line, "backend": o_line, "why": why}
    if first is None and len(ref_lines) != len(out_lines):
        n = min(len(ref_lines), len(out_lines)) + 1
        first = {"line": n, "reference": ref_lines[n - 1] if n <= len(ref_lines) else None,
                 "backend": out_lines[n - 1] if n <= len(out_lines) else None, "why": "one output is longer"}
    return {"lines": [len(ref_lines), len(out_lines)], "numbers_compared": compared, "max_abs": max_abs,
            "max_rel": max_rel, "rtol": rtol, "atol": atol, "first_difference": first}


def run_program(backend: str, program: list[str], module: bool, timeout: float | None = None) -> tuple[int, str, str]:
    """Run ``torchdevice run --backend BACKEND [-m] PROGRAM...`` in a new process: (status, stdout, stderr)."""
    cmd = [sys.executable, "-m", "torchdevice", "run", "--backend", backend, *(["-m"] if module else []), *program]
    env = dict(os.environ)
    env.pop("TORCHDEVICE_BACKEND", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def whole_run(backends: tuple[str, str], program: list[str], module: bool, rtol: float | None = None,
              atol: float | None = None) -> dict:
    """Both runs and their comparison: the dict of :func:`compare_outputs` with each run's exit status."""
    statuses = []
    outputs = []
    errors = {}
    for backend in backends:
        status, out, err = run_program(backend, program, module)
        statuses.append(status)
        outputs.append(out)
        if status != 0:
            outputs[-1] = out + "".join(f"[stderr] {line}\n" for line in err.splitlines()[-3:])
            errors[backend] = next((line for line in reversed(err.splitlines()) if line.strip()), None)
    result = compare_outputs(outputs[0], outputs[1], rtol, atol)
    result["exit_status"] = {backends[0]: statuses[0], backends[1]: statuses[1]}
    result["errors"] = errors  # a failed run's last line on stderr (its exception, usually)
    if statuses[0] != statuses[1] and result["first_difference"] is None:
        result["first_difference"] = {"line": None, "reference": None, "backend": None,
                                      "why": f"exit status {statuses[1]} against {statuses[0]}"}
    return result
