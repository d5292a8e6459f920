"""The vendor kit on backends with asynchronous queues (issue 23, item 3), and ``StreamOps.sleep``.

``tests/fixtures/plugins/td_queuechip.py`` is a third-party-style backend with a queue and a worker
thread per stream, implementing ``StreamOps.sleep``: it passes every check. Each bug a plugin
with queues can have is planted in it, one at a time (monkeypatched onto its classes), and the
kit must report a failure in the check named, saying what is wrong. sim, the simulated GPU of
``plugins/torchdevice-sim``, passes the kit too (in a subprocess: it claims torch's PrivateUse1
device for the life of the process).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from types import ModuleType

import pytest
import torch
from helpers import PLUGIN_FIXTURES, run_command, run_python, write_plugin

import torchdevice
from torchdevice.backend import DEFAULT_CLOCK_KHZ, Availability, RNGOps, Status, emulated, status_of, unsupported
from torchdevice.cpu import CPUBackend
from torchdevice.errors import UnsupportedError
from torchdevice.testing import QUEUED_MS, StandIn, check_backend, registered, run_check
from torchdevice.testing.standin import StandInProperties
from torchdevice.torch_backend import NamespaceSleep, NamespaceView, TorchStreams, bind_ops


def _fixture(name: str) -> ModuleType:
    """Import ``tests/fixtures/plugins/<name>.py`` once, as module ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, PLUGIN_FIXTURES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


qc = _fixture("td_queuechip")


# -- the planted bugs ---------------------------------------------------------------------------------


def _query_while_running(monkeypatch) -> None:
    monkeypatch.setattr(qc.QueueStream, "query", lambda self: True)


def _query_true_once_the_last_job_is_taken(monkeypatch) -> None:
    """query() answers whether jobs wait on the queue, not whether any still runs: True as soon as the worker
    takes the last one, before it is done (a single look right after queuing mostly sees it still queued)."""
    monkeypatch.setattr(qc.QueueStream, "query", lambda self: qc.work_queue(self.device_index, self.stream_id)._items.empty())


def _synchronize_nothing(monkeypatch) -> None:
    monkeypatch.setattr(qc.QueueStreams, "synchronize", emulated("waits for the device (it does not)")(
        lambda self, index: None))


def _record_drains(monkeypatch) -> None:
    record = qc.QueueEvent.record

    def draining(self, stream=None):
        (stream or qc.current_stream(qc.current_device_of(qc.NAME))).synchronize()
        record(self, stream)

    monkeypatch.setattr(qc.QueueEvent, "record", draining)


def _shared_generator(monkeypatch) -> None:
    def one_for_all(self, backend):
        RNGOps.__init__(self, backend)
        self.generators = [torch.Generator()] * qc.configured_devices()

    monkeypatch.setattr(qc.QueueRNG, "__init__", one_for_all)


def _microseconds(monkeypatch) -> None:
    monkeypatch.setattr(qc.QueueEvent, "milliseconds", staticmethod(lambda ns: ns / 1e3))


def _variable_in_availability(monkeypatch) -> None:
    monkeypatch.setenv(qc.DEVICES_VAR, "two")
    monkeypatch.setattr(qc.QueueChip, "availability", lambda self: Availability(True, f"{qc.configured_devices()} devices"))


#: bug -> (how to plant it, the check that must fail, text its failure must contain)
PLANTED = {
    "query_true_while_work_runs": (_query_while_running, "queues", "query() is True"),
    "query_true_once_the_last_job_is_taken": (_query_true_once_the_last_job_is_taken, "queues",
                                              "(not only until a worker takes it off the queue)"),
    "synchronize_does_nothing": (_synchronize_nothing, "queues", "query() is False right after synchronize(0)"),
    "record_drains_the_queue": (_record_drains, "queues", "Event.record() blocked the host"),
    "one_generator_for_all_devices": (_shared_generator, "behaviour", "changed device 0's generator state"),
    "event_time_in_microseconds": (_microseconds, "queues", "it must be in milliseconds"),
    "variable_read_in_availability": (_variable_in_availability, "availability", "QUEUECHIP_DEVICES='two'"),
}


def test_queuechip_passes_every_check():
    report = check_backend(qc.plugin, raise_on_failure=False)
    assert all(r.ok for r in report.results), str(report)  # nothing failed, nothing skipped
    results = {r.name: r.detail for r in report.results}
    assert "one generator per device (2)" in results["behaviour"], results["behaviour"]


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_kit_catches_the_planted_queue_bug(bug, monkeypatch):
    plant, check, says = PLANTED[bug]
    plant(monkeypatch)
    report = check_backend(qc.QueueChip(), raise_on_failure=False)
    failed = {r.name: r.detail for r in report.failures}
    assert check in failed, str(report)
    assert says in failed[check], str(report)


def test_a_bad_variable_read_at_import_is_a_failed_check_naming_it_not_a_traceback():
    found = run_command([sys.executable, "-m", "torchdevice.testing", "--check", "td_queuechip_eager:plugin"],
                        env={qc.DEVICES_VAR: "two"}, pythonpath=[PLUGIN_FIXTURES])
    assert found.returncode == 1, found
    assert "[FAIL] import: ValueError: QUEUECHIP_DEVICES='two' is not a device count" in found.stdout, found
    assert "Traceback" not in found.stdout + found.stderr, found


def test_an_installed_entry_point_that_fails_to_load_is_a_failed_check_naming_the_variable(tmp_path):
    write_plugin(tmp_path, "queuechip-eager", "1.0", "queuechip", "td_queuechip_eager")
    (tmp_path / "td_queuechip.py").write_text((PLUGIN_FIXTURES / "td_queuechip.py").read_text())
    found = run_command([sys.executable, "-m", "torchdevice.testing", "--check", "queuechip"],
                        env={qc.DEVICES_VAR: "-1"}, pythonpath=[tmp_path])
    assert found.returncode == 1 and "[FAIL] import: ValueError: QUEUECHIP_DEVICES='-1'" in found.stdout, found
    assert "Traceback" not in found.stdout + found.stderr, found
    passing = run_command([sys.executable, "-m", "torchdevice.testing", "--check", "queuechip"], pythonpath=[tmp_path])
    assert passing.returncode == 0 and "[ok] queues" in passing.stdout, passing


def test_a_bad_variable_read_in_availability_makes_the_plugin_unavailable_naming_it(monkeypatch):
    monkeypatch.setenv(qc.DEVICES_VAR, "0")
    report = check_backend(qc.plugin, raise_on_failure=False)
    results = {r.name: r for r in report.results}
    assert report.ok, str(report)
    assert "QUEUECHIP_DEVICES='0' is not a device count" in results["availability"].detail, str(report)
    assert results["queues"].ok is None and results["router"].detail.startswith("refused"), str(report)


def test_queue_checks_are_skipped_with_the_reason_where_sleep_is_not_implemented():
    result = run_check(CPUBackend(), "queues")
    assert result.ok is None and "streams.sleep is not implemented" in result.detail, result


# -- StreamOps.sleep and torch.cuda._sleep ---------------------------------------------------------------


def test_sleep_is_unsupported_by_default_and_named():
    from torchdevice.backend import StreamOps

    ops = StreamOps("mychip")
    assert status_of(ops, "sleep")[0] is Status.UNSUPPORTED
    with pytest.raises(UnsupportedError, match="sleep.*mychip"):
        ops.sleep(10.0, 0)


def test_namespace_sleep_turns_milliseconds_into_cycles_with_the_device_current():
    """stand-in, not hardware-verified: NamespaceSleep calls <namespace>._sleep at the device's clock rate."""
    standin = StandIn("cuda", returns={"_sleep": None, "get_device_properties": StandInProperties(clock_rate=2_000)})
    streams_class = type("Streams", (NamespaceSleep, TorchStreams), {})
    view = NamespaceView(standin, ("_sleep", "get_device_properties", "device"))
    ops = bind_ops(streams_class, view)("chip", view)
    standin.reset()
    ops.sleep(1.5, 1)
    assert [(c.name, c.args) for c in standin.calls] == [
        ("get_device_properties", (1,)), ("device", (1,)), ("device.__enter__", ()), ("_sleep", (3_000,)),
        ("device.__exit__", ())]
    assert status_of(ops, "sleep") == (Status.TRANSLATED, "torch.cuda._sleep(ms x clock_rate cycles) with the device current")
    lacking = NamespaceView(StandIn("cuda"), ("get_device_properties", "device"))
    assert status_of(bind_ops(streams_class, lacking)("chip", lacking), "sleep")[0] is Status.UNSUPPORTED


def _cycles(ms: float) -> int:
    khz = torchdevice.get_device_properties(torchdevice.current_device()).clock_rate or DEFAULT_CLOCK_KHZ
    return int(ms * khz)


def test_cuda_sleep_on_a_host_synchronous_backend_sleeps_the_host():
    with registered(CPUBackend()), torchdevice.use("cpu"), torchdevice.patched():
        assert torch.cuda._sleep.__torchdevice_status__[0] is Status.EMULATED
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        start = time.perf_counter()
        torch.cuda._sleep(_cycles(100))
        took = (time.perf_counter() - start) * 1000
        end.record()
        end.synchronize()
        assert 90 <= took < 1000, took
        assert 90 <= begin.elapsed_time(end) < 1000


def test_cuda_sleep_on_a_backend_with_queues_queues_the_wait():
    with registered(qc.plugin), torchdevice.use(qc.NAME), torchdevice.patched():
        status, note = torch.cuda._sleep.__torchdevice_status__
        assert status is Status.EMULATED and note.startswith("queues cycles / clock_rate ms"), note
        for index in (0, 1):  # nothing left queued by an earlier test (a planted bug's pending work)
            torch.cuda.synchronize(index)
        torch.cuda.set_device(1)
        try:
            start = time.perf_counter()
            torch.cuda._sleep(_cycles(QUEUED_MS))
            assert (time.perf_counter() - start) * 1000 < QUEUED_MS / 2
            assert torch.cuda.current_stream().query() is False and torch.cuda.current_stream(0).query() is True
            torch.cuda.synchronize()
            assert (time.perf_counter() - start) * 1000 >= 0.9 * QUEUED_MS
            assert torch.cuda.current_stream().query() is True
        finally:
            torch.cuda.set_device(0)


def test_cuda_sleep_on_a_backend_with_queues_but_no_sleep_is_unsupported(monkeypatch):
    monkeypatch.setattr(qc.QueueStreams, "sleep", unsupported("sleep", "no queued waits"))
    with registered(qc.QueueChip()), torchdevice.use(qc.NAME), torchdevice.patched():
        with pytest.raises(UnsupportedError, match="cannot queue a wait on a stream"):
            torch.cuda._sleep(1000)


# -- sim --------------------------------------------------------------------------------------------------

SIM_PROGRAM = """
import json, sys
import torchdevice_sim
from torchdevice.backend import translated
from torchdevice.testing import check_backend
from torchdevice.torch_backend import TorchMemory
from torchdevice_sim.backend import SimBackend, plugin

class OneFigure(TorchMemory):
    @translated("device 0's figure for every index (wrong)")
    def memory_allocated(self, index):
        return int(self.ns.memory_allocated(0))

wrong = type("WrongSim", (SimBackend,), {"memory_class": OneFigure})()
out = {}
for key, backend in (("sim", plugin), ("one_figure", wrong)):
    report = check_backend(backend, raise_on_failure=False)
    out[key] = {r.name: [r.ok, r.detail] for r in report.results}
print(json.dumps(out))
"""


def test_sim_passes_the_kit_and_its_per_device_memory_is_checked():
    pytest.importorskip("torchdevice_sim")
    command = run_command([sys.executable, "-m", "torchdevice.testing", "--check", "torchdevice_sim.backend:plugin"],
                          timeout=300)
    assert command.returncode == 0 and "[ok] queues" in command.stdout, command  # the spec check before sim loads
    found = run_python(SIM_PROGRAM, timeout=300)
    assert found.returncode == 0, found
    results = json.loads(found.stdout.splitlines()[-1])
    assert all(ok for ok, _ in results["sim"].values()), results["sim"]
    ok, detail = results["one_figure"]["behaviour"]
    assert ok is False and "memory_allocated moved on other devices ({1: 16777216}" in detail, detail
