"""Tests of the mlx backend, run for real on MLX (mlx[cpu] on Linux): no stand-in anywhere.

The only simulated inputs are two availability cases this machine cannot
produce (MLX failing to import; MLX reporting a GPU), each labelled so.
"""
from __future__ import annotations

import sys
import threading
import time

import mlx.core as mx
import pytest
import torch

import torchdevice
import torchdevice_mlx
from torchdevice import router
from torchdevice.backend import Status, status_of
from torchdevice.collectives import DeviceComm
from torchdevice.testing import check_backend, info_json, router_sandbox
from torchdevice_mlx import backend as mlx_backend
from torchdevice_mlx import runtime
from torchdevice_mlx.backend import RNG_MAGIC, MLXStream

MIB = 1 << 20


@pytest.fixture
def on_mlx():
    with router_sandbox(), torchdevice.use("mlx"):
        yield router.active()


def _alloc(mib: int):
    array = mx.zeros((mib * MIB // 4,), dtype=mx.float32)
    mx.eval(array)
    return array


# -- discovery and selection ------------------------------------------------------------------


def test_available_on_request_only_without_gpu():
    found = torchdevice_mlx.plugin.availability()
    assert not mx.is_available(mx.gpu)
    assert found.available and not found.automatic
    assert "CPU only" in found.reason and "torchdevice.use('mlx')" in found.reason


def test_automatic_selection_skips_cpu_only_mlx_but_use_takes_it():
    with router_sandbox():
        record = next(r for r in torchdevice.backends() if r.name == "mlx")
        assert record.available and not record.automatic and not record.selected
        assert torchdevice.current_backend() != "mlx"
        with torchdevice.use("mlx"):
            assert torchdevice.current_backend() == "mlx" and torchdevice.device_type() == "cpu"
            assert torchdevice.device_count() == 1


def test_env_backend_selects_mlx(monkeypatch):
    with router_sandbox():
        monkeypatch.setenv("TORCHDEVICE_BACKEND", "mlx")
        router.invalidate()
        assert torchdevice.current_backend() == "mlx"
    router.invalidate()


def test_simulated_gpu_makes_it_automatic(monkeypatch):
    """Simulated (this machine has no MLX GPU): mx.is_available(mx.gpu) True -> automatic."""
    monkeypatch.setattr(mx, "is_available", lambda device: True)
    found = torchdevice_mlx.plugin.availability()
    assert found.available and found.automatic and "with a GPU" in found.reason


def test_simulated_import_failure_is_reported_not_raised(monkeypatch):
    """Simulated: mlx.core failing to import (plain `mlx` on Linux) gives the reason and the fix."""
    def broken():
        raise OSError("libmlx.so: cannot open shared object file")

    monkeypatch.setattr(runtime, "mx", broken)
    found = torchdevice_mlx.plugin.availability()
    assert not found.available and "libmlx.so" in found.reason
    assert runtime._HINT.get(sys.platform, "install mlx") in found.reason
    if sys.platform == "linux":
        assert "mlx[cpu]" in found.reason


def test_info_lists_mlx_through_its_entry_point():
    record = next(b for b in info_json()["backends"] if b["name"] == "mlx")
    assert (record["plugin"], record["distribution"], record["version"]) == ("mlx", "torchdevice-mlx", torchdevice_mlx.__version__)
    assert record["available"] is True and record["automatic"] is False and record["selected"] is False
    assert record["device_type"] == "cpu" and record["priority"] == 60


def test_properties(on_mlx):
    props = torchdevice.get_device_properties()
    info = mx.device_info()
    assert props.name == info["device_name"] and props.total_memory == mlx_backend.total_memory() > 0
    assert props.bf16_supported and props.raw == info
    # MLX devices have no compute capability: the router answers with the bf16 feature level
    assert mlx_backend.MLXBackend().device_properties(0).capability is None
    assert torchdevice.get_device_capability() == props.capability == (8, 0)


def test_conformance():
    check_backend(torchdevice_mlx.plugin)


# -- memory ----------------------------------------------------------------------------------


def test_memory_figures_move_with_mlx_arrays(on_mlx):
    mx.clear_cache()
    torchdevice.reset_peak_memory_stats()
    before = torchdevice.memory_allocated()
    assert before == mx.get_active_memory()
    array = _alloc(64)
    during = torchdevice.memory_allocated()
    assert during - before >= 64 * MIB
    assert torchdevice.max_memory_allocated() >= during
    assert torchdevice.memory_reserved() >= during
    stats = torchdevice.memory_stats()
    assert stats["allocated_bytes.all.current"] == during == stats["mlx.active_memory"]
    del array
    after = torchdevice.memory_allocated()
    assert during - after >= 64 * MIB
    assert torchdevice.max_memory_allocated() >= during  # the peak stays
    cached = mx.get_cache_memory()
    assert torchdevice.memory_reserved() == after + cached
    torchdevice.empty_cache()
    assert mx.get_cache_memory() == 0
    torchdevice.reset_peak_memory_stats()
    assert torchdevice.max_memory_allocated() < during


def test_torch_allocations_are_not_mlx_memory(on_mlx):
    before = torchdevice.memory_allocated()
    big = torch.ones(16 * MIB)
    assert torchdevice.memory_allocated() == before
    del big


def test_mem_get_info_and_fraction(on_mlx):
    limit = mx.get_memory_limit()
    try:
        array = _alloc(8)
        free, total = torchdevice.mem_get_info()
        assert total == limit and free == limit - mx.get_active_memory()
        torchdevice.set_per_process_memory_fraction(0.25)
        assert mx.get_memory_limit() == int(0.25 * mlx_backend.total_memory())
        assert torchdevice.get_per_process_memory_fraction() == pytest.approx(0.25, abs=1e-9)
        del array
    finally:
        mx.set_memory_limit(limit)


def test_max_memory_reserved_keeps_the_reserved_peak(on_mlx):
    torchdevice.reset_peak_memory_stats()
    assert torchdevice.max_memory_reserved() >= torchdevice.memory_reserved()
    assert torchdevice.max_memory_reserved() >= torchdevice.max_memory_allocated()
    torchdevice.reset_accumulated_memory_stats()  # a no-op: MLX keeps no counters
    assert status_of(on_mlx.memory, "reset_accumulated_memory_stats")[0] is Status.NOOP


# -- streams and events -----------------------------------------------------------------------


@pytest.fixture
def synchronized(monkeypatch):
    """Record the streams mx.synchronize is called with (calling the real function)."""
    seen = []
    real = mx.synchronize

    def spy(stream=None):
        seen.append(stream)
        return real(stream) if stream is not None else real()

    monkeypatch.setattr(mx, "synchronize", spy)
    return seen


def test_stream_wraps_a_new_mlx_stream(on_mlx):
    stream = torchdevice.Stream()
    assert isinstance(stream, MLXStream) and isinstance(stream.mx_stream, mx.Stream)
    assert stream.mx_stream != torchdevice.default_stream().mx_stream
    assert stream.query() is True


def test_current_stream_is_this_threads_mlx_default(on_mlx):
    stream = torchdevice.Stream()
    own_default = mx.default_stream(mx.default_device())
    assert torchdevice.default_stream().mx_stream == own_default
    with torchdevice.stream(stream):
        assert torchdevice.current_stream() is stream
        assert mx.default_stream(mx.default_device()) == stream.mx_stream
        result = mx.ones((4,)) * 3  # runs on the stream
        mx.eval(result)
        assert result.tolist() == [3.0] * 4
    assert mx.default_stream(mx.default_device()) == own_default
    with stream:
        assert mx.default_stream(mx.default_device()) == stream.mx_stream
    assert mx.default_stream(mx.default_device()) == own_default


def test_default_streams_are_per_thread(on_mlx):
    main = torchdevice.default_stream().mx_stream
    seen = {}
    thread = threading.Thread(target=lambda: seen.setdefault("other", torchdevice.default_stream().mx_stream))
    thread.start()
    thread.join()
    assert seen["other"] != main


def test_streams_are_bound_to_their_thread(on_mlx):
    stream = torchdevice.Stream()
    errors = []

    def use_elsewhere():
        try:
            with torchdevice.stream(stream):
                pass
        except RuntimeError as exc:
            errors.append(str(exc))
        stream.synchronize()  # synchronizing from another thread is fine

    thread = threading.Thread(target=use_elsewhere)
    thread.start()
    thread.join()
    assert errors and "binds to the thread that created it" in errors[0]


def test_synchronize_covers_default_and_live_streams(on_mlx, synchronized):
    stream = torchdevice.Stream()
    torchdevice.synchronize()
    assert mx.default_stream(mx.default_device()) in synchronized and stream.mx_stream in synchronized
    synchronized.clear()
    stream.synchronize()
    assert synchronized == [stream.mx_stream]


def test_event_record_synchronizes_its_stream_first(on_mlx, synchronized):
    stream = torchdevice.Stream()
    event = torchdevice.Event(enable_timing=True)
    event.record(stream)
    assert synchronized == [stream.mx_stream]


def test_event_timing_is_real_wall_time(on_mlx):
    start, end = torchdevice.Event(enable_timing=True), torchdevice.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    time.sleep(0.05)
    end.record()
    wall = (time.perf_counter() - t0) * 1000
    assert 49.5 <= start.elapsed_time(end) <= wall + 1
    with pytest.raises(ValueError, match="enable_timing"):
        torchdevice.Event().elapsed_time(end)


# -- random numbers ----------------------------------------------------------------------------


@pytest.fixture
def keep_rng():
    torch_state, key = torch.get_rng_state(), mx.random.state[0].tolist()
    yield
    torch.set_rng_state(torch_state)
    mx.random.seed((key[0] << 32) | key[1])


def _draws():
    return torch.rand(3), mx.random.uniform(shape=(3,)).tolist()


def test_manual_seed_seeds_torch_and_mlx(on_mlx, keep_rng):
    torchdevice.manual_seed(1234)
    first = _draws()
    assert torchdevice.initial_seed() == 1234
    torchdevice.manual_seed_all(1234)
    second = _draws()
    assert torch.equal(first[0], second[0]) and first[1] == second[1]
    torch.manual_seed(1234)
    mx.random.seed(1234)
    native = _draws()
    assert torch.equal(first[0], native[0]) and first[1] == native[1]


def test_seed_gives_both_the_same_fresh_seed(on_mlx, keep_rng):
    torchdevice.seed()
    fresh = torchdevice.initial_seed()
    assert mx.random.state[0].tolist() == [fresh >> 32, fresh & 0xFFFFFFFF]


def test_rng_state_round_trips_both(on_mlx, keep_rng):
    torchdevice.manual_seed(5)
    _draws()
    state = torchdevice.get_rng_state()
    assert state.dtype == torch.uint8 and bytes(state[-12:-8].tolist()) == RNG_MAGIC
    assert state.numel() == torch.get_rng_state().numel() + 12
    expected = _draws()
    torchdevice.manual_seed(99)
    torchdevice.set_rng_state(state)
    again = _draws()
    assert torch.equal(expected[0], again[0]) and expected[1] == again[1]
    assert torchdevice.get_rng_state_all()[0].numel() == state.numel()


def test_plain_torch_state_restores_torch_only(on_mlx, keep_rng):
    torch_state = torch.get_rng_state()
    expected = torch.rand(3)
    torchdevice.set_rng_state(torch_state)
    assert torch.equal(torch.rand(3), expected)


# -- collectives -------------------------------------------------------------------------------


def test_collectives_are_host_collectives(on_mlx):
    assert isinstance(on_mlx.collectives, DeviceComm)
    assert (on_mlx.collectives.dist_backend, on_mlx.collectives.device_type) == ("gloo", "cpu")


def test_collectives_expose_mlx_engine_for_torch_tensors(on_mlx):
    import torchdevice_mlx.distributed as mdist

    engine = on_mlx.collectives.mx_distributed
    assert engine is mdist
    # not launched by mlx.launch: a non-strict init gives a real world of one process
    engine.init(strict=False)
    t = torch.arange(4, dtype=torch.float32)
    engine.all_reduce(t, "sum")
    assert torch.equal(t, torch.arange(4, dtype=torch.float32))
    assert engine.get_world_size() == 1 and engine.get_rank() == 0
