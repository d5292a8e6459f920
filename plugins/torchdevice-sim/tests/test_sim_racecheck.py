"""sim's stream race checker (``TORCHDEVICE_SIM_RACECHECK=1``, ``torchdevice_sim.set_racecheck``).

Each test that expects silence also shows, in the same setting, a race being reported: a checker
that never reports fails every test here.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import torchdevice_sim
from torchdevice_sim import SimRaceError, config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def written_on_default(sim) -> torch.Tensor:
    """A tensor whose last write is a kernel still queued (behind a sleep) on the default stream."""
    x = torch.zeros(100, device="sim")
    sim.synchronize()
    sim._sleep(int(sim.get_device_properties(0).clock_rate * 50))  # 50 ms: the write is still queued
    x.fill_(1.0)
    return x


def test_a_missing_wait_stream_raises_naming_both_streams_and_the_fix(checked):
    sim = checked
    x = written_on_default(sim)
    side = sim.Stream()
    with sim.stream(side), pytest.raises(SimRaceError) as caught:
        x * 2
    message = str(caught.value)
    assert "read-after-write" in message and "aten::mul" in message
    assert f"stream {side.stream_id} of sim:0" in message and "stream 0 (the default stream) of sim:0" in message
    assert "argument 'self' (a float32 tensor of shape [100])" in message and "aten::fill_" in message
    assert "wait_stream" in message and "wait_event" in message and "record_stream` is not an ordering" in message
    assert isinstance(caught.value, RuntimeError)
    x.record_stream(side)  # keeps memory alive; orders nothing
    with sim.stream(side), pytest.raises(SimRaceError, match="read-after-write"):
        x * 2
    side.wait_stream(sim.current_stream())  # the fix
    with sim.stream(side):
        doubled = x * 2
    sim.current_stream().wait_stream(side)
    assert torch.equal(doubled.cpu(), torch.full((100,), 2.0))


@pytest.mark.parametrize("order", ["wait_stream", "wait_event", "stream_synchronize", "event_synchronize",
                                   "device_synchronize", "copy_to_host", "item"])
def test_each_ordering_of_the_program_silences_it(checked, order):
    sim = checked
    x = written_on_default(sim)
    side = sim.Stream()
    main = sim.current_stream()
    if order == "wait_stream":
        side.wait_stream(main)
    elif order == "wait_event":
        side.wait_event(main.record_event())
    elif order == "stream_synchronize":
        main.synchronize()
    elif order == "event_synchronize":
        main.record_event().synchronize()
    elif order == "device_synchronize":
        sim.synchronize()
    elif order == "copy_to_host":
        x.cpu()  # a blocking copy: the host waited for the default stream
    elif order == "item":
        x[0].item()
    with sim.stream(side):
        doubled = x * 2
    side.synchronize()
    assert torch.equal(doubled.cpu(), torch.full((100,), 2.0))
    # the same program, unordered, on the next write: the checker is on
    x.add_(1.0)
    with sim.stream(side), pytest.raises(SimRaceError, match="read-after-write"):
        x * 2


def test_an_event_recorded_before_the_write_does_not_order_it(checked):
    sim = checked
    main, side = sim.current_stream(), sim.Stream()
    x = torch.zeros(100, device="sim")
    sim.synchronize()
    early = main.record_event()
    x.fill_(1.0)  # after the record: the event does not cover it
    side.wait_event(early)
    with sim.stream(side), pytest.raises(SimRaceError, match="read-after-write"):
        x * 2
    side.wait_event(main.record_event())
    with sim.stream(side):
        x * 2


def test_write_after_read_across_streams_is_caught(checked):
    sim = checked
    main, side = sim.current_stream(), sim.Stream()
    x = torch.ones(100, device="sim")
    sim.synchronize()
    with sim.stream(side):
        y = x * 2  # reads x on the side stream
    with pytest.raises(SimRaceError) as caught:
        x.fill_(3.0)  # overwrites x on the default stream while the side stream may still read it
    message = str(caught.value)
    assert "write-after-read" in message and "aten::fill_.Scalar" in message and "aten::mul" in message
    assert f"stream {side.stream_id} of sim:0" in message and "stream 0 (the default stream)" in message
    main.wait_stream(side)
    x.fill_(3.0)
    sim.synchronize()
    assert torch.equal(y.cpu(), torch.full((100,), 2.0))


def test_write_after_write_across_streams_is_caught(checked):
    sim = checked
    side = sim.Stream()
    x = torch.ones(100, device="sim")
    sim.synchronize()
    with sim.stream(side):
        x.mul_(2.0)
    with pytest.raises(SimRaceError, match="write-after-write"):
        x.zero_()
    sim.current_stream().wait_stream(side)
    x.zero_()


def test_copies_are_accesses_on_their_stream(checked):
    sim = checked
    side = sim.Stream()
    host = torch.arange(100.0)
    with sim.stream(side):
        x = torch.empty(100, device="sim")
        x.copy_(host, non_blocking=True)  # pageable memory: the host waits for it, and learns the side stream
    assert torch.equal((x + 1).cpu(), host + 1)
    pinned = torch.empty(100).pin_memory()
    with sim.stream(side):
        x.mul_(2.0)
        pinned.copy_(x, non_blocking=True)  # asynchronous: the host has not waited for the side stream
    with pytest.raises(SimRaceError, match="read-after-write"):
        x + 1


def test_a_copy_between_devices_is_ordered_with_both_devices_streams(checked):
    sim = checked
    x = torch.arange(100.0, device="sim:0")  # written on sim:0, not synchronized
    y = x.to("sim:1")  # the copy runs after sim:0's queue: no race reading x
    y.add_(1.0)  # on sim:1's current stream, after the copy
    x.fill_(-1.0)  # on sim:0's, after the copy read x
    assert torch.equal(y.cpu(), torch.arange(100.0) + 1)
    y.add_(1.0)
    with sim.stream(sim.Stream(1)), pytest.raises(SimRaceError, match="read-after-write"):
        y * 2  # another stream of sim:1, not ordered after the add


def test_freed_memory_handed_out_again_starts_a_fresh_history(checked):
    sim = checked
    main, side = sim.current_stream(), sim.Stream()
    n = 12_345  # a size of its own, so the allocation below gets the block just freed
    with sim.stream(side):
        x = torch.ones(n, device="sim")  # written on the side stream
    address = x.data_ptr()
    del x
    while not (side.query() and main.query()):  # the queues pass the free; the host learns nothing
        time.sleep(0.001)
    y = torch.empty(n, device="sim")
    assert y.data_ptr() == address
    y.fill_(2.0)  # no race: new memory, whatever the block held before
    with sim.stream(side), pytest.raises(SimRaceError, match="read-after-write"):
        y * 2


def test_a_training_step_on_one_stream_raises_nothing(checked):
    sim = checked
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(16, 3)).to("sim")
    data, target = torch.randn(32, 8, device="sim"), torch.randint(0, 3, (32,), device="sim")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        opt.step()
    assert loss.item() > 0
    opt.step()  # queued, not waited for: reading a parameter on another stream now is a race
    with sim.stream(sim.Stream()), pytest.raises(SimRaceError, match="read-after-write"):
        model[0].weight * 2


def _streams_example():
    spec = importlib.util.spec_from_file_location("streams_cuda_racecheck", EXAMPLES / "streams_cuda.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cuda_program_with_correct_synchronization_translated_onto_sim_raises_nothing(checked, on_sim, tmp_path):
    example = _streams_example()
    result = example.main(["--size", "64", "--chunks", "4"])
    assert result["on_side"] and result["back_on_main"]
    # the same program without its wait_stream is caught
    source = (EXAMPLES / "streams_cuda.py").read_text()
    line = "side.wait_stream(main_stream)          # the side stream waits for x"
    assert line in source
    racy = tmp_path / "streams_racy.py"
    racy.write_text(source.replace(line, "pass"))
    spec = importlib.util.spec_from_file_location("streams_cuda_racy", racy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SimRaceError, match=r"read-after-write.*aten::(mm|relu)"):
        module.main(["--size", "64", "--chunks", "4"])


def test_off_by_default_and_off_reports_nothing(synced):
    assert not torchdevice_sim.racecheck_enabled()
    x = written_on_default(synced)
    side = synced.Stream()
    with synced.stream(side):
        x * 2  # a race, unreported with the checker off
    synced.synchronize()
    torchdevice_sim.set_racecheck(True)
    try:
        x.add_(1.0)
        with synced.stream(side), pytest.raises(SimRaceError):
            x * 2  # the same race, reported with it on
    finally:
        torchdevice_sim.set_racecheck(False)


def test_the_variable_turns_it_on_when_sim_loads(sim):
    program = ("import torch, torchdevice_sim\n"
               "sim = torchdevice_sim.load()\n"
               "assert torchdevice_sim.racecheck_enabled()\n"
               "x = torch.ones(4, device='sim')\n"
               "x.add_(1)\n"
               "try:\n"
               "    with sim.stream(sim.Stream()):\n"
               "        x * 2\n"
               "except torchdevice_sim.SimRaceError as error:\n"
               "    print('caught', error)\n")
    done = subprocess.run([sys.executable, "-c", program], env={**_env(), config.RACECHECK_VAR: "1"},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "caught sim race check: read-after-write" in done.stdout


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != config.RACECHECK_VAR and not k.startswith("TORCHDEVICE_BACKEND")}


@pytest.mark.parametrize("value", ["yes", "2", "on"])
def test_a_bad_racecheck_value_names_the_variable_and_the_valid_values(monkeypatch, value):
    monkeypatch.setenv(config.RACECHECK_VAR, value)
    with pytest.raises(ValueError, match=rf"TORCHDEVICE_SIM_RACECHECK='{value}' is not valid: use 1 .* or 0"):
        config.read()
    found = torchdevice_sim.plugin.availability()
    assert not found.available and config.RACECHECK_VAR in found.reason
    monkeypatch.setenv(config.RACECHECK_VAR, "0")
    assert config.read().racecheck is False
    monkeypatch.setenv(config.RACECHECK_VAR, "1")
    assert config.read().racecheck is True
