"""``torchdevice run --report``: streams and events are listed, every backend names the program's lines,
an autocast row says what that call did, and torch.accelerator's uses are listed like torch.cuda's.

In-process (``trace.start_report`` under ``torchdevice.patched()``, what ``run --report`` does), on cpu
and mlx (sim's: plugins/torchdevice-sim/tests/test_sim_accelerator.py); one ``torchdevice run --backend
mlx --report`` checks the command itself.
"""
from __future__ import annotations

import json
import sys

import pytest
import torch
from helpers import run_torchdevice

import torchdevice
from torchdevice import router, trace


def _here() -> int:
    return sys._getframe(1).f_lineno


def _backend(name: str) -> str:
    record = router.discover().get(name)
    if record is None or not record.available:
        pytest.skip(f"the {name} backend is not available here")
    return name


@pytest.fixture(params=["cpu", "mlx"])  # sim: plugins/torchdevice-sim/tests (it changes torch for the process)
def translated(request, router_state):
    torchdevice.use(_backend(request.param))
    with torchdevice.patched():
        yield request.param


@pytest.fixture
def report():
    trace.reset()
    trace.start_report()
    try:
        yield lambda: trace.report_data()
    finally:
        trace.stop_report()
        trace.reset()


def _sites(uses, api: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for use in uses:
        if use.api == api:
            for site, n in use.sites.items():
                found[site] = found.get(site, 0) + n
    return found


def _at(*lines: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in lines:
        found[f"{__file__}:{line}"] = found.get(f"{__file__}:{line}", 0) + 1
    return found


def test_streams_and_events_are_listed_at_the_programs_lines(translated, report):
    stream = torch.cuda.Stream(); made_stream = _here()  # noqa: E702
    start = torch.cuda.Event(enable_timing=True); made_start = _here()  # noqa: E702
    end = torch.cuda.Event(enable_timing=True); made_end = _here()  # noqa: E702
    start.record(); recorded = _here()  # noqa: E702
    with torch.cuda.stream(stream):
        x = torch.ones(8, device="cuda") * 2
    end.record(stream); recorded_end = _here()  # noqa: E702
    end.synchronize(); synced = _here()  # noqa: E702
    assert start.elapsed_time(end) >= 0; timed = _here()  # noqa: E702
    stream.wait_event(end); waited = _here()  # noqa: E702
    uses = report()
    assert _sites(uses, "torch.cuda.Stream") == _at(made_stream)  # the streams translation makes are not listed
    assert _sites(uses, "torch.cuda.Event") == _at(made_start, made_end)
    assert _sites(uses, "torch.cuda.Event.record") == _at(recorded, recorded_end)
    assert _sites(uses, "torch.cuda.Event.synchronize") == _at(synced)
    assert _sites(uses, "torch.cuda.Event.elapsed_time") == _at(timed)
    assert _sites(uses, "torch.cuda.Stream.wait_event") == _at(waited)
    assert not _sites(uses, "torch.cuda.Stream.synchronize")  # only the program's calls: an event's own are not
    handled = {u.how for u in uses if u.api.startswith("torch.cuda.Event")}
    assert len(handled) == 1 and handled.pop().split(":")[0] in ("emulated", "translated", "native")
    del x


def test_stream_and_event_classes_are_given_back_by_unpatch(router_state):
    torchdevice.use("cpu")
    stream_class, event_class = router.active().streams.Stream, router.active().streams.Event
    before = {cls: dict(vars(cls)) for cls in (stream_class, event_class)}
    with torchdevice.patched():
        assert torch.cuda.Event is event_class and "record" in vars(event_class)
    for cls, names in before.items():
        assert dict(vars(cls)) == names


def test_factories_and_moves_name_the_programs_line_on_every_backend(translated, report):
    x = torch.ones(3, device="cuda"); made = _here()  # noqa: E702
    y = torch.randn(3).to("cuda"); moved = _here()  # noqa: E702
    model = torch.nn.Linear(2, 2).to("cuda"); moved_model = _here()  # noqa: E702
    uses = report()
    assert _sites(uses, "torch.ones(device=)") == _at(made)
    assert _sites(uses, "Tensor.to") == _at(moved)
    assert _sites(uses, "Module.to") == _at(moved_model)
    assert all(site.startswith(__file__) for use in uses for site in use.sites), [dict(u.sites) for u in uses]
    del x, y, model


def test_each_autocast_row_says_what_that_call_did(router_state, report):
    torchdevice.use("cpu")
    with torchdevice.patched():
        x = torch.ones(2, device="cuda")
        with torch.autocast("cuda", dtype=torch.float32, enabled=False):
            assert (x * 2).dtype is torch.float32
        off = _here() - 2
        with torch.autocast("cuda", dtype=torch.float32):
            assert not torch.is_autocast_enabled("cuda")
        f32 = _here() - 2
        with torch.autocast("cuda"):
            assert torch.is_autocast_enabled("cuda")
        default = _here() - 2
        with torch.autocast("cuda", dtype=torch.float16):
            assert torch.get_autocast_dtype("cuda") is torch.float16
        f16 = _here() - 2
    rows = {next(iter(u.sites)): u.how for u in report() if u.api == "torch.autocast"}
    assert rows == {
        f"{__file__}:{off}": "translated: torch.autocast('cpu'), dtype torch.float32 passed, disabled (enabled=False passed)",
        f"{__file__}:{f32}": "translated: torch.autocast('cpu'), dtype torch.float32 passed, disabled: float32 computes "
                             "as without autocast (CUDA's result; CPU autocast would warn)",
        f"{__file__}:{default}": "translated: torch.autocast('cpu'), default dtype torch.bfloat16, enabled",
        f"{__file__}:{f16}": "translated: torch.autocast('cpu'), dtype torch.float16 passed, enabled",
    }


def test_torch_accelerator_uses_are_listed_and_its_probes_are_not(translated, report):
    if torch.accelerator.is_available():
        device = torch.accelerator.current_accelerator(); asked = _here()  # noqa: E702
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]; probed = _here()  # noqa: E702
    uses = report()
    assert _sites(uses, "torch.accelerator.current_accelerator") == _at(asked)
    assert _sites(uses, "torch.accelerator.get_device_capability") == _at(probed)
    # the dtypes were probed through the translated factories: those calls are not the program's
    assert not [u.api for u in uses if u.api.startswith("torch.ones")], [u.api for u in uses]
    assert device.type == "cuda" and torch.float32 in dtypes


PROGRAM = """\
import torch
x = torch.randn(3).to("cuda")
start = torch.cuda.Event(enable_timing=True)
start.record()
with torch.autocast("cuda", dtype=torch.float32, enabled=False):
    y = x * 2
"""


def test_run_report_on_mlx_names_the_programs_lines(tmp_path):
    _backend("mlx")
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    result = run_torchdevice("run", "--backend", "mlx", "--report", str(tmp_path / "r.json"), str(script))
    assert result.returncode == 0, result
    apis = {a["api"]: a for a in json.loads((tmp_path / "r.json").read_text())["apis"]}
    sites = {name: [s["site"].rpartition(":")[2] for s in a["sites"]] for name, a in apis.items()}
    assert sites["Tensor.to"] == ["2"] and sites["torch.cuda.Event"] == ["3"] and sites["torch.cuda.Event.record"] == ["4"]
    assert apis["torch.autocast"]["note"].endswith("dtype torch.float32 passed, disabled (enabled=False passed)")
    assert all(s["site"].endswith(("prog.py:2", "prog.py:3", "prog.py:4", "prog.py:5"))
               for a in apis.values() for s in a["sites"]), apis


def test_an_api_handled_two_ways_is_two_rows_and_one_api():
    from types import SimpleNamespace

    from torchdevice.run import format_markdown, report_dict

    trace.reset()
    trace.start_report()
    try:
        trace.note("torch.autocast", "translated: torch.autocast('cpu'), default dtype torch.bfloat16, enabled")
        trace.note("torch.autocast", "translated: torch.autocast('cpu'), dtype torch.float32 passed, disabled")
        trace.note("torch.cuda.synchronize", "no-op: work is complete when its call returns")
        target = SimpleNamespace(name="cpu", backend="cpu", device_type="cpu", sources=frozenset({"cuda"}), source="cuda")
        data = report_dict(target, ["prog.py"], False, 0, 0.1)
    finally:
        trace.stop_report()
        trace.reset()
    assert [a["api"] for a in data["apis"]].count("torch.autocast") == 2
    assert data["by_handling"] == {"translated": {"apis": 1, "calls": 2}, "no-op": {"apis": 1, "calls": 1}}
    assert "- Translated APIs called: 2 (3 calls)" in format_markdown(data)
