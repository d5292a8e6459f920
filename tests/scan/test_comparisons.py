"""``torchdevice scan`` explains what a comparison with a device string does under translation, and
what it says is what a translated run of the same lines does (checked here by running them)."""
from __future__ import annotations

import textwrap

import pytest

from torchdevice import scan, translate

PROGRAM = textwrap.dedent('''\
    import torch
    x = torch.ones(1, device="cuda")
    seen = {}
    seen[3] = x.device.type == "cuda"
    seen[4] = str(x.device) == "cuda:0"
    seen[5] = torch.device("cuda").type == "cuda"
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    seen[7] = device_type == "cuda"
    seen[8] = x.device.type != "cuda"
''')


def _uses(tmp_path, backend):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    report = scan.scan_paths([str(path)], backend=backend)
    return {u.line: u for u in report.uses if u.kind == "device" and u.context in (scan.COMPARE_REAL, scan.COMPARE_STRING)}


def _translated_run() -> dict:
    scope: dict = {}
    with translate.patched():
        exec(compile(PROGRAM, "prog.py", "exec"), scope)
    return scope["seen"]


def test_scan_says_what_the_comparison_does(tmp_path, on_cpu):
    uses = _uses(tmp_path, "cpu")
    assert sorted(uses) == [4, 5, 6, 8, 9]  # 1-based lines of the compared literals
    seen = _translated_run()
    for line, use in uses.items():
        result = seen[line - 1]
        if use.context == scan.COMPARE_REAL:
            assert use.status == "native" and "never matches" in use.note
            op_is_ne = "!=" in use.code
            assert result is op_is_ne, (line, use.code, result)  # '==' False, '!=' True, as the note says
        else:
            assert use.status == "translated" and "takes its cuda branch" in use.note
            assert result is True, (line, use.code)


def test_on_the_target_itself_the_comparison_is_native(tmp_path):
    uses = _uses(tmp_path, "cuda")
    assert uses and all(u.status == "native" and "behaves as without torchdevice" in u.note for u in uses.values())


@pytest.mark.parametrize("expr, real", [
    ("x.device.type", True), ("self.model.device.type", True), ("device.type", True), ("x.device", False),
    ("str(x.device)", True), ("torch.device('cuda').type", True), ("args.device", False),
    ("device_type", False), ("args.backend", False), ("x.type", False), ("cfg['device']", False),
])
def test_what_counts_as_a_device_torch_reports(expr, real):
    import ast

    assert scan._real_device_expr(ast.parse(expr, mode="eval").body) is real
