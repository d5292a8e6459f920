"""``torchdevice compare``: error metrics, the report renderers, and the command on a CUDA-written program
(tests/programs/compare_mlp.py) with cpu as the reference and mlx under test -- clean, and with a numeric
bug planted in one MLX lowering."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import run_torchdevice

import torchdevice
from torchdevice.compare import metrics, render, report, wholerun

PROGRAM = Path(__file__).parent / "programs" / "compare_mlp.py"


def _mlx_available() -> bool:
    records = {r.name: r for r in torchdevice.backends()}
    return "mlx" in records and records["mlx"].available


needs_mlx = pytest.mark.skipif(not _mlx_available(), reason="the mlx backend is not available here")


# -- metrics ------------------------------------------------------------------------------------------------

def test_metrics_against_hand_computed_values():
    out = torch.tensor([1.0, 2.2, 0.0, -4.0], dtype=torch.float64)
    ref = torch.tensor([1.0, 2.0, 0.0, -4.0], dtype=torch.float64)
    e = metrics.errors(out, ref)
    assert e["max_abs"] == pytest.approx(0.2)
    assert e["max_rel"] == pytest.approx(0.1)  # 0.2 / 2.0; the zero reference element is left out
    # <b,r> = 1 + 4.4 + 16 = 21.4; |b| = sqrt(1 + 4.84 + 16); |r| = sqrt(1 + 4 + 16)
    assert e["cosine"] == pytest.approx(21.4 / math.sqrt(21.84 * 21))
    assert e["ulp"] == pytest.approx(0.1 / torch.finfo(torch.float64).eps)
    assert e["within"] is False and (e["rtol"], e["atol"]) == (1e-7, 1e-7)
    assert metrics.errors(out, ref, rtol=0.11, atol=0.0)["within"] is True  # 0.2 <= 0.11 * 2.0
    assert metrics.errors(out, ref, rtol=0.09, atol=0.0)["within"] is False


def test_metrics_float32_ulp_nan_shape_and_integers():
    ref = torch.tensor([1.0, 3.0], dtype=torch.float32)
    out = ref + torch.tensor([0.0, 3 * 2.0 ** -22])  # 3.0 + 2 ulp of 3.0 (ulp at [2, 4) is 2**-22)
    e = metrics.errors(out, ref)
    assert e["max_abs"] == pytest.approx(3 * 2.0 ** -22)
    assert e["ulp"] == pytest.approx((3 * 2.0 ** -22 / 3.0) / torch.finfo(torch.float32).eps)  # 1.5 eps*|r|
    assert e["within"] is True  # 7e-7 <= 1e-5 + 1e-5 * 3
    nan = torch.tensor([float("nan"), 1.0])
    assert metrics.errors(nan, nan.clone())["max_abs"] == 0.0
    one_sided = metrics.errors(torch.tensor([float("nan"), 1.0]), torch.tensor([0.5, 1.0]))
    assert one_sided["max_abs"] == math.inf and one_sided["within"] is False and one_sided["cosine"] == 0.0
    assert metrics.errors(torch.zeros(2), torch.zeros(3))["within"] is False
    ints = metrics.errors(torch.tensor([1, 2]), torch.tensor([1, 3]))
    assert ints["max_abs"] == 1.0 and ints["within"] is False and ints["ulp"] == 0.0
    assert metrics.errors(torch.zeros(3), torch.zeros(3))["cosine"] == 1.0
    assert metrics.scalar_errors(1.0 + 1e-6, 1.0, torch.float32)["within"] is True


def test_whole_run_compares_printed_numbers_line_by_line():
    ref = "epoch 0 loss 1.000000\nepoch 1 loss 0.500000\ndone\n"
    same = "epoch 0 loss 1.000001\nepoch 1 loss 0.500000\ndone\n"
    drift = "epoch 0 loss 1.000000\nepoch 1 loss 0.510000\ndone\n"
    assert wholerun.compare_outputs(ref, same)["first_difference"] is None
    result = wholerun.compare_outputs(ref, drift)
    assert result["first_difference"]["line"] == 2
    assert result["max_abs"] == pytest.approx(0.01)
    assert wholerun.compare_outputs(ref, "epoch 0 loss 1.0\nstopped\n")["first_difference"]["line"] == 2
    assert wholerun.numbers("x=1e-3, y -2.5 z 7") == ([1e-3, -2.5, 7.0], "x=#, y # z #")


# -- the report -----------------------------------------------------------------------------------------------

def _record(collector, index, op, module, value, ref):
    errs = metrics.errors(torch.tensor(value), torch.tensor(ref))
    collector.record({"index": index, "op": op, "module": module, "location": "prog.py:3", "phase": "forward",
                      **errs, "status": "ok" if errs["within"] else "diverged"})


def _data():
    c = report.Collector()
    _record(c, 1, "aten.mm.default", "model.fc", [1.0, 2.0], [1.0, 2.0])
    _record(c, 2, "aten.gelu.default", "model.act", [1.1, 2.0], [1.0, 2.0])
    _record(c, 3, "aten.gelu.default", "model.act", [1.0, 2.0], [1.0, 2.0])
    c.record({"index": 4, "op": "aten.foo.default", "module": "model", "location": "prog.py:4", "phase": "forward",
              "status": "reference failed: RuntimeError: no"})
    whole = wholerun.compare_outputs("loss 1.0\n", "loss 1.5\n")
    return report.report_dict(command=["torchdevice", "compare", "prog.py"], backends=("cpu", "mlx"), level="op",
                              collector=c, whole_run=whole, program_status=0,
                              tolerance={"rtol": "per dtype", "atol": "per dtype"})


def test_report_json_keys_and_first_divergence():
    data = _data()
    assert {"first_divergence", "ops", "modules", "whole_run", "summary"} <= set(data)
    first = data["first_divergence"]
    assert (first["op"], first["module"], first["location"], first["index"]) == (
        "aten.gelu.default", "model.act", "prog.py:3", 2)
    assert first["errors"]["max_abs"] == pytest.approx(0.1, rel=1e-6)
    gelu = next(r for r in data["ops"] if r["op"] == "aten.gelu.default")
    assert gelu["calls"] == 2 and gelu["over_tolerance"] == 1
    assert data["summary"]["reference_failed"] == 1
    assert next(r for r in data["ops"] if r["op"] == "aten.foo.default")["note"].startswith("reference failed")
    assert [m["module"] for m in data["modules"]] == ["model.fc", "model.act"]
    assert data["whole_run"]["first_difference"]["line"] == 1
    assert report.diverged(data)
    json.dumps(data, allow_nan=False)  # infinities are strings


def test_report_markdown_and_html(tmp_path):
    data = _data()
    md = render.format_markdown(data)
    assert "| op | module | location | phase | calls | over_tolerance | max_abs | max_rel | cosine | ulp |" in md
    assert "First divergence: `aten.gelu.default` in `model.act` at `prog.py:3`" in md
    assert md.index("`aten.gelu.default`") < md.index("`aten.mm.default`")  # worst relative error first
    page = render.format_html(data)
    assert "<table id='ops'>" in page and "onclick='sortTable(this)'" in page and "function sortTable" in page
    assert "<svg" in page and "<rect" in page and "model.act" in page
    for name in ("r.json", "r.md", "r.html"):
        render.write(str(tmp_path / name), data)
    assert json.loads((tmp_path / "r.json").read_text())["first_divergence"]["op"] == "aten.gelu.default"
    assert (tmp_path / "r.md").read_text() == md and (tmp_path / "r.html").read_text() == page


# -- the command -----------------------------------------------------------------------------------------------

@needs_mlx
def test_clean_program_has_no_divergence(inproc, tmp_path, capsys):
    out = tmp_path / "report.json"
    status = inproc(["compare", "--backends", "cpu,mlx", "--no-whole-run", "--out", str(out), str(PROGRAM)])
    data = json.loads(out.read_text())
    assert status == 0, capsys.readouterr().err
    assert data["first_divergence"] is None
    assert data["summary"]["ops_compared"] > 100 and data["summary"]["ops_over_tolerance"] == 0
    assert all(r["over_tolerance"] == 0 for r in data["ops"])
    ops = {r["op"] for r in data["ops"]}
    assert {"aten.addmm.default", "aten.gelu.default", "aten.gelu_backward.default"} <= ops  # forward and backward
    modules = [m["module"] for m in data["modules"]]
    assert "model.h.1.act" in modules and "model.h.1.act (backward GeluBackward0)" in modules
    assert "No op went beyond tolerance." in capsys.readouterr().err


@needs_mlx
def test_planted_bug_is_the_first_divergence(inproc, tmp_path, monkeypatch, capsys):
    from torchdevice_mlx import dispatch, lowerings

    gelu = torch.ops.aten.gelu.default
    right = lowerings.LOWERINGS[gelu]
    monkeypatch.setitem(lowerings.LOWERINGS, gelu, lambda a, approximate="none": right(a, approximate) * 1.01)
    monkeypatch.setattr(dispatch, "_ROUTES", {})  # routes hold the lowering they found
    out = tmp_path / "report.json"
    status = inproc(["compare", "--backends", "cpu,mlx", "--no-whole-run", "--out", str(out), str(PROGRAM)])
    data = json.loads(out.read_text())
    assert status == 1
    first = data["first_divergence"]
    assert first["op"] == "aten.gelu.default"
    assert first["module"] == "model.h.0.act"
    path, line = first["location"].rsplit(":", 1)
    assert Path(path).resolve() == PROGRAM.resolve()
    assert PROGRAM.read_text().splitlines()[int(line) - 1].strip() == (
        "return x + self.proj(self.act(self.fc(self.norm(x))))")
    assert first["errors"]["max_rel"] == pytest.approx(0.01, rel=1e-3) and first["phase"] == "forward"
    before = [r for r in data["ops"] if r["first_index"] < first["index"]]
    assert before and all(r["over_tolerance"] == 0 for r in before)  # nothing before it
    over = {r["op"] for r in data["ops"] if r["over_tolerance"]}
    assert over == {"aten.gelu.default"}  # each op's error is its own: the ops after it are clean
    assert "First divergence: `aten.gelu.default` in `model.h.0.act`" in capsys.readouterr().err


def test_usage_errors(inproc, capsys):
    assert inproc(["compare"]) == 2
    assert "missing SCRIPT" in capsys.readouterr().err
    assert inproc(["compare", "--backends", "cpu", str(PROGRAM)]) == 2
    assert "two names" in capsys.readouterr().err


@needs_mlx
def test_command_whole_run_and_module_level(tmp_path):
    # the module level without the whole run: the two whole runs (a process per backend, whatever the level) are
    # the op-level command's below, so each pair of program processes runs once
    page = tmp_path / "report.html"
    result = run_torchdevice("compare", "--backends", "cpu,mlx", "--level", "module", "--no-whole-run", "--out",
                             str(page), str(PROGRAM))
    assert result.returncode == 0, result.stderr
    assert "12 module outputs compared, 0 over tolerance" in result.stderr
    assert "Whole run: not compared." in result.stderr
    text = page.read_text()
    assert "model.h.1.act" in text and "<svg" in text
    out = tmp_path / "report.json"
    result = run_torchdevice("compare", "--backends", "cpu,mlx", "--out", str(out), str(PROGRAM))
    assert result.returncode == 0, result.stderr
    assert "every line within rtol" in result.stderr  # the whole run: both processes printed the same losses
    data = json.loads(out.read_text())
    assert data["first_divergence"] is None and data["whole_run"]["first_difference"] is None
    assert data["whole_run"]["numbers_compared"] == 6


# -- compare -m pytest --------------------------------------------------------------------------------------------

def test_test_outcomes_from_junit_xml(tmp_path):
    from torchdevice.compare import tests as compare_tests

    xml = tmp_path / "r.xml"
    xml.write_text("""<?xml version="1.0"?><testsuites><testsuite name="pytest">
<testcase classname="t" name="test_a"/>
<testcase classname="t" name="test_b"><failure message="AssertionError: no&#10;more">x</failure></testcase>
<testcase classname="t" name="test_c"><skipped message="later"/></testcase>
</testsuite></testsuites>""")
    found = compare_tests.outcomes(str(xml))
    assert found == {"t::test_a": ("passed", ""), "t::test_b": ("failed", "AssertionError: no"),
                     "t::test_c": ("skipped", "later")}
    ref = {"t::test_a": ("passed", ""), "t::test_b": ("passed", ""), "t::test_d": ("passed", "")}
    differ = compare_tests.compare_outcomes(ref, found, ("cpu", "mlx"))
    assert [(d["test"], d["cpu"], d["mlx"]) for d in differ] == [
        ("t::test_b", "passed", "failed"), ("t::test_c", "not run", "skipped"), ("t::test_d", "passed", "not run")]


@needs_mlx
def test_command_lists_tests_whose_outcome_differs(tmp_path):
    (tmp_path / "test_backend.py").write_text(
        "import torch\n"
        "def test_same():\n    assert torch.ones(2, device='cuda').sum().item() == 2\n"
        "def test_plain_tensor():\n    assert type(torch.ones(2, device='cuda')) is torch.Tensor\n")
    out = tmp_path / "tests.json"
    result = run_torchdevice("compare", "--backends", "cpu,mlx", "--out", str(out), "-m", "pytest",
                             str(tmp_path / "test_backend.py"))
    assert result.returncode == 1, result.stderr
    data = json.loads(out.read_text())
    assert [(d["test"], d["cpu"], d["mlx"]) for d in data["tests"]["differ"]] == [
        ("test_backend::test_plain_tensor", "passed", "failed")]
    assert "1 of 2 tests differ in outcome (cpu -> mlx)" in result.stderr


# -- why whole runs differ while no op does; failed runs ------------------------------------------------------

CAUSES = Path(__file__).parent / "programs" / "compare_causes.py"


def _line_of(program: Path, location: str) -> str:
    path, line = location.rsplit(":", 1)
    assert Path(path).resolve() == program.resolve()
    return program.read_text().splitlines()[int(line) - 1].strip()


def test_random_ops_are_named_with_their_location(inproc, tmp_path, capsys):
    out = tmp_path / "report.json"
    status = inproc(["compare", "--backends", "cpu,cpu", "--no-whole-run", "--out", str(out), str(CAUSES)])
    assert status == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    (row,) = [r for r in data["random_ops"] if r["module"] == "model.drop"]
    packet, overload = row["op"].split(".")[1:3]
    assert torch.Tag.nondeterministic_seeded in getattr(getattr(torch.ops.aten, packet), overload).tags
    assert row["calls"] == 2 and row["device"] == "cpu"  # the cpu backend's tensors: the host's generator
    assert _line_of(CAUSES, row["location"]) == "h = self.drop(self.fc(x))"
    assert not any(r["over_tolerance"] for r in data["ops"])
    assert "draw from each backend's own generator" in capsys.readouterr().err


def _cause_data(failed_status: int | None = None):
    c = report.Collector()
    _record(c, 1, "aten.mm.default", "model.fc", [1.0, 2.0], [1.0, 2.0])
    for index in (2, 3):
        c.record({"index": index, "op": "aten.native_dropout.default", "module": "model.drop",
                  "location": "prog.py:7", "phase": "forward", "status": "random", "device": "sim"})
    c.record({"index": 4, "op": "aten.uniform_.default", "module": "(top level)", "location": "prog.py:2",
              "phase": "forward", "status": "random", "device": "cpu"})  # the host's generator: the same in both
    c.record({"op": "torch.softmax", "aten_op": "aten._softmax.default", "module": "model", "location": "prog.py:8",
              "status": "autocast", "reference_dtype": "bfloat16", "backend_dtype": "float32"})
    whole = wholerun.compare_outputs("loss 1.0\n", "loss 1.5\n")
    whole["exit_status"] = {"cpu": 0, "sim": 0}
    return report.report_dict(command=["torchdevice", "compare", "prog.py"], backends=("cpu", "sim"), level="op",
                              collector=c, whole_run=whole, program_status=failed_status, tolerance={},
                              device_type="sim", program_error="RuntimeError: boom" if failed_status else None)


def test_report_names_the_causes_of_a_whole_run_difference():
    data = _cause_data()
    assert data["random_ops"] == [{"op": "aten.native_dropout.default", "module": "model.drop",
                                   "location": "prog.py:7", "device": "sim", "calls": 2}]
    assert data["autocast_dtypes"] == [{"op": "torch.softmax", "aten_op": "aten._softmax.default", "module": "model",
                                        "location": "prog.py:8", "reference_dtype": "bfloat16",
                                        "backend_dtype": "float32", "calls": 1}]
    assert data["failed"] == [] and data["first_divergence"] is None
    text = render.format_text(data)
    assert "draw from each backend's own generator" in text
    assert "`aten.native_dropout.default` in `model.drop` at `prog.py:7`: 2 calls" in text
    assert "autocast policies differ" in text and ("`aten._softmax.default` of `torch.softmax` in `model` at "
                                                   "`prog.py:8`: float32 on sim, bfloat16 on cpu (1 call)") in text
    markdown = render.format_markdown(data)
    assert "## Random ops" in markdown and "| aten.native_dropout.default | model.drop | prog.py:7 | sim | 2 |" in markdown
    assert "## Autocast" in markdown


def test_a_failed_run_is_reported_first():
    data = _cause_data(failed_status=1)
    assert data["failed"] == [{"run": "under compare on sim", "exit_status": 1, "error": "RuntimeError: boom"}]
    lines = render.format_text(data).splitlines()
    assert lines[1].startswith("FAILED: the program failed under compare on sim (exit status 1): RuntimeError: boom")
    assert "No op went beyond tolerance." not in lines
    assert render.format_markdown(data).split("\n\n")[1].startswith("**FAILED")


def test_compare_of_a_failing_program_exits_non_zero(inproc, tmp_path, capsys):
    program = tmp_path / "fails.py"
    program.write_text("import torch\nx = torch.ones(2, device='cuda') * 2\nraise ValueError('boom at step 0')\n")
    out = tmp_path / "report.json"
    status = inproc(["compare", "--backends", "cpu,cpu", "--no-whole-run", "--out", str(out), str(program)])
    err = capsys.readouterr().err
    assert status == 1
    data = json.loads(out.read_text())
    assert data["failed"] == [{"run": "under compare on cpu", "exit_status": 1, "error": "ValueError: boom at step 0"}]
    summary = err[err.index("torchdevice compare: cpu against"):].splitlines()
    assert summary[1].startswith("FAILED: the program failed under compare on cpu (exit status 1): ValueError: boom")


def test_sim_causes_and_the_python_fallback_under_the_shadow_mode(tmp_path):
    """On sim (a Python fallback kernel for PrivateUse1): torch.tensor(..., device=) under the shadow mode used
    to crash torch's trampoline (``func != nullptr``, the timm training program); dropout and bf16 autocast
    make the whole runs differ with no op over tolerance, and the report names both causes."""
    pytest.importorskip("torchdevice_sim")
    out = tmp_path / "report.json"
    result = run_torchdevice("compare", "--backends", "cpu,sim", "--out", str(out), str(CAUSES))
    data = json.loads(out.read_text())
    assert data["failed"] == [], result.stderr
    assert data["summary"]["ops_over_tolerance"] == 0 and data["whole_run"]["first_difference"] is not None
    (drop,) = data["random_ops"]
    assert (drop["op"], drop["module"], drop["device"], drop["calls"]) == (
        "aten.native_dropout.default", "model.drop", "sim", 2)
    assert _line_of(CAUSES, drop["location"]) == "h = self.drop(self.fc(x))"
    (softmax,) = data["autocast_dtypes"]  # CUDA's lists run softmax in float32, the CPU's in bfloat16
    assert (softmax["op"], softmax["aten_op"], softmax["backend_dtype"], softmax["reference_dtype"]) == (
        "torch.softmax", "aten._softmax.default", "float32", "bfloat16")
    assert _line_of(CAUSES, softmax["location"]) == "return self.head(h * torch.softmax(h, dim=-1))"
    assert "draw from each backend's own generator" in result.stderr and "autocast policies differ" in result.stderr


def test_a_random_tagged_op_that_draws_nothing_is_compared(inproc, tmp_path):
    """Attention is tagged nondeterministic_seeded for its dropout; with dropout_p=0 it leaves the
    generator as it was, so it is compared like any other op instead of being called random."""
    program = tmp_path / "attention.py"
    program.write_text("import torch\nimport torch.nn.functional as F\n"
                       "q = torch.ones(1, 2, 4, 8, device='cuda')\n"
                       "a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.0)\n"
                       "b = F.dropout(q, 0.5)\n")
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default  # what the CPU runs for it
    assert torch.Tag.nondeterministic_seeded in op.tags
    out = tmp_path / "report.json"
    assert inproc(["compare", "--backends", "cpu,cpu", "--no-whole-run", "--out", str(out), str(program)]) == 0
    data = json.loads(out.read_text())
    (row,) = [r for r in data["ops"] if r["op"] == str(op)]
    assert row["calls"] == 1 and row["over_tolerance"] == 0 and row["max_abs"] == 0.0
    assert [(r["op"], r["location"].rsplit(":", 1)[1]) for r in data["random_ops"]] == [
        ("aten.bernoulli_.float", "5")]  # the dropout drew


def test_autocast_differences_inside_a_function_are_found():
    """cross_entropy ends in float32 under both policies; its log_softmax runs in bfloat16 under CUDA's lists
    and in float32 under the CPU's (nanoGPT in bf16): ops are paired by name, casts left out."""
    from torchdevice.compare import autocast

    bf16, f32 = torch.bfloat16, torch.float32
    sim = [("aten._to_copy.default", f32), ("aten._log_softmax.default", bf16), ("aten.nll_loss_forward.default", f32)]
    cpu = [("aten._to_copy.default", f32), ("aten._to_copy.default", f32), ("aten._log_softmax.default", f32),
           ("aten.nll_loss_forward.default", f32)]
    assert autocast.differences(sim, cpu) == [("aten._log_softmax.default", bf16, f32)]
    assert autocast.differences(sim, sim) == []
    other_kernel = [("aten._fused_attention.default", bf16)]  # run on one side only: not paired
    assert autocast.differences(other_kernel, [("aten._flash_attention.default", f32)]) == []


def test_module_names_on_threads_running_at_once_are_their_own():
    """nn.DataParallel runs its replicas' forwards on threads of its own, at once: one shared stack of running
    modules let them end each other's entries and the calling thread's (Trainer over 2 sim devices named ops
    `dataparallel.gpt2lmheadmodel.transformer.wte.gpt2lmheadmodel.transformer.h.1.ln_2`)."""
    import threading

    from torchdevice.compare.shadow import ModuleTracker

    together = threading.Barrier(2, timeout=30)
    seen: dict[str, list] = {"replica": [], "inner": []}

    class Inner(torch.nn.Module):
        def forward(self, x):
            together.wait()  # both threads inside Inner at once
            seen["inner"].append(tracker.path)
            together.wait()
            return x

    class Replica(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            mine = tracker.path
            self.inner(x)
            seen["replica"].append((mine, tracker.path))
            return x

    class Parallel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.replicas = [Replica(), Replica()]  # not submodules: DataParallel's replicas are copies

        def forward(self, x):
            threads = [threading.Thread(target=replica, args=(x,)) for replica in self.replicas]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seen["parallel"] = tracker.path
            return x

    parallel = Parallel()
    with ModuleTracker() as tracker:
        parallel(torch.ones(1))
        assert tracker.stack == []
    assert seen["parallel"] == "parallel"
    assert [after for mine, after in seen["replica"]] == [mine for mine, after in seen["replica"]]
    assert sorted(seen["inner"]) == sorted(f"{mine}.inner" for mine, _ in seen["replica"])
    assert all(mine and "parallel" not in mine for mine, _ in seen["replica"])


def test_an_op_whose_cpu_kernel_sums_per_thread_is_compared_on_the_programs_thread_count():
    """The reference runs on one intra-op thread; layer_norm's backward sums dgamma and dbeta per thread, so on
    one thread it gives other bits than the program's two (a ViT's norms over tolerance under compare). An op
    over tolerance is run again with the program's threads, and that comparison stands."""
    from torchdevice.compare import shadow

    g = torch.Generator().manual_seed(0)
    x, go = torch.randn(136, 192, generator=g) * 3 + 1, torch.randn(136, 192, generator=g) * 65536
    w, b = torch.randn(192, generator=g), torch.randn(192, generator=g)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [192], w, b, 1e-6)
    backward = torch.ops.aten.native_layer_norm_backward.default
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = backward(go, x, [192], mean, rstd, w, b, [True, True, True])
        torch.set_num_threads(2)
        two = backward(go, x, [192], mean, rstd, w, b, [True, True, True])
        assert not torch.equal(one[1], two[1])  # what makes the case: another order of the sums on one thread
        entries: list[dict] = []
        with shadow.ShadowMode(torch.device("cpu"), entries.append, rtol=0.0, atol=0.0):
            backward(go, x, [192], mean, rstd, w, b, [True, True, True])
    finally:
        torch.set_num_threads(threads)
    (entry,) = [e for e in entries if e["op"] == str(backward)]
    assert entry["status"] == "ok" and entry["max_abs"] == 0.0 and entry["reference_threads"] == 2


def test_batch_norms_saved_statistics_in_eval_are_left_to_each_device():
    """In eval, native_batch_norm's saved mean and invstd are empty on the CPU and uninitialised (C,) on CUDA
    (and on sim, as CUDA): not compared. The normalised output still is, and in training the statistics too."""
    from torchdevice.compare import shadow

    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 8, 5, 5, generator=g), torch.randn(8, generator=g), torch.randn(8, generator=g)
    op = torch.ops.aten.native_batch_norm.default
    mode = shadow.ShadowMode(torch.device("cpu"), lambda entry: None, rtol=0.0, atol=0.0)
    entry = {"index": 1, "op": str(op), "module": "", "location": "", "phase": "forward"}
    for training in (False, True):
        args = (x, w, b, torch.zeros(8), torch.ones(8), training, 0.1, 1e-5)
        cpu = op(*args)
        cuda_like = (cpu[0], torch.full((8,), float("nan")), torch.full((8,), float("nan")))
        found = mode._compare(entry, op, args, cuda_like, cpu)
        if training:
            assert found["status"] == "diverged" and found["outputs"] == 3
        else:
            assert found["status"] == "ok" and found["outputs"] == 1
        wrong = (cpu[0] + 1, *cuda_like[1:])
        assert mode._compare(entry, op, args, wrong, cpu)["status"] == "diverged"


def test_a_program_calling_flex_attention_is_compared(inproc, tmp_path):
    """Eager flex_attention compiles its higher-order op itself (fullgraph), which finds nothing to compile under
    compare's mode and raised; compiled, it falls back to eager there. Both run now, the op uncompared, the ops
    around it compared."""
    program = tmp_path / "flex.py"
    program.write_text("import torch\nfrom torch.nn.attention.flex_attention import flex_attention\n"
                       "q = torch.randn(1, 2, 16, 8, generator=torch.Generator().manual_seed(0)).cuda()\n"
                       "a = flex_attention(q, q, q)\n"
                       "b = torch.compile(flex_attention)(q, q, q)\n"
                       "print(float((a - b).abs().max()), float(a.sum() * 2))\n")
    out = tmp_path / "report.json"
    assert inproc(["compare", "--backends", "cpu,cpu", "--no-whole-run", "--out", str(out), str(program)]) == 0
    data = json.loads(out.read_text())
    assert data["failed"] == [] and data["summary"]["ops_over_tolerance"] == 0
    assert "aten.mul.Tensor" in {r["op"] for r in data["ops"]}  # the op after the attention was compared
