"""The device-agnostic API on the built-in CPU backend, checked against the real machine.

Expected values come from outside torchdevice: ``time.perf_counter``, torch's
own CPU generator, ``/proc/self/status``, ``/proc/meminfo``, ``/proc/cpuinfo``
and ``os``. See the module docstring of :mod:`torchdevice.cpu` for what the
memory figures mean.
"""
from __future__ import annotations

import gc
import os
import threading
import time

import pytest
import torch

import torchdevice
from torchdevice import InvalidDeviceError, UnsupportedError, cpu

MiB = 1024 * 1024
TENSOR_BYTES = 128 * MiB
# The kernel's RSS counters are approximate (per-CPU/per-thread caches, synced every few dozen
# page faults), and VmHWM is only brought up to date on some events: compare within this slack.
SLACK = 8 * MiB

@pytest.fixture(autouse=True)
def _backend(request):
    """The cpu backend, except for the tests that take ``on_target`` (events and streams: CUDA's contract,
    which holds on the suite's target too)."""
    if "on_target" not in request.fixturenames:
        request.getfixturevalue("on_cpu")


def proc_kib(path: str, key: str) -> int:
    """Read ``key`` (a 'kB' field) of a /proc file, in bytes -- independently of torchdevice."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                value, unit = line.split(":", 1)[1].split()
                assert unit == "kB"
                return int(value) * 1024
    raise KeyError(key)


def rss() -> int:
    return proc_kib("/proc/self/status", "VmRSS")


# -- devices ----------------------------------------------------------------------------------


def test_one_cpu_device():
    assert torchdevice.current_backend() == "cpu"
    assert torchdevice.device_type() == "cpu"
    assert torchdevice.device_count() == 1
    assert torchdevice.current_device() == 0
    torchdevice.set_device(0)
    torchdevice.set_device("cpu:0")
    torchdevice.set_device(torch.device("cpu"))
    torchdevice.set_device(-1)  # ignored, as torch.cuda.set_device(-1)
    assert torchdevice.current_device() == 0
    with torchdevice.device(0):
        assert torchdevice.current_device() == 0
    with torchdevice.device(None):
        assert torchdevice.current_device() == 0
    torchdevice.synchronize()
    torchdevice.synchronize(0)


def test_properties_come_from_the_os():
    props = torchdevice.get_device_properties()
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    if models:  # x86 and most Linux; elsewhere the name comes from platform
        assert props.name == models[0]
    assert props.name and torchdevice.get_device_name() == props.name
    assert torchdevice.get_device_name(0) == props.name
    mem_total = proc_kib("/proc/meminfo", "MemTotal")
    assert abs(props.total_memory - mem_total) <= 0.02 * mem_total
    assert props.multi_processor_count == len(os.sched_getaffinity(0))  # the cores this process may use
    assert (props.major, props.minor) == props.capability == (8, 0)  # the bf16 feature level (below)
    assert torchdevice.is_bf16_supported() is True
    assert torch.ones(2, dtype=torch.bfloat16).sum().item() == 2.0


def test_capability_is_the_feature_level_the_target_offers(monkeypatch):
    # torch computes bfloat16 on every CPU: CUDA's first level with bf16 is (8, 0)
    assert torch.ones(2, dtype=torch.bfloat16).matmul(torch.ones(2, dtype=torch.bfloat16)).item() == 2.0
    assert torchdevice.is_bf16_supported() and torchdevice.get_device_capability() == (8, 0)
    monkeypatch.setenv("TORCHDEVICE_CAPABILITY", "8.6")
    torchdevice.use("cpu")  # properties are cached per resolution
    assert torchdevice.get_device_capability() == (8, 6)
    assert torchdevice.get_device_properties().major == 8 and torchdevice.get_device_properties().minor == 6
    for bad in ("8", "eight.six", "8.10", "-1.0"):
        monkeypatch.setenv("TORCHDEVICE_CAPABILITY", bad)
        torchdevice.use("cpu")
        with pytest.raises(ValueError, match=f"TORCHDEVICE_CAPABILITY={bad!r} is not valid: MAJOR.MINOR"):
            torchdevice.get_device_capability()


def test_no_bf16_means_the_fp16_level():
    from torchdevice.backend import DeviceProperties
    from torchdevice.capability import profile

    assert profile(DeviceProperties("x", 1, bf16_supported=False)) == (7, 0)
    assert profile(DeviceProperties("x", 1, bf16_supported=True)) == (8, 0)


@pytest.mark.parametrize("call", [
    lambda: torchdevice.set_device(1),
    lambda: torchdevice.set_device("cpu:1"),
    lambda: torchdevice.memory_allocated(1),
    lambda: torchdevice.get_device_properties(torch.device("cpu", 1)),
    lambda: torchdevice.get_rng_state(1),
    lambda: torchdevice.current_stream(1),
    lambda: torchdevice.Stream(device=1),
    lambda: torchdevice.device(1).__enter__(),
], ids=["set_device", "set_device_str", "memory_allocated", "properties", "rng_state", "current_stream",
        "Stream", "device_ctx"])
def test_invalid_device_index_raises_naming_it(call):
    with pytest.raises(InvalidDeviceError) as info:
        call()
    assert isinstance(info.value, torch.AcceleratorError) and isinstance(info.value, RuntimeError)
    assert "invalid device ordinal 1" in str(info.value) and "'cpu'" in str(info.value)
    assert "0..0" in str(info.value)
    assert torchdevice.current_device() == 0


def test_malformed_device_arguments_raise():
    with pytest.raises(TypeError, match="1.5"):
        torchdevice.set_device(1.5)
    with pytest.raises(TypeError):
        torchdevice.memory_allocated(True)
    with pytest.raises(RuntimeError, match="gpu:x"):
        torchdevice.memory_allocated("gpu:x")


# -- memory -----------------------------------------------------------------------------------


def test_memory_figures_move_with_a_128_mib_tensor():
    """allocated: exact tensor bytes (c10's counter, docs/memory.md); reserved: the resident set size."""
    exact = cpu.allocation_source() == "c10"
    gc.collect()
    before = torchdevice.memory_allocated()
    rss_before = torchdevice.memory_reserved()
    assert abs(rss_before - rss()) < 16 * MiB  # the resident set size, read independently
    x = torch.ones(TENSOR_BYTES // 4, dtype=torch.float32)
    assert x.nbytes == TENSOR_BYTES
    with_tensor = torchdevice.memory_allocated()
    grew = with_tensor - before
    assert grew == TENSOR_BYTES if exact else TENSOR_BYTES <= grew <= 1.15 * TENSOR_BYTES
    assert 0.9 * TENSOR_BYTES <= torchdevice.memory_reserved() - rss_before <= 1.15 * TENSOR_BYTES  # touched
    assert torchdevice.max_memory_allocated() >= with_tensor
    assert torchdevice.max_memory_reserved() >= torchdevice.memory_reserved() - SLACK
    stats = torchdevice.memory_stats()
    assert stats["allocated_bytes.all.current"] == with_tensor or not exact
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"]
    assert abs(stats["cpu.VmRSS"] - rss()) < 16 * MiB

    del x
    gc.collect()
    after = torchdevice.memory_allocated()
    assert with_tensor - after == TENSOR_BYTES if exact else with_tensor - after >= 0.9 * TENSOR_BYTES
    peak = torchdevice.max_memory_allocated()
    assert peak >= with_tensor  # the peak remembers the tensor (read while it was live)
    # every current figure drops with the free; every peak keeps the tensor
    reserved = torchdevice.memory_reserved()
    assert torchdevice.max_memory_reserved() - reserved >= 0.9 * TENSOR_BYTES
    freed = torchdevice.memory_stats()
    assert freed["allocated_bytes.all.peak"] - freed["allocated_bytes.all.current"] >= 0.9 * TENSOR_BYTES

    torchdevice.reset_peak_memory_stats()
    reset_peak = torchdevice.max_memory_allocated()
    assert reset_peak == torchdevice.memory_allocated() or not exact
    assert torchdevice.max_memory_reserved() <= peak + rss()  # VmHWM was reset too
    assert abs(torchdevice.max_memory_reserved() - proc_kib("/proc/self/status", "VmHWM")) < SLACK

    # a new allocation moves the reset peak again
    y = torch.empty(TENSOR_BYTES // 4, dtype=torch.float32)  # untouched: counted all the same
    assert torchdevice.max_memory_allocated() - reset_peak >= TENSOR_BYTES
    del y


def test_mem_get_info_matches_proc_meminfo():
    free, total = torchdevice.mem_get_info()
    assert total == proc_kib("/proc/meminfo", "MemTotal")
    available = proc_kib("/proc/meminfo", "MemAvailable")
    assert 0 < free <= total
    assert abs(free - available) < 256 * MiB  # other processes move the machine's free memory a little


def test_empty_cache_and_accumulated_reset_are_noops_that_work():
    torchdevice.empty_cache()
    torchdevice.reset_accumulated_memory_stats()
    assert torchdevice.memory_allocated() >= 0


def test_memory_fraction_errors_are_clear():
    for bad in (1.5, -0.1, "half", None):
        with pytest.raises(ValueError, match="fraction must be a number in \\[0, 1\\]"):
            torchdevice.set_per_process_memory_fraction(bad)
    with pytest.raises(UnsupportedError, match="set_per_process_memory_fraction.*'cpu'.*ulimit"):
        torchdevice.set_per_process_memory_fraction(0.5)
    assert torchdevice.get_per_process_memory_fraction() == 1.0  # torch sets no cap on CPU allocations
    with pytest.raises(InvalidDeviceError):
        torchdevice.set_per_process_memory_fraction(0.5, device=3)


# -- events -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sleep_s", [0.02, 0.1])
def test_event_timing_matches_perf_counter(on_target, sleep_s):
    start, end = torchdevice.Event(enable_timing=True), torchdevice.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    t1 = time.perf_counter()
    time.sleep(sleep_s)
    t2 = time.perf_counter()
    end.record()
    t3 = time.perf_counter()
    end.synchronize()  # as CUDA requires before timing (a host backend's events are complete when recorded)
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    # the events were recorded between t0..t1 and t2..t3: the elapsed time lies between the inner and outer gaps
    assert (t2 - t1) * 1000 <= elapsed <= (t3 - t0) * 1000
    assert elapsed >= sleep_s * 1000
    assert end.elapsed_time(start) == pytest.approx(-elapsed)


def test_event_timing_on_an_explicit_stream_and_record_event(on_target, target):
    stream = torchdevice.Stream()
    start = stream.record_event(torchdevice.Event(enable_timing=True))
    time.sleep(0.01)
    end = stream.record_event(torchdevice.Event(enable_timing=True))
    end.synchronize()
    assert start.elapsed_time(end) >= 10
    assert start.device == target.device(0) == torch.ones(1, device=torchdevice.device_type()).device
    assert start.query() and end.query() and stream.query()
    start.synchronize()
    end.wait(stream)
    stream.wait_event(end)
    stream.wait_stream(torchdevice.default_stream())
    stream.synchronize()


def test_elapsed_time_without_enable_timing_raises_like_cuda(on_target):
    plain, timed = torchdevice.Event(), torchdevice.Event(enable_timing=True)
    plain.record()
    timed.record()
    for a, b in ((plain, timed), (timed, plain), (plain, plain)):
        with pytest.raises(ValueError, match="enable_timing=True"):
            a.elapsed_time(b)


def test_elapsed_time_of_unrecorded_event_raises(on_target):
    start, end = torchdevice.Event(enable_timing=True), torchdevice.Event(enable_timing=True)
    assert end.query()  # CUDA also answers True for an event never recorded
    start.record()
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(end)
    with pytest.raises(ValueError, match="recorded"):
        end.elapsed_time(start)


def test_interprocess_event_is_unsupported(on_target, target):
    # torchdevice's own error on a host backend; a device type of its own refuses it as torch's events do
    with pytest.raises(RuntimeError if target.indexed else UnsupportedError, match="interprocess"):
        torchdevice.Event(interprocess=True)


# -- streams ----------------------------------------------------------------------------------


def test_current_stream_is_per_thread(on_target, target):
    default = torchdevice.default_stream()
    assert torchdevice.current_stream() == default
    assert default.stream_id == 0 and default.device == target.device(0) and default.device_index == 0
    mine = torchdevice.Stream()
    assert mine != default and mine.stream_id != 0
    torchdevice.set_stream(mine)
    try:
        assert torchdevice.current_stream() == mine
        seen = {}
        ready, proceed = threading.Event(), threading.Event()

        def worker():
            seen["start"] = torchdevice.current_stream()
            seen["device"] = torchdevice.current_device()
            theirs = torchdevice.Stream()
            torchdevice.set_stream(theirs)
            seen["theirs"] = theirs
            seen["after_set"] = torchdevice.current_stream()
            ready.set()
            proceed.wait(10)

        thread = threading.Thread(target=worker)
        thread.start()
        assert ready.wait(10)
        # while the other thread holds its own stream, ours is unchanged
        assert torchdevice.current_stream() == mine
        proceed.set()
        thread.join(10)
        assert seen["start"] == default
        if not target.indexed:  # a host backend's promise: one default stream object (torch's are new objects)
            assert seen["start"] is default
        assert seen["device"] == 0
        assert seen["after_set"] == seen["theirs"] != mine
        assert torchdevice.current_stream() == mine
    finally:
        torchdevice.set_stream(default)
    assert torchdevice.current_stream() == default


def test_stream_context_restores_and_nests(on_target, target):
    default = torchdevice.default_stream()
    s1, s2 = torchdevice.Stream(), torchdevice.Stream()
    with torchdevice.stream(s1) as entered:
        assert entered is s1 and torchdevice.current_stream() == s1
        with s2:
            assert torchdevice.current_stream() == s2
        assert torchdevice.current_stream() == s1
        with torchdevice.stream(None):
            assert torchdevice.current_stream() == s1
    assert torchdevice.current_stream() == default
    with torchdevice.stream(s1):
        y = torch.ones(1000, device=target.device(0)) * 2
    if not target.indexed:  # a host backend's streams complete work as it is issued
        assert s1.query()
    s1.synchronize()
    assert s1.query() and y.sum().item() == 2000.0


def test_set_stream_rejects_other_objects(on_target, target):
    with pytest.raises(TypeError, match="set_stream expects"):
        torchdevice.set_stream("stream")
    if not target.indexed:  # a host stream takes no pointer; a device type's own Stream class decides
        with pytest.raises(TypeError, match="unexpected arguments"):
            torchdevice.Stream(stream_ptr=123)


# -- random numbers -----------------------------------------------------------------------------


@pytest.mark.usefixtures("restore_rng")
class TestRNG:
    def test_state_round_trip_reproduces_torch_rand(self):
        state = torchdevice.get_rng_state()
        assert state.dtype == torch.uint8
        first = torch.rand(8)
        torchdevice.set_rng_state(state)
        assert torch.equal(torch.rand(8), first)
        torchdevice.set_rng_state(state, device=0)
        assert torch.equal(torch.rand(8), first)

    def test_state_is_torchs_cpu_generator_state(self):
        torch.manual_seed(99)
        assert torch.equal(torchdevice.get_rng_state(), torch.get_rng_state())
        state = torch.get_rng_state()
        expected = torch.randn(4)
        torchdevice.set_rng_state(state)
        assert torch.equal(torch.randn(4), expected)

    def test_all_states_round_trip(self):
        states = torchdevice.get_rng_state_all()
        assert len(states) == torchdevice.device_count() == 1
        first = torch.randint(0, 1000, (6,))
        torchdevice.set_rng_state_all(states)
        assert torch.equal(torch.randint(0, 1000, (6,)), first)

    def test_manual_seed_gives_native_numbers(self):
        torch.manual_seed(1234)
        native = torch.rand(5)
        torchdevice.manual_seed(1234)
        assert torch.equal(torch.rand(5), native)
        torchdevice.manual_seed_all(1234)
        assert torch.equal(torch.rand(5), native)
        assert torchdevice.initial_seed() == 1234 == torch.initial_seed()

    def test_seed_is_random_and_reported_by_initial_seed(self):
        torchdevice.seed()
        first = torchdevice.initial_seed()
        assert first == torch.initial_seed()
        torchdevice.seed_all()
        assert torchdevice.initial_seed() != first  # 64 random bits: a repeat means no reseed
        assert torchdevice.initial_seed() == torch.initial_seed()

    def test_bad_state_raises(self):
        with pytest.raises(TypeError, match="ByteTensor"):
            torchdevice.set_rng_state(torch.zeros(3))
        with pytest.raises(TypeError, match="ByteTensor"):
            torchdevice.set_rng_state([1, 2, 3])
        with pytest.raises(RuntimeError):
            torchdevice.set_rng_state(torch.zeros(3, dtype=torch.uint8))  # torch's own size check


def test_stream_priorities_clamp_into_the_host_range(on_cpu):
    # CUDA clamps a priority into Stream.priority_range(); a host backend has the one level 0
    assert torchdevice.Stream.priority_range() == (0, 0)
    assert torchdevice.Stream(priority=-3).priority == 0
    assert torchdevice.Stream(priority=5).priority == 0


# -- the CPU's description, read from the OS ------------------------------------------------------


def _meminfo_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_device_properties_describe_the_host(on_cpu):
    from torchdevice import router

    props = router.active().properties(0)
    assert props.type == "cpu"
    assert props.raw == {"cpu_capability": torch.backends.cpu.get_cpu_capability()}  # torch's own answer
    assert props.multi_processor_count == len(os.sched_getaffinity(0))  # the cores this process may use
    if os.path.exists("/proc/meminfo"):
        assert props.total_memory == _meminfo_total()  # the kernel's figure, by either route


def test_total_memory_falls_back_to_meminfo(monkeypatch):
    from torchdevice import host

    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo here")

    def no_sysconf(name):
        raise ValueError(f"unknown sysconf name {name}")

    monkeypatch.setattr(host.os, "sysconf", no_sysconf)
    assert host.total_memory() == _meminfo_total()


@pytest.mark.parametrize(("cpuinfo", "expected"), [
    ("processor\t: 0\nmodel name\t: Chip: rev 2 @ 3.0GHz\nflags\t: fpu\n", "Chip: rev 2 @ 3.0GHz"),
    ("processor\t: 0\nflags\t: fpu\n", None),  # no model name: what platform says
])
def test_cpu_name_is_the_model_name_line(monkeypatch, cpuinfo, expected):
    import io

    from torchdevice import host

    monkeypatch.setattr(host, "open", lambda path, *a, **k: io.StringIO(cpuinfo), raising=False)
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    assert host.cpu_name() == (expected or "x86_64")


def test_cpu_name_without_proc_is_what_platform_says(monkeypatch):
    from torchdevice import host

    def no_proc(path, *args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(host, "open", no_proc, raising=False)
    monkeypatch.setattr(host.platform, "machine", lambda: "arm64")
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    assert host.cpu_name() == "arm64"
    monkeypatch.setattr(host.platform, "processor", lambda: "arm")
    assert host.cpu_name() == "arm"


def test_dist_backend_is_the_active_backends_engine(on_cpu):
    assert torchdevice.dist_backend() == cpu.CPUCollectives.dist_backend == "gloo"
