"""``torchdevice run --report FILE``: which translated APIs the program called, how often, from where, how."""
from __future__ import annotations

import json
import re

import pytest
from helpers import Result, clean_env, run_concurrently, torchdevice_script

PROGRAM = """\
import os, sys
import torch
import torchdevice.trace
print("TRACE_ACTIVE", torchdevice.trace.active)
os.chdir(os.path.dirname(os.path.abspath(__file__)) + "/..")   # the report path was taken before
for _ in range(7):
    x = torch.zeros(3, device="cuda")                          # line 7
y = x.to("cuda")                                               # line 8
with torch.autocast("cuda"):                                   # line 9
    z = torch.nn.functional.linear(y, torch.ones(3, 3, device="cuda"))   # line 10
torch.cuda.synchronize()                                       # line 11
w = torch.ones(2, device="cpu")                                # line 12: native
torch.manual_seed(0)                                           # line 13: torch seeds every family
torch.cuda.manual_seed_all(1)                                  # line 14: the program's own call
assert not torch.xpu.is_available() and torch.cuda.is_available()   # line 15: probing the families
if len(sys.argv) > 1 and sys.argv[1] == "exit":
    sys.exit(4)
if len(sys.argv) > 1 and sys.argv[1] == "raise":
    raise RuntimeError("the program failed")
"""


def _run(args, env=None, cwd=None, timeout=180) -> Result:
    import subprocess

    proc = subprocess.run(args, env=clean_env(env), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return Result(list(map(str, args)), proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    work = root / "work"
    work.mkdir()
    script = work / "prog.py"
    script.write_text(PROGRAM)
    td = torchdevice_script()
    jobs = {
        "json": (_run, ([td, "run", "--report", "out/r.json", str(script)],), {"cwd": work}),
        "md": (_run, ([td, "run", "--report", "r.md", str(script), "exit"],), {"cwd": work}),
        "raise": (_run, ([td, "run", "--report", "raise.json", str(script), "raise"],), {"cwd": work}),
        "none": (_run, ([td, "run", str(script)],), {"cwd": work}),
    }
    return work, run_concurrently(jobs)


def _apis(data):
    return {a["api"]: a for a in data["apis"]}


def test_json_report_lists_the_calls(reports):
    work, results = reports
    r = results["json"]
    assert r.returncode == 0, r
    assert "TRACE_ACTIVE True" in r.stdout
    data = json.loads((work / "out" / "r.json").read_text())
    assert data["backend"] == "cpu" and data["exit_status"] == 0
    assert data["command"][-1].endswith("prog.py")
    apis = _apis(data)
    zeros = next(a for name, a in apis.items() if name.startswith("torch.zeros"))
    assert zeros["calls"] == 7
    assert zeros["sites"] == [{"site": "prog.py:7", "calls": 7}]
    assert zeros["handled"] == "translated"
    autocast = apis["torch.autocast"]
    assert autocast["calls"] == 1 and autocast["sites"][0]["site"] == "prog.py:9"
    assert "bfloat16" in autocast["note"]
    sync = apis["torch.cuda.synchronize"]
    assert sync["sites"][0]["site"] == "prog.py:11" and sync["handled"] in ("no-op", "emulated", "translated")
    assert any(name.startswith("Tensor.to") for name in apis)
    assert not any("prog.py:12" == s["site"] for a in data["apis"] for s in a["sites"])
    assert data["total_calls"] == sum(a["calls"] for a in data["apis"])
    assert sum(v["calls"] for v in data["by_handling"].values()) == data["total_calls"]


def test_calls_torch_makes_for_the_program_are_not_the_programs(reports):
    """torch.manual_seed seeds cuda, mps, xpu ... itself: those are counted under torch.manual_seed, and
    the program is not shown calling torch.mps/torch.xpu; its own torch.cuda.manual_seed_all is."""
    work, results = reports
    data = json.loads((work / "out" / "r.json").read_text())
    apis = _apis(data)
    assert not [name for name in apis if name.startswith(("torch.mps.", "torch.xpu.", "torch.mtia."))], apis
    assert data["made_by_torch"].get("torch.manual_seed", 0) >= 3  # at least cuda, mps and xpu seeded
    assert data["other_family_probes"] == {"xpu": 1}  # torch.xpu.is_available(): "not here", counted, not listed
    assert apis["torch.cuda.is_available"]["sites"] == [{"site": "prog.py:15", "calls": 1}]
    seed_all = apis["torch.cuda.manual_seed_all"]
    assert seed_all["calls"] == 1 and seed_all["sites"] == [{"site": "prog.py:14", "calls": 1}]
    text = (work / "r.md").read_text()
    assert "on the program's behalf" in text and "by `torch.manual_seed`" in text


def test_calls_torch_makes_for_the_program_are_listed_via_that_function_with_their_status(reports):
    """Each call torch.manual_seed made for the source family is listed as "<API> via torch.manual_seed",
    handled as the matrix says that API is handled on the backend, at the program's line that called
    torch.manual_seed; those for the families the program is not written for are counted per family and
    not listed, so the report names no torch.mps/xpu/mtia function the program never used."""
    from torchdevice import matrix

    work, _ = reports
    data = json.loads((work / "out" / "r.json").read_text())
    via = {e["api"]: e for e in data["made_by_torch_apis"]}
    # torch 2.13's torch.manual_seed seeds every family itself (torch/random.py): cuda is the source
    assert set(via) == {"torch.cuda.manual_seed_all"}, via
    assert data["made_by_torch_other_families"] == {"mps": 1, "mtia": 1, "xpu": 1}
    for api, entry in via.items():
        assert entry["via"] == "torch.manual_seed"
        assert entry["sites"] == [{"site": "prog.py:13", "calls": 1}], entry
        status, note = matrix.status_for(api, "cpu")
        assert (entry["handled"], entry["note"]) == (status.value, note), api
    listed = sum(e["calls"] for e in data["made_by_torch_apis"])
    assert listed + sum(data["made_by_torch_other_families"].values()) == data["made_by_torch"]["torch.manual_seed"]
    text = (work / "r.md").read_text()
    assert "| `torch.cuda.manual_seed_all` | `torch.manual_seed` | 1 |" in text
    assert "`prog.py:13` (1)" in text
    assert "not listed: mps 1, mtia 1, xpu 1" in text
    for report in (text, (work / "out" / "r.json").read_text()):
        assert not re.search(r"torch\.(backends\.)?(mps|xpu|mtia)\.", report), report


def test_markdown_report_and_exit_status(reports):
    work, results = reports
    r = results["md"]
    assert r.returncode == 4, r
    text = (work / "r.md").read_text()
    assert text.startswith("# torchdevice run report")
    assert "- Exit status: 4" in text
    assert "| `torch.autocast` | 1 |" in text
    assert "`prog.py:7` (7)" in text
    assert "## By handling" in text


def test_report_written_when_the_program_raises(reports):
    work, results = reports
    r = results["raise"]
    assert r.returncode == 1
    assert "the program failed" in r.stderr
    data = json.loads((work / "raise.json").read_text())
    assert data["exit_status"] == 1 and data["apis"]


def test_no_report_costs_nothing(reports):
    _, results = reports
    r = results["none"]
    assert r.returncode == 0, r
    assert "TRACE_ACTIVE False" in r.stdout  # the wrappers' `if trace.active:` is never taken


def test_format_markdown_escapes_and_truncates():
    from torchdevice.run import format_markdown

    data = {
        "torchdevice": "0", "command": ["python", "a b.py"], "backend": "cpu", "device_type": "cpu",
        "translated_sources": ["cuda"], "exit_status": 0, "duration_s": 0.5, "total_calls": 12,
        "by_handling": {"translated": {"apis": 1, "calls": 12}}, "note": "n",
        "apis": [{"api": "x|y", "handled": "translated", "note": "", "calls": 12,
                  "sites": [{"site": f"f.py:{i}", "calls": 1} for i in range(12)]}],
    }
    text = format_markdown(data)
    assert "`python 'a b.py'`" in text
    assert "x\\|y" in text
    assert "and 2 more" in text


def test_each_torchrun_rank_writes_its_own_report(monkeypatch):
    from torchdevice.run import _per_rank

    monkeypatch.delenv("RANK", raising=False)
    assert _per_rank("/x/r.json") == "/x/r.json"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _per_rank("/x/r.json") == "/x/r.rank1.json"
    assert _per_rank("/x/report") == "/x/report.rank1"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert _per_rank("/x/r.md") == "/x/r.md"
