"""torch.cuda / torch.mps / torch.xpu / torch.mtia fronting the active backend (torchdevice.namespaces)."""
from __future__ import annotations

import dataclasses
import threading
import time
import warnings

import pytest
import torch
import torch.cuda.comm  # noqa: F401  (so the identity snapshot covers it)
import torch.cuda.nccl  # noqa: F401  (likewise)

import torchdevice
from torchdevice import UnsupportedError, namespaces, plugins, router, trace, translate
from torchdevice._patching import Patcher
from torchdevice.backend import STATUS_ATTR, Status
from torchdevice.errors import InvalidDeviceError

#: torch's build facts, read while translation is off (collection): empty on a CPU-only build
NATIVE_BUILD_FACTS = (torch.cuda.get_arch_list(), torch.cuda.get_gencode_flags())


def _modules():
    mods = [torch.cuda, torch.cuda.memory, torch.cuda.random, torch.cuda.streams, torch.cuda.graphs,
            torch.cuda.nvtx, torch.cuda.comm, torch.cuda.nccl, torch.cuda.amp, torch.mps, torch.mps.event, torch.xpu,
            torch.xpu.memory, torch.xpu.random, torch.xpu.streams, torch.mtia, torch.mtia.memory,
            torch.backends.mps, torch.backends.cudnn, torch.backends.cuda]
    return mods


def _snapshot():
    snap = {m.__name__: dict(vars(m)) for m in _modules()}
    snap["torch (fronted attributes)"] = {"get_device_module": torch.get_device_module}
    snap["torch.Tensor (fronted attributes)"] = {k: v for k, v in vars(torch.Tensor).items() if k == "record_stream"}
    snap["torch.Tensor.record_stream"] = {"record_stream": torch.Tensor.record_stream}
    return snap


def _assert_same(before, after):
    assert "record_stream" not in vars(torch.Tensor)  # inherited from TensorBase again
    for name, attrs in before.items():
        now = after[name]
        assert set(now) == set(attrs), f"{name}: attributes added/removed: {set(now) ^ set(attrs)}"
        changed = [k for k, v in attrs.items() if now[k] is not v]
        assert not changed, f"{name}: not restored (identity): {changed}"


@pytest.fixture
def patched(on_target, restore_rng):
    translate.patch()
    yield translate.target()
    translate.unpatch()


# -- turning it on and off --------------------------------------------------------------------------


def test_unpatch_restores_every_attribute_exactly(on_target):
    before = _snapshot()
    translate.patch()
    during = _snapshot()
    assert during["torch.cuda"]["memory_allocated"] is not before["torch.cuda"]["memory_allocated"]
    assert during["torch.cuda.memory"]["memory_allocated"] is during["torch.cuda"]["memory_allocated"]
    assert during["torch.cuda.random"]["manual_seed"] is during["torch.cuda"]["manual_seed"]
    assert during["torch.cuda.streams"]["Event"] is during["torch.cuda"]["Event"]
    translate.unpatch()
    _assert_same(before, _snapshot())


def test_unpatch_after_a_backend_switch_and_repatch(on_target, target):
    before = _snapshot()
    translate.patch()
    torchdevice.use(target.name)  # re-installs against the (same) new backend
    translate.patch()
    translate.unpatch()
    _assert_same(before, _snapshot())


def test_alias_taken_before_patching_sees_the_translation(patched):
    import torch as t  # noqa: F401

    from torchdevice import router

    cuda = __import__("torch").cuda  # the module object: patched in place
    assert cuda.is_available() is True
    assert cuda.get_device_name() == router.active().properties(0).name


def test_amp_is_left_alone(on_target):
    amp_before = torch.cuda.amp
    vars_before = dict(vars(torch.cuda.amp))
    p = Patcher()
    namespaces.install(p, translate.make_target())
    assert torch.cuda.amp is amp_before
    assert all(vars(torch.cuda.amp)[k] is v for k, v in vars_before.items())
    p.restore()


def test_only_source_namespaces_are_fronted(on_target):
    """A namespace of the target's own type is torch's own: untouched, hence native."""
    target = translate.make_target()
    only_mps = dataclasses.replace(target, sources=frozenset({"mps"}))
    cuda_before, mps_before = dict(vars(torch.cuda)), dict(vars(torch.mps))
    p = Patcher()
    namespaces.install(p, only_mps)
    try:
        assert all(vars(torch.cuda)[k] is v for k, v in cuda_before.items())
        assert torch.mps.synchronize is not mps_before["synchronize"]
        on_cuda = router.Target("fake", "cuda", 1, None, None, None, None)
        assert namespaces.status(on_cuda, "cuda", "memory_allocated")[0] is Status.NATIVE
    finally:
        p.restore()


# -- availability ----------------------------------------------------------------------------------------


def test_is_available_and_device_count_agree_while_translating(patched, target):
    """Only the source family (cuda by default) claims a device; the others agree at 0."""
    assert torch.cuda.is_available() is True and torch.cuda.device_count() == target.count
    for ns in (torch.xpu, torch.mtia, torch.mps):
        assert ns.is_available() is False
        assert ns.device_count() == 0
    assert torch.backends.mps.is_available() is False


@pytest.mark.parametrize("source", ["mps", "xpu", "mtia"])
def test_another_source_family_claims_the_device(on_target, target, restore_rng, source):
    with translate.patched(source=source) as patched_target:
        assert patched_target.source == source
        for name in ("cuda", "mps", "xpu", "mtia"):
            ns = getattr(torch, name)
            assert ns.is_available() is (name == source), name
            assert ns.device_count() == (target.count if name == source else 0), name
        assert torch.backends.mps.is_available() is (source == "mps")


def test_report_available_off(on_target, target):
    """report_available decides for an accelerator-less target only: one with devices of its own has them."""
    translate.patch(report_available=False)
    try:
        assert torch.cuda.is_available() is target.indexed
        assert torch.cuda.device_count() == (target.count if target.indexed else 0)
        assert torch.backends.mps.is_available() is False
        assert torch.cuda.memory_allocated() >= 0  # the backend still answers when asked
    finally:
        translate.unpatch()


def test_report_available_env(on_target, target, monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_REPORT_AVAILABLE", "0")
    translate.patch()
    try:
        assert torch.cuda.is_available() is target.indexed
        assert torch.cuda.device_count() == (target.count if target.indexed else 0)
    finally:
        translate.unpatch()
    monkeypatch.setenv("TORCHDEVICE_REPORT_AVAILABLE", "1")
    translate.patch()
    try:
        assert torch.cuda.is_available() is True and torch.cuda.device_count() == target.count
    finally:
        translate.unpatch()


def test_init_and_is_initialized(patched):
    torch.cuda.init()
    assert torch.cuda.is_initialized() is True


# -- devices ----------------------------------------------------------------------------------------------


def test_device_context_and_invalid_index(patched, target):
    missing = target.count  # one past the target's last device
    assert torch.cuda.current_device() == 0
    with torch.cuda.device(0):
        assert torch.cuda.current_device() == 0
    with torch.cuda.device(None), torch.cuda.device(-1):
        assert torch.cuda.current_device() == 0
    torch.cuda.set_device(-1)  # a no-op, as CUDA
    torch.cuda.set_device("cuda:0")
    with pytest.raises(InvalidDeviceError) as info:
        torch.cuda.set_device(missing)
    assert isinstance(info.value, torch.AcceleratorError)
    with pytest.raises(torch.AcceleratorError):
        with torch.cuda.device(missing + 2):
            pass
    with pytest.raises(torch.AcceleratorError):
        torch.cuda.memory_allocated(f"cuda:{missing}")
    assert isinstance(torch.cuda.device(0), torch.cuda.device)


def test_device_of_a_translated_tensor(patched):
    x = torch.ones(2, device="cuda")
    with torch.cuda.device_of(x):
        assert torch.cuda.current_device() == 0
    assert isinstance(torch.cuda.device_of(x), torch.cuda.device)


def test_properties(patched, target):
    from torchdevice import router

    props = torch.cuda.get_device_properties(0)
    assert props is router.active().properties(0)
    assert props.total_memory > 0
    assert torch.cuda.get_device_name("cuda:0") == props.name
    assert torch.cuda.is_bf16_supported() is True
    assert torch.mps.recommended_max_memory() == props.total_memory
    # answered, as on CUDA, with the feature level the target offers (the cpu backend: Ampere's, consistent
    # with bf16; a device type of its own: its own answer)
    level = (8, 0) if target.name == "cpu" else tuple(target.module.get_device_capability(0))
    assert torch.cuda.get_device_capability() == (props.major, props.minor) == level
    assert torch.cuda.get_device_capability("cuda:0") == level


# -- memory -----------------------------------------------------------------------------------------------


def test_memory_figures_are_real(patched):
    before = torch.cuda.memory_allocated()
    x = torch.ones(2**25, device="cuda")  # 128 MiB, touched
    after = torch.cuda.memory_allocated()
    assert after - before >= 100 * 2**20
    assert torch.cuda.max_memory_allocated() >= after
    assert torch.cuda.memory_reserved() >= after - 2**20  # touched: resident
    free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total
    used = torch.cuda.device_memory_used()
    assert abs(used - (total - free)) < 256 * 2**20  # two readings of /proc/meminfo
    stats = torch.cuda.memory_stats()
    nested = torch.cuda.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] > 0
    assert stats["allocated_bytes.all.current"] > 0
    assert "Allocated memory" in torch.cuda.memory_summary()
    assert torch.mps.current_allocated_memory() > 0 and torch.mps.driver_allocated_memory() > 0
    del x


def test_deprecated_memory_aliases_warn_like_torch(patched):
    with pytest.warns(FutureWarning, match="renamed to `torch.cuda.memory_reserved`"):
        assert torch.cuda.memory_cached() > 0
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        torch.cuda.reset_max_memory_allocated()


@pytest.mark.cpu_only(reason="the cpu backend has no allocator cache nor memory fraction; sim has both "
                             "(plugins/torchdevice-sim/tests/test_sim_device.py)")
def test_empty_cache_is_a_noop_and_fraction_unsupported_on_cpu(patched):
    assert torch.cuda.empty_cache() is None
    assert torch.cuda.empty_cache.__torchdevice_status__[0] is Status.NOOP
    with pytest.raises(UnsupportedError, match=r"torch\.cuda\.set_per_process_memory_fraction .*'cpu'"):
        torch.cuda.set_per_process_memory_fraction(0.5)


# -- streams and events -------------------------------------------------------------------------------------


def test_stream_and_event_classes_are_the_backends(patched):
    from torchdevice import router

    streams = router.active().streams
    assert torch.cuda.Stream is streams.Stream and torch.cuda.Event is streams.Event
    assert torch.cuda.streams.Event is streams.Event and torch.xpu.Stream is streams.Stream
    assert torch.mtia.Event is streams.Event and torch.mps.Event is streams.Event
    e = torch.cuda.Event(enable_timing=True)
    assert isinstance(e, torch.cuda.Event)
    assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)


def test_timing_events_measure_real_time(patched):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    torch.cuda.synchronize()
    assert 45 <= start.elapsed_time(end) < 2000
    assert end.query() is True


def test_stream_context_selects_and_restores(patched):
    default = torch.cuda.current_stream()
    s = torch.cuda.Stream()
    ctx = torch.cuda.stream(s)
    assert isinstance(ctx, torch.cuda.StreamContext)
    with ctx:
        assert torch.cuda.current_stream() == s
        with torch.cuda.stream(None):
            assert torch.cuda.current_stream() == s
    assert torch.cuda.current_stream() == default
    torch.cuda.set_stream(s)
    assert torch.cuda.current_stream() == s
    torch.cuda.set_stream(None)  # a no-op
    assert torch.cuda.current_stream() == s
    torch.cuda.set_stream(default)
    assert torch.cuda.default_stream() == default


def test_current_stream_is_per_thread(patched):
    s = torch.cuda.Stream()
    seen = {}

    def worker():
        seen["start"] = torch.cuda.current_stream()
        with torch.cuda.stream(s):
            seen["inside"] = torch.cuda.current_stream()
            time.sleep(0.05)

    thread = threading.Thread(target=worker)
    thread.start()
    time.sleep(0.02)
    main = torch.cuda.current_stream()
    thread.join()
    assert seen["inside"] == s and seen["start"] == torch.cuda.default_stream()
    assert main == torch.cuda.default_stream()


def test_record_stream_accepts_the_backends_streams(patched):
    side = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    side.wait_stream(torch.cuda.current_stream())  # x is written on the default stream (sim caught the race)
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    assert y.record_stream(side) is None
    assert torch.equal(y.cpu(), torch.full((4,), 2.0))


def test_get_device_module_gives_the_fronted_namespace(patched, target):
    assert torch.get_device_module("cuda") is torch.cuda
    assert torch.get_device_module("xpu:0") is torch.xpu
    assert torch.get_device_module("cpu") is torch.cpu
    assert torch.get_device_module(torch.device("cuda")) is target.module  # a device object is already translated


@pytest.mark.cpu_only(reason="sim refuses set_sync_debug_mode (UnsupportedError: it cannot report which "
                             "operations synchronize); the cpu backend keeps the mode")
def test_sync_debug_mode_is_kept(patched):
    torch.cuda.set_sync_debug_mode("warn")
    assert torch.cuda.get_sync_debug_mode() == 1
    torch.cuda.set_sync_debug_mode(0)
    assert torch.cuda.get_sync_debug_mode() == 0
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.cuda.set_sync_debug_mode("loud")


# -- random numbers ----------------------------------------------------------------------------------------


def test_seeded_numbers_match_native_code_on_the_target(patched, target):
    torch.cuda.manual_seed(1234)
    a = torch.randn(5, device="cuda")
    target.default_generators()[0].manual_seed(1234)  # the same draw written natively for the target
    b = torch.randn(5, device=target.device(0))
    assert torch.equal(a.cpu(), b.cpu())
    state = torch.cuda.get_rng_state()
    c = torch.rand(3, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(c.cpu(), torch.rand(3, device="cuda").cpu())
    states = torch.cuda.get_rng_state_all()
    assert len(states) == target.count
    torch.cuda.set_rng_state_all(states)
    assert torch.cuda.default_generators == target.default_generators()
    torch.cuda.manual_seed_all(7)
    assert torch.cuda.initial_seed() == 7
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.cuda.set_rng_state(torch.zeros(3))


def test_fork_rng_over_the_translated_namespace(patched):
    torch.manual_seed(0)
    with torch.random.fork_rng(devices=[0], device_type="cuda"):
        torch.rand(3)
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(3))


# -- nvtx, comm, misc -----------------------------------------------------------------------------------------


def test_nvtx_depths_are_true(patched):
    assert torch.cuda.nvtx.range_push("outer") == 0
    assert torch.cuda.nvtx.range_push("inner") == 1
    assert torch.cuda.nvtx.range_pop() == 1
    assert torch.cuda.nvtx.range_pop() == 0
    assert torch.cuda.nvtx.range_pop() == -1  # nothing open, as NVTX answers
    with torch.cuda.nvtx.range("step {}", 3):
        assert torch.cuda.nvtx.range_push("x") == 1
        torch.cuda.nvtx.range_pop()
    assert torch.cuda.nvtx.mark("m") is None
    a, b = torch.cuda.nvtx.range_start("a"), torch.cuda.nvtx.range_start("b")
    assert isinstance(a, int) and a != b
    assert torch.cuda.nvtx.range_end(a) is None


def test_comm_routes_to_the_translated_comm_module(patched):
    x = torch.arange(3.0, device="cuda")
    copies = torch.cuda.comm.broadcast(x, [0, 0])
    assert len(copies) == 2 and all(torch.equal(c, x) for c in copies)
    assert torch.equal(torch.cuda.comm.reduce_add([x, x], 0), 2 * x)


def test_helpers_and_build_facts_pass_through(patched):
    import functools
    import typing

    assert torch.cuda.cast is typing.cast and torch.cuda.lru_cache is functools.lru_cache
    assert (torch.cuda.get_arch_list(), torch.cuda.get_gencode_flags()) == NATIVE_BUILD_FACTS
    assert torch.mtia.classproperty is not None  # torch 2.13 lacks it; the catalog lists it


def test_check_error(patched):
    assert torch.cuda.check_error(0) is None
    with pytest.raises(torch.cuda.CudaError, match="2"):
        torch.cuda.check_error(2)


def test_make_graphed_callables_runs_eagerly(patched):
    layer = torch.nn.Linear(2, 2)
    assert torch.cuda.make_graphed_callables(layer, (torch.randn(1, 2),)) is layer
    assert torch.cuda.is_current_stream_capturing() is False


def test_unsupported_errors_name_function_backend_and_alternative(patched, target):
    for fn, api in ((torch.cuda.cudart, "torch.cuda.cudart"), (torch.cuda.memory_usage, "torch.cuda.memory_usage"),
                    (torch.mps.compile_shader, "torch.mps.compile_shader"),
                    (torch.mtia.record_memory_history, "torch.mtia.record_memory_history")):
        with pytest.raises(UnsupportedError) as info:
            fn()
        assert info.value.function == api and info.value.backend == target.name and info.value.instead
        assert str(info.value).startswith(f"{api} is not supported on torchdevice backend '{target.name}'; instead: ")


def test_unsupported_classes_raise_on_construction_and_keep_isinstance(patched, target):
    for cls, api in ((torch.cuda.CUDAGraph, "torch.cuda.CUDAGraph"), (torch.cuda.graph, "torch.cuda.graph"),
                     (torch.cuda.MemPool, "torch.cuda.MemPool"), (torch.cuda.ExternalStream, "torch.cuda.ExternalStream"),
                     (torch.xpu.XPUGraph, "torch.xpu.XPUGraph")):
        assert isinstance(cls, type) and not isinstance(object(), cls)
        with pytest.raises(UnsupportedError) as info:
            cls()
        assert info.value.function == api and info.value.backend == target.name and info.value.instead
    assert torch.cuda.graphs.CUDAGraph is torch.cuda.CUDAGraph


def test_backend_flags_can_be_set(patched):
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, cudnn.enabled, matmul.allow_tf32,
             matmul.fp32_precision, matmul.allow_fp16_reduced_precision_reduction)
    try:
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = True, True, False
        matmul.allow_tf32 = True
        matmul.allow_fp16_reduced_precision_reduction = False
        assert (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32) == (True, True, False, True)
        assert matmul.allow_fp16_reduced_precision_reduction is False
        matmul.fp32_precision = "tf32"
        assert matmul.fp32_precision == "tf32"
        x = torch.randn(4, 4, device="cuda")
        torch.testing.assert_close((x @ x).cpu(), x.cpu() @ x.cpu())  # the flags change nothing: CPU kernels
    finally:
        (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, cudnn.enabled, matmul.allow_tf32,
         matmul.fp32_precision, matmul.allow_fp16_reduced_precision_reduction) = saved


# -- cost and tracing ---------------------------------------------------------------------------------------------


def test_no_hook_is_called_at_call_time(patched, monkeypatch):
    torch.cuda.get_device_properties()  # device properties: one hook call per device, then cached by the router

    def forbidden(*args, **kwargs):
        raise AssertionError("a pluggy hook was called on a hot path")

    monkeypatch.setattr(plugins, "call_first", forbidden)
    monkeypatch.setattr(plugins, "call_each", forbidden)
    torch.cuda.synchronize()
    torch.cuda.memory_allocated()
    torch.cuda.current_stream()
    torch.cuda.get_device_properties()
    torch.cuda.manual_seed(0)
    torch.cuda.Event(enable_timing=True).record()
    with torch.cuda.device(0), torch.cuda.stream(torch.cuda.Stream()):
        pass


def test_calls_are_traced_with_how_they_were_handled(patched, target):
    trace.reset()
    trace.start_report()
    try:
        torch.cuda.synchronize()
        torch.cuda.synchronize()
        torch.cuda.memory_allocated()
        with pytest.raises(UnsupportedError):
            torch.cuda.cudart()
        torch.cuda.cast(int, 1)  # native: not a translated call
        with torch.cuda.device(0):
            pass
        uses = {u.api: u for u in trace.report_data()}
    finally:
        trace.stop_report()
        trace.reset()
    assert uses["torch.cuda.synchronize"].calls == 2
    # the cpu backend runs every op at once (nothing to wait for) and answers memory itself; a device type of
    # its own answers from its own namespace
    own = f"native: torch.{target.device_type}."
    assert uses["torch.cuda.synchronize"].how.startswith(own + "synchronize" if target.indexed else "no-op")
    assert uses["torch.cuda.memory_allocated"].how.startswith(own + "memory_allocated" if target.indexed
                                                              else "translated")
    assert uses["torch.cuda.cudart"].how == "unsupported"
    assert "torch.cuda.device" in uses
    assert "torch.cuda.cast" not in uses
    site = next(iter(uses["torch.cuda.synchronize"].sites))
    assert site.startswith(__file__)


def test_the_allocator_history_recipe_answers_from_the_backend(patched, target, tmp_path):
    """torch.cuda.memory's own functions (the memory-visualizer recipe) raise no raw torch._C AttributeError."""
    import pickle

    with pytest.raises(UnsupportedError, match=r"torch\.cuda\.memory\._record_memory_history is not supported .*"
                                                r"torch\.cuda\.memory_stats\(\)"):
        torch.cuda.memory._record_memory_history(max_entries=1000)
    empty = {"segments": [], "device_traces": [[] for _ in range(target.count)]}  # a trace per device
    assert torch.cuda.memory._snapshot() == empty
    assert torch.cuda.memory._snapshot(0, augment_with_fx_traces=True) == torch.cuda.memory._snapshot()
    with pytest.raises(InvalidDeviceError):
        torch.cuda.memory._snapshot(f"cuda:{target.count}")
    path = tmp_path / "snapshot.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    assert pickle.loads(path.read_bytes()) == empty
    assert "_snapshot" not in vars(torch.cuda)  # patched in torch.cuda.memory only


def test_nccl_answers_from_the_collective_engine(patched, target):
    with pytest.raises(UnsupportedError, match=rf"torch\.cuda\.nccl\.version .*engine \({target.engine}\) reports no "
                                                r"version; torchdevice\.dist_backend\(\)"):
        torch.cuda.nccl.version()
    tensors = [torch.ones(2, device="cuda")]
    for call, instead in ((lambda: torch.cuda.nccl.all_reduce(tensors), "torch.distributed.all_reduce"),
                          (lambda: torch.cuda.nccl.broadcast(tensors), "torch.cuda.comm.broadcast"),
                          (lambda: torch.cuda.nccl.reduce(tensors), "torch.cuda.comm.reduce_add"),
                          (lambda: torch.cuda.nccl.all_gather(tensors, tensors), "torch.distributed.all_gather"),
                          (lambda: torch.cuda.nccl.reduce_scatter(tensors, tensors), "reduce_scatter_tensor"),
                          (torch.cuda.nccl.unique_id, "init_process_group")):
        with pytest.raises(UnsupportedError, match=instead):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own "not compiled with NCCL support"
        assert torch.cuda.nccl.is_available(tensors) is False


def test_tunable_is_off_and_its_settings_refused(patched):
    assert torch.cuda.tunable.is_enabled() is False and torch.cuda.tunable.tuning_is_enabled() is False
    with pytest.raises(UnsupportedError, match=r"torch\.cuda\.tunable\.enable .*is_enabled\(\) is False"):
        torch.cuda.tunable.enable(True)
    with pytest.raises(UnsupportedError, match="TunableOp"):
        torch.cuda.tunable.set_max_tuning_iterations(10)


@pytest.mark.cpu_only(reason="sim refuses it (UnsupportedError: its caching allocator cannot be switched off from "
                             "Python); the cpu backend has no cache to switch off")
def test_caching_allocator_disabled_is_an_empty_context_on_cpu(patched):
    with torch.cuda.memory.caching_allocator_disabled():
        assert torch.zeros(3, device="cuda").sum().item() == 0
    with torch.cuda.caching_allocator_disabled():
        pass


def test_nccl_version_is_the_engines_where_it_has_one(on_cpu, restore_rng):
    from helpers import make_backend

    from torchdevice.backend import translated
    from torchdevice.cpu import CPUCollectives

    class VersionedCollectives(CPUCollectives):
        dist_backend = "ccl"

        @translated("the ccl library's version")
        def engine_version(self):
            return (2, 21, 5)

    backend = make_backend("versioned", 1)
    backend.collectives = lambda: VersionedCollectives("versioned")
    on_cpu.register(backend)
    torchdevice.use("versioned")
    with torchdevice.patched():
        assert torch.cuda.nccl.version() == (2, 21, 5)
    assert namespaces.api_status(router.Target("versioned", "cpu", 1, None, None, None, VersionedCollectives("v")),
                                 "torch.cuda.nccl.version") == (Status.TRANSLATED, "the ccl library's version")


def test_wrappers_carry_their_status(patched, target):
    if target.indexed:  # a device type of its own answers from its own namespace (torch.sim), its device guard
        assert torch.cuda.memory_allocated.__torchdevice_status__ == (
            Status.NATIVE, f"torch.{target.device_type}.memory_allocated")
    else:
        assert torch.cuda.memory_allocated.__torchdevice_status__[0] is Status.TRANSLATED
    assert torch.cuda.cudart.__torchdevice_status__[0] is Status.UNSUPPORTED
    assert getattr(torch.cuda.device, STATUS_ATTR)[0] is (Status.NATIVE if target.indexed else Status.EMULATED)


def test_fronted_names_exist_in_torch():
    for ns in namespaces.NAMESPACES:
        for api in namespaces.fronted(ns):
            assert namespaces.api_status(router.Target("cpu", "cpu", 1, None, None, None, None), api) is not None, api


def test_switching_backend_reinstalls(on_cpu):
    from torchdevice import router

    records = router.discover()
    if "mlx" not in records or not records["mlx"].available:
        pytest.skip("the mlx backend is not available here")
    translate.patch()
    try:
        cpu_stream = torch.cuda.Stream
        torchdevice.use("mlx")
        assert torch.cuda.Stream is router.active().streams.Stream
        assert torch.cuda.Stream is not cpu_stream
        assert torch.cuda.is_available()
        torchdevice.use("cpu")
        assert torch.cuda.Stream is cpu_stream
    finally:
        translate.unpatch()


def test_device_context_accepts_device_strings(on_target, target):
    # torch.cuda.device("cuda:0") takes strings as CUDA does (a str has an .index method: not a device index)
    last = target.count - 1
    with torchdevice.patched():
        with torch.cuda.device(f"cuda:{last}"):
            assert torch.cuda.current_device() == last
        with torch.cuda.device(torch.device("cuda", last)):
            assert torch.cuda.current_device() == last
        assert torch.cuda.current_device() == 0


def _kinds_and_defaults(sig):
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def test_generated_wrappers_take_exactly_their_implementations_parameters(patched):
    import inspect

    wrappers = [getattr(torch.cuda, n) for n in dir(torch.cuda)]
    # an unsupported function's raiser takes (*args, **kwargs); where torch's function wraps another it carries that
    # __wrapped__ (torchdevice._patching), so it is not a generated wrapper
    wrappers = [w for w in wrappers if inspect.isfunction(w) and hasattr(w, STATUS_ATTR) and hasattr(w, "__wrapped__")
                and getattr(w, STATUS_ATTR)[0] is not Status.UNSUPPORTED]
    assert len(wrappers) > 40
    for w in wrappers:
        own = inspect.signature(w, follow_wrapped=False)  # the generated code's own parameter list
        assert _kinds_and_defaults(own) == _kinds_and_defaults(inspect.signature(w.__wrapped__)), w.__name__
        assert w.__code__.co_name == w.__name__  # tracebacks name the function, not "wrapper"
