"""``torchdevice scan``: the static porting scan (torchdevice/scan.py).

The fixtures under tests/fixtures/scan mark every expected use with a
trailing ``# expect: API[; API]`` comment. Markers are stripped (line numbers
kept) before scanning, so a marker's own words cannot make a line match.
"""
from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchdevice import cli, scan
from torchdevice.scan import SEVERITY, ScanReport, Use, parse_fail_on, scan_paths, scan_source

FIXTURES = Path(__file__).parents[1] / "fixtures" / "scan"
MARKER = re.compile(r"\s*# expect: (.*)$")


def _marked(name: str) -> tuple[str, list[tuple[int, str]]]:
    """The fixture's source without markers, and the (line, api) pairs they expect."""
    lines, expected = [], []
    for number, line in enumerate((FIXTURES / name).read_text().splitlines(), 1):
        m = MARKER.search(line)
        if m:
            expected += [(number, api.strip()) for api in m.group(1).split(";")]
            line = line[: m.start()]
        lines.append(line)
    return "\n".join(lines) + "\n", sorted(expected)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "torchdevice", "scan", *args], capture_output=True, text=True,
                          env=full_env, cwd=Path(__file__).parents[2])


# -- detection --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["aliases.py", "categories.py"])
def test_every_marked_use_is_found_and_nothing_else(name):
    source, expected = _marked(name)
    assert expected, "fixture without markers"
    found = sorted((u.line, u.api) for u in scan_source(source, name))
    assert found == expected


def test_markers_are_not_what_makes_lines_match():
    # aliases.py relies on alias words: `tc.synchronize()` has no accelerator word of its own
    source, _ = _marked("aliases.py")
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.startswith("tc.synchronize()"))
    assert "cuda" not in source.splitlines()[line - 1]
    assert [(u.api, u.kind) for u in scan_source(source) if u.line == line] == [("torch.cuda.synchronize", "namespace")]


def test_no_false_positives():
    source = (FIXTURES / "negatives.py").read_text()
    assert scan_source(source) == []


@pytest.mark.parametrize("code", [
    "cuda_count = count_cuda_devices()\nn = cuda_count + 1",  # names that merely contain cuda
    'doc = "cudart docs"',
    '"""torch.cuda.synchronize() in a module docstring"""',
    "def f():\n    'cuda'\n",
    "print(args.cuda, opt.mps, cfg.xpu)",
    'x = "cuda device"',
    'x = "CUDA"',
    'm = {"CUDA_ERROR_INVALID_VALUE": 1}',  # an env-like name outside an environment position
    "from numba import cuda\ncuda.synchronize()",
    "import torch\ndef f(torch):\n    return torch.cuda.synchronize()",
    "import torch\ntorch = None\ntorch.cuda.synchronize()",
])
def test_not_a_use(code):
    assert scan_source(code) == []


def test_columns_contexts_and_details():
    uses = scan_source(
        'import torch\n'
        'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"\n'
        'x = torch.zeros(1, device="cuda:1").to(f"cuda:{rank}")\n'
        'd = torch.device("xpu", 0)\n'
    )
    got = [(u.line, u.col, u.api, u.kind, u.context, u.detail) for u in uses]
    assert got == [
        (2, 10, "device:cuda", "device", "", "cuda"),
        (2, 20, "torch.cuda.is_available", "namespace", "call", ""),
        (3, 27, "device:cuda", "device", "device=", "cuda:1"),
        (3, 40, "device:cuda", "device", ".to()", "cuda:{}"),
        (4, 18, "device:xpu", "device", "torch.device", "xpu"),
    ]
    assert uses[0].code == 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"'


def test_columns_count_characters_not_bytes():
    (use,) = scan_source('label = "héllo"; y = x.cuda()\n')
    assert (use.line, use.col, use.api) == (1, 22, ".cuda()")


def test_scopes_and_rebinding():
    code = (
        "import torch\n"
        "from torch import cuda\n"
        "def f(cuda):\n"
        "    cuda.synchronize()\n"  # parameter
        "def g():\n"
        "    cuda.synchronize()\n"  # module alias
        "def h():\n"
        "    cuda = make()\n"
        "    cuda.synchronize()\n"  # local variable
        "class C:\n"
        "    cuda = False\n"  # a class attribute does not rebind the module name
        "cuda.synchronize()\n"
        "cuda = None\n"
        "cuda.synchronize()\n"  # rebound at module level
    )
    assert [(u.line, u.api) for u in scan_source(code)] == [(6, "torch.cuda.synchronize"), (12, "torch.cuda.synchronize")]


def test_multiline_statement_and_decorator_lines():
    code = (
        "import torch\n"
        "x = torch.zeros(\n"
        "    3,\n"
        "    device='mps',\n"
        ")\n"
        "@torch.cuda.amp.custom_fwd\n"
        "def f():\n"
        "    pass\n"
    )
    assert [(u.line, u.api) for u in scan_source(code)] == [(4, "device:mps"), (6, "torch.cuda.amp.custom_fwd")]


def test_python2_and_syntax_errors_raise_from_scan_source():
    with pytest.raises(SyntaxError):
        scan_source((FIXTURES / "py2_legacy.py").read_text())


# -- trees ----------------------------------------------------------------------------


def _no_status(api):
    return "unknown", ""


def test_tree_scan_reports_unparsable_files_and_goes_on():
    report = scan_paths([str(FIXTURES)], None, lookup=_no_status)
    errors = {Path(e.path).name: e for e in report.errors}
    assert set(errors) == {"broken_syntax.py", "py2_legacy.py"}
    assert errors["py2_legacy.py"].line == 4 and "print" in errors["py2_legacy.py"].message
    assert errors["broken_syntax.py"].line == 3 and errors["broken_syntax.py"].kind == "syntax"
    files = {Path(u.path).name for u in report.uses}
    assert files == {"aliases.py", "categories.py", "train.py", "infer.py"}
    assert report.files_scanned == 9  # aliases categories negatives py2 broken + pkg/{__init__,train,infer,plain}


def test_null_bytes_and_undecodable_files_are_errors(tmp_path):
    (tmp_path / "nul.py").write_bytes(b"import torch\x00\ntorch.cuda.synchronize()\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\ny = 'cuda'\n")  # not UTF-8, no coding cookie
    (tmp_path / "cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'; y = t.cuda()\n")
    report = scan_paths([str(tmp_path)], None, lookup=_no_status)
    assert sorted(Path(e.path).name for e in report.errors) == ["latin.py", "nul.py"]
    assert [(Path(u.path).name, u.line, u.col, u.api) for u in report.uses] == [("cookie.py", 2, 15, ".cuda()")]


def _tree(root: Path) -> None:
    use = "import torch\ntorch.cuda.synchronize()\n"
    for rel in ["app/main.py", "app/.hidden/h.py", ".git/hooks/x.py", "app/__pycache__/c.py",
                "venv/lib/python3.11/site-packages/dep.py", "env2/lib/p.py", "conda/lib/c.py",
                "node_modules/n.py", "app/notes.txt", "app/tool.pyw", "build/gen.py"]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(use)
    (root / "env2" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / "conda" / "conda-meta").mkdir()


def test_default_excludes(tmp_path):
    _tree(tmp_path)
    names = sorted(os.path.relpath(p, tmp_path) for p in scan.iter_files([str(tmp_path)]))
    assert names == ["app/main.py", "app/tool.pyw", "build/gen.py"]
    everything = sorted(os.path.relpath(p, tmp_path) for p in scan.iter_files([str(tmp_path)], default_excludes=False))
    assert len(everything) == 10 and "app/notes.txt" not in everything
    # a path named explicitly is scanned even where the walk would skip it; --exclude globs
    assert list(scan.iter_files([str(tmp_path / "app/.hidden")])) == [str(tmp_path / "app/.hidden/h.py")]
    assert list(scan.iter_files([str(tmp_path / "app/notes.txt")])) == [str(tmp_path / "app/notes.txt")]
    kept = sorted(os.path.relpath(p, tmp_path) for p in scan.iter_files([str(tmp_path)], exclude=["build", "*.pyw"]))
    assert kept == ["app/main.py"]


@pytest.mark.subprocess  # scan's own process pool: not seen from the test's code (tests/spawning.py)
def test_process_pool_gives_the_same_report(tmp_path):
    n = scan.PARALLEL_THRESHOLD + 44
    for i in range(n):
        body = f"import torch\nx = torch.ones({i}).to('cuda:{i % 3}')\n" if i % 2 else f"y = {i}\n"
        (tmp_path / f"d{i % 7}").mkdir(exist_ok=True)
        (tmp_path / f"d{i % 7}" / f"m{i}.py").write_text(body)
    (tmp_path / "d0" / "bad.py").write_text("print 'cuda'\n")
    progress = []
    serial = scan_paths([str(tmp_path)], None, jobs=1, lookup=_no_status)
    pooled = scan_paths([str(tmp_path)], None, jobs=2, lookup=_no_status, progress=lambda d, t: progress.append((d, t)))
    assert pooled.uses == serial.uses and pooled.errors == serial.errors
    assert len(serial.uses) == n // 2 and len(serial.errors) == 1 and serial.files_scanned == n + 1
    assert progress[0] == (0, n + 1) and progress[-1] == (n + 1, n + 1)


# -- statuses and --fail-on --------------------------------------------------------------


def test_statuses_come_from_the_matrix_or_are_unknown():
    import torchdevice

    backend = torchdevice.current_backend()
    report = scan_paths([str(FIXTURES / "categories.py")], backend)
    try:
        from torchdevice.matrix import status_for
    except ImportError:
        assert {u.status for u in report.uses} == {"unknown"}
        return
    for use in report.uses:
        answer = status_for(use.api, backend)
        if use.context in (scan.COMPARE_REAL, scan.COMPARE_STRING):
            continue  # a compared device string says what the comparison does (tests/scan/test_comparisons.py)
        if answer is None:
            assert (use.status, use.note) == ("unknown", "")
        else:
            assert (use.status, use.note) == (answer[0].value, answer[1])


def test_the_long_tail_of_cuda_submodule_functions_is_rated(tmp_path):
    program = tmp_path / "tail.py"
    program.write_text(
        "import torch\n"
        "torch.cuda.nccl.version()\n"
        "torch.cuda.memory._record_memory_history(max_entries=100000)\n"
        "torch.cuda.memory._snapshot()\n"
        "torch.cuda.memory._dump_snapshot('snapshot.pickle')\n"
        "torch.cuda.tunable.enable(True)\n"
        "torch.cuda.caching_allocator_disabled()\n"
    )
    report = scan_paths([str(program)], "cpu")
    statuses = {u.api: u.status for u in report.uses}
    assert statuses == {
        "torch.cuda.nccl.version": "unsupported", "torch.cuda.memory._record_memory_history": "unsupported",
        "torch.cuda.memory._snapshot": "translated", "torch.cuda.memory._dump_snapshot": "translated",
        "torch.cuda.tunable.enable": "unsupported", "torch.cuda.caching_allocator_disabled": "no-op",
    }, statuses


def test_parse_fail_on():
    assert parse_fail_on("unsupported") == {"unsupported"}
    assert parse_fail_on("emulated") == {"emulated", "unsupported"}
    assert parse_fail_on("native") == set(SEVERITY)
    assert parse_fail_on("unsupported, unknown") == {"unsupported", "unknown"}
    assert parse_fail_on("noop,error") == {"no-op", "emulated", "unsupported", "error"}
    for bad in ("", "fatal", "unsupported,bogus"):
        with pytest.raises(ValueError):
            parse_fail_on(bad)


def _report_with(*statuses: str) -> ScanReport:
    report = ScanReport(paths=["x"], backend="cpu")
    report.uses = [Use("x.py", i, 1, f"api{i}", "namespace", status=s) for i, s in enumerate(statuses, 1)]
    return report


def test_failing_uses():
    report = _report_with("native", "no-op", "emulated", "unknown")
    assert [u.status for u in report.failing(parse_fail_on("unsupported"))] == []
    assert [u.status for u in report.failing(parse_fail_on("emulated"))] == ["emulated"]
    assert [u.status for u in report.failing(parse_fail_on("translated"))] == ["no-op", "emulated"]
    assert [u.status for u in report.failing(parse_fail_on("unknown"))] == ["unknown"]


def test_fail_on_exit_codes(monkeypatch, capsys):
    statuses = {"torch.cuda.synchronize": "no-op", "torch.cuda.memory_allocated": "emulated",
                "torch.cuda.get_device_capability": "unsupported", ".cuda()": "translated", "device:cuda": "native"}
    monkeypatch.setattr(scan, "status_lookup", lambda backend: ((lambda api: (statuses.get(api, "unknown"), "")), ""))
    pkg = str(FIXTURES / "project")
    infer = str(FIXTURES / "project/pkg/infer.py")
    cases = [
        ([pkg], None, 0),
        ([pkg], "unsupported", 1),
        ([infer], "unsupported", 0),
        ([infer], "translated", 1),
        ([infer], "no-op", 0),
        ([infer], "native", 1),
        ([pkg], "unknown", 0),
        ([str(FIXTURES / "aliases.py")], "unknown", 1),
        ([pkg], "error", 0),
        ([str(FIXTURES / "py2_legacy.py")], "error", 1),
        ([str(FIXTURES / "py2_legacy.py")], "unsupported", 0),  # a parse error alone is not fatal
        ([pkg], "fatal", 2),
    ]
    for paths, fail_on, rc in cases:
        argv = ["scan", *paths, "--format", "json"] + (["--fail-on", fail_on] if fail_on else [])
        assert cli.main(argv) == rc, (paths, fail_on)
        capsys.readouterr()


# -- command line -----------------------------------------------------------------


def test_cli_json_schema():
    proc = _cli(str(FIXTURES), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar: stderr is not a TTY
    data = json.loads(proc.stdout)
    assert {"schema", "torchdevice", "backend", "backend_note", "paths", "elapsed_s", "summary", "uses",
            "errors"} <= set(data)
    assert data["schema"] == 1 and data["paths"] == [str(FIXTURES)]
    import torchdevice

    assert data["backend"] == torchdevice.current_backend()
    summary = data["summary"]
    assert summary["files_scanned"] == 9 and summary["files_with_errors"] == 2
    assert summary["uses"] == len(data["uses"]) == sum(summary["by_status"].values())
    assert summary["files_with_uses"] == len({u["path"] for u in data["uses"]}) == 4
    assert list(summary["by_status"])[: len(scan.STATUSES)] == list(scan.STATUSES)
    assert sum(r["count"] for r in summary["by_api"]) == summary["uses"]
    fields = {"path": str, "line": int, "col": int, "api": str, "kind": str, "context": str, "detail": str,
              "code": str, "status": str, "note": str}
    for use in data["uses"]:
        assert set(use) == set(fields)
        assert all(isinstance(use[k], t) for k, t in fields.items())
        assert use["status"] in scan.STATUSES and use["kind"] in (
            "namespace", "method", "attribute", "device", "dist-backend", "tensor-type", "env")
    _, expected = _marked("categories.py")
    got = sorted((u["line"], u["api"]) for u in data["uses"] if u["path"].endswith("categories.py"))
    assert got == expected
    assert sorted((Path(e["path"]).name, e["line"], e["kind"]) for e in data["errors"]) == [
        ("broken_syntax.py", 3, "syntax"), ("py2_legacy.py", 4, "syntax")]


def test_cli_text_is_grouped_and_plain_without_a_tty():
    proc = _cli(str(FIXTURES / "project"), "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\033[" not in out
    train = str(FIXTURES / "project/pkg/train.py")
    assert f"\n{train}\n  {train}:5:5 " in "\n" + out
    assert re.search(rf"{re.escape(train)}:7:12 +torch\.cuda\.get_device_capability +\S+", out)
    assert "5 use(s) of 5 API(s) in 2 of 4 file(s), statuses on backend 'cpu'" in out


def test_cli_plain_format_and_errors():
    proc = _cli(str(FIXTURES / "project/pkg/infer.py"), str(FIXTURES / "py2_legacy.py"), "--format", "plain")
    infer = str(FIXTURES / "project/pkg/infer.py")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{infer}:5:12: .cuda() [")
    assert lines[1].startswith(f"{infer}:5:30: device:cuda [")
    assert lines[2].startswith(f"{FIXTURES / 'py2_legacy.py'}:4: error: SyntaxError")
    assert proc.returncode == 0


def test_cli_usage_errors_and_forced_colour(capsys):
    assert cli.main(["scan", "/no/such/path"]) == 2
    assert "no such file or directory: /no/such/path" in capsys.readouterr().err
    assert cli.main(["scan", str(FIXTURES), "--backend", "no-such-backend"]) == 2
    assert "unknown backend 'no-such-backend'" in capsys.readouterr().err
    assert cli.main(["scan", str(FIXTURES), "--jobs", "0"]) == 2
    capsys.readouterr()
    assert cli.main(["scan", str(FIXTURES / "project"), "--color", "always"]) == 0
    assert "\033[1m" in capsys.readouterr().out
    assert cli.main(["scan", str(FIXTURES / "project"), "--summary"]) == 0
    out = capsys.readouterr().out
    assert "train.py:5:5" not in out and "5 use(s) of 5 API(s)" in out and "torch.cuda.synchronize" in out


def test_a_scanner_bug_costs_one_file(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "b.py").write_text("import torch\ntorch.cuda.empty_cache()\n")
    real = scan._Analyzer.visit_module

    def flaky(self, tree):
        if any(isinstance(n, ast.Attribute) and n.attr == "empty_cache" for n in ast.walk(tree)):
            raise KeyError("boom")
        return real(self, tree)

    monkeypatch.setattr(scan._Analyzer, "visit_module", flaky)
    report = scan_paths([str(tmp_path)], None, jobs=1, lookup=_no_status)
    assert [u.api for u in report.uses] == ["torch.cuda.synchronize"]
    assert [(Path(e.path).name, e.kind) for e in report.errors] == [("b.py", "internal")]


def test_colour_rules(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert scan.use_colour(Tty()) is True
    assert scan.use_colour(io.StringIO()) is False
    assert scan.use_colour(io.StringIO(), "always") is True
    assert scan.use_colour(Tty(), "never") is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert scan.use_colour(Tty()) is False
    monkeypatch.setenv("NO_COLOR", "")  # an empty NO_COLOR does not count (no-color.org)
    assert scan.use_colour(Tty()) is True


def test_progress_bar_draws_and_clears():
    stream = io.StringIO()
    bar = scan.ProgressBar(stream, min_total=10)
    bar(0, 5)  # small trees: no bar
    assert stream.getvalue() == ""
    bar(0, 100)
    bar(100, 100)
    bar.close()
    text = stream.getvalue()
    assert "scanning [" in text and "100/100 files" in text and text.endswith("\r\033[K")


# -- notes whole, torch.accelerator ----------------------------------------------------------------

LONG_NOTES = """\
import torch
n = torch.cuda.memory_allocated()
if torch.accelerator.is_available():
    device = torch.accelerator.current_accelerator()
"""


def test_text_output_prints_each_note_whole(tmp_path, capsys):
    from torchdevice import matrix

    path = tmp_path / "prog.py"
    path.write_text(LONG_NOTES)
    assert cli.main(["scan", str(path), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    for api in ("torch.cuda.memory_allocated", "torch.accelerator.is_available"):
        note = matrix.status_for(api, "cpu")[1]
        assert len(note) > 100  # what a cut at about 100 characters used to lose
        line = next(line for line in out.splitlines() if f" {api} " in line)
        assert line.rstrip().endswith(note), line


def test_torch_accelerator_uses_are_found_with_their_status(tmp_path):
    assert [(u.line, u.api) for u in scan_source(LONG_NOTES)] == [
        (2, "torch.cuda.memory_allocated"), (3, "torch.accelerator.is_available"),
        (4, "torch.accelerator.current_accelerator")]
    path = tmp_path / "prog.py"
    path.write_text(LONG_NOTES.replace("torch.cuda.memory_allocated()", "0"))  # no other accelerator word
    report = scan_paths([str(path)], backend="cpu")
    assert [(u.api, u.status) for u in report.uses] == [
        ("torch.accelerator.is_available", "translated"), ("torch.accelerator.current_accelerator", "translated")]
