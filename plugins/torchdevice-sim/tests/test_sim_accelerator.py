"""``torch.accelerator`` of a CUDA program translated onto sim, and ``run --report`` there.

On sim torch's own ``torch.accelerator`` is sim's (PrivateUse1 registers it): translated, the program's
``torch.accelerator`` answers as ``torch.cuda`` does (the source family), while torch's own code keeps
sim's real answers. The core's tests check cpu and mlx alike (tests/test_accelerator.py,
tests/report/test_sites.py); sim's are here because loading sim changes torch for the whole process.
"""
from __future__ import annotations

import os
import sys

import torch

import torchdevice
from torchdevice import trace
from torchdevice.testing import router_sandbox

TORCH_DIR = os.path.dirname(torch.__file__)
RealDevice = torch.device


def _here() -> int:
    return sys._getframe(1).f_lineno


def test_torch_accelerator_answers_as_torch_cuda(on_sim):
    A, C = torch.accelerator, torch.cuda
    assert A.is_available() and A.device_count() == C.device_count() == 2
    assert A.current_accelerator() == RealDevice("cuda")
    assert A.current_device_index() == C.current_device() == 0
    assert A.current_stream() == C.current_stream()
    x = torch.ones(1024, device=A.current_accelerator())
    assert x.device == RealDevice("sim", 0)
    A.synchronize()
    assert A.memory_allocated() == C.memory_allocated() >= 4096
    assert set(A.memory_stats()) == set(C.memory_stats())
    assert A.get_memory_info() == C.mem_get_info()
    stream = C.Stream()
    A.set_stream(stream)
    try:
        assert A.current_stream() == stream == C.current_stream()
    finally:
        A.set_stream(C.default_stream())
    for dtype in A.get_device_capability()["supported_dtypes"]:
        assert torch.ones(2, dtype=dtype, device="cuda").to(torch.float32).sum().item() == 2
    del x


def test_device_index_makes_a_sim_device_current(on_sim):
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == torch.cuda.current_device() == 1
        assert torch.ones(1, device="cuda").device == RealDevice("sim", 1)
    assert torch.accelerator.current_device_index() == 0


def test_torch_keeps_sims_real_accelerator(on_sim):
    expression = "(torch.accelerator.current_accelerator(), torch.accelerator.device_count())"
    scope = {"torch": torch}
    for inside in ("nn/parallel/_functions.py", "random.py", "_inductor/codecache.py"):
        exec(compile(f"result = {expression}", os.path.join(TORCH_DIR, *inside.split("/")), "exec"), scope)
        assert scope["result"] == (RealDevice("sim"), 2), inside
    assert eval(expression) == (RealDevice("cuda"), 2)


def test_unpatch_restores_torch_accelerator(synced):
    before = {m.__name__: dict(vars(m)) for m in (torch.accelerator, torch.accelerator.memory)}
    with router_sandbox(), torchdevice.use("sim"), torchdevice.patched():
        assert torch.accelerator.current_accelerator() == RealDevice("cuda")
    after = {m.__name__: dict(vars(m)) for m in (torch.accelerator, torch.accelerator.memory)}
    assert after == before
    assert torch.accelerator.current_accelerator() == RealDevice("sim")


def test_report_lists_streams_and_events_at_the_programs_lines(on_sim):
    trace.reset()
    trace.start_report()
    try:
        stream = torch.cuda.Stream(); made = _here()  # noqa: E702
        start = torch.cuda.Event(enable_timing=True); made_event = _here()  # noqa: E702
        end = torch.cuda.Event(enable_timing=True)
        start.record(); recorded = _here()  # noqa: E702
        with torch.cuda.stream(stream):
            x = torch.ones(8, device="cuda") * 2; factory = _here()  # noqa: E702
        end.record(stream)
        end.synchronize()
        assert start.elapsed_time(end) >= 0; timed = _here()  # noqa: E702
        uses = {(u.api, site) for u in trace.report_data() for site in u.sites}
    finally:
        trace.stop_report()
        trace.reset()
    assert ("torch.cuda.Stream", f"{__file__}:{made}") in uses
    assert [s for api, s in uses if api == "torch.cuda.Stream"] == [f"{__file__}:{made}"]  # sim's own streams: not
    assert ("torch.cuda.Event", f"{__file__}:{made_event}") in uses
    assert ("torch.cuda.Event.record", f"{__file__}:{recorded}") in uses
    assert ("torch.cuda.Event.elapsed_time", f"{__file__}:{timed}") in uses
    assert ("torch.ones(device=)", f"{__file__}:{factory}") in uses
    assert all(site.startswith(__file__) for _, site in uses), uses
    del x
