"""``torch.accelerator`` while translating: it answers as the source family's namespace (torch.cuda).

Code written the device-agnostic way (pytorch/examples: ``torch.accelerator.is_available()`` then
``current_accelerator()``) takes its accelerator path translated and gives the native CPU run's
numbers; each function answers what the source family's own function answers on that target (cpu,
mlx, sim, and the stand-in plugins mps/xpu/mtia); torch's own code -- all of it -- keeps torch's real
answers; ``unpatch()`` restores the module exactly.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import run_command, torchdevice_script

import torchdevice
from torchdevice import namespaces, router
from torchdevice.backend import STATUS_ATTR, Status
from torchdevice.testing import StandIn, registered
from torchdevice.torch_backend import TorchNamespaceBackend

PROGRAMS = Path(__file__).parent / "programs"
TORCH_DIR = os.path.dirname(torch.__file__)
RealDevice = torch.device


def _available(name: str) -> bool:
    record = router.discover().get(name)
    return record is not None and bool(record.available)


def _backend(name: str):
    if not _available(name):
        pytest.skip(f"the {name} backend is not available here")
    return name


@pytest.fixture(params=["cpu", "mlx"])  # sim: plugins/torchdevice-sim/tests (it changes torch for the process)
def backend(request, router_state):
    name = _backend(request.param)
    torchdevice.use(name)
    yield name


def _module_state() -> dict[str, dict]:
    return {m.__name__: dict(vars(m)) for m in (torch.accelerator, torch.accelerator.memory, torch.accelerator.graphs)}


def _same_answers_as_the_source_family() -> None:
    A, C = torch.accelerator, torch.cuda
    assert A.is_available() is True and A.is_available() == C.is_available()
    assert A.device_count() == C.device_count() >= 1
    assert A.current_accelerator() == RealDevice("cuda") and A.current_accelerator().index is None
    assert A.current_accelerator(check_available=True) == RealDevice("cuda")
    assert A.current_device_index() == C.current_device() == 0
    assert A.current_stream() == C.current_stream()
    x = torch.ones(1024, device=A.current_accelerator())
    assert x.device == torch.ones(1, device="cuda").device
    A.synchronize()
    assert A.memory_allocated() == C.memory_allocated() >= x.numel() * 4
    assert A.max_memory_allocated() >= A.memory_allocated()
    assert set(A.memory_stats()) == set(C.memory_stats())
    free, total = A.get_memory_info()
    assert 0 <= free <= total and total > 0
    A.reset_peak_memory_stats()
    A.reset_accumulated_memory_stats()
    A.empty_cache()
    assert A.max_memory_allocated() >= A.memory_allocated()
    del x


def test_every_function_answers_as_the_source_familys(backend):
    with torchdevice.patched():
        _same_answers_as_the_source_family()
        for name in ("memory_allocated", "synchronize", "current_stream", "is_available"):
            ours = getattr(getattr(torch.accelerator, name), STATUS_ATTR)
            assert ours[0] is getattr(torch.cuda, name if name != "current_device_index" else "current_device",
                                      ).__torchdevice_status__[0], name


def test_streams_are_the_targets_and_set_stream_selects_one(backend):
    with torchdevice.patched():
        stream = torch.cuda.Stream()
        torch.accelerator.set_stream(stream)
        try:
            assert torch.accelerator.current_stream() == stream == torch.cuda.current_stream()
        finally:
            torch.accelerator.set_stream(torch.cuda.default_stream())
        assert torch.accelerator.current_stream() == torch.cuda.default_stream()


def test_device_index_switches_the_current_device_for_its_block(router_state):
    router_state.setenv("TORCHDEVICE_DEVICE_COUNT", "2")  # two logical devices of the cpu backend
    torchdevice.use("cpu")
    with torchdevice.patched():
        assert torch.accelerator.device_count() == torch.cuda.device_count() == 2
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == torch.cuda.current_device() == 1
            with torch.accelerator.device_index(None):
                assert torch.accelerator.current_device_index() == 1
        assert torch.accelerator.current_device_index() == 0
        torch.accelerator.set_device_index("cuda:1")
        try:
            assert torch.cuda.current_device() == 1
            assert torch.accelerator.memory_allocated() == torch.cuda.memory_allocated(1)
        finally:
            torch.accelerator.set_device_index(0)


@pytest.mark.cpu_only(reason="a host target's no-op; sim has a host allocator of its own (test_sim_accelerator.py)")
def test_empty_host_cache_is_a_no_op_on_a_host_target(on_target):
    with torchdevice.patched():
        status, note = getattr(torch.accelerator.empty_host_cache, STATUS_ATTR)
        assert status is Status.NOOP and "host memory" in note
        assert torch.accelerator.empty_host_cache() is None


def test_supported_dtypes_are_those_a_program_can_use(backend):
    with torchdevice.patched():
        capability = torch.accelerator.get_device_capability()
        dtypes = capability["supported_dtypes"]
        assert {torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool} <= dtypes
        for dtype in dtypes:
            made = torch.ones(2, dtype=dtype, device="cuda")
            assert made.dtype is dtype and made.to(torch.float32).sum().item() == 2
        assert torch.accelerator.get_device_capability(0) == capability


def test_deprecated_spellings_warn_at_the_programs_line_and_answer(on_target):
    with torchdevice.patched(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index = torch.accelerator.current_device_idx(); line = sys._getframe().f_lineno  # noqa: E702
        torch.accelerator.set_device_idx(0)
    assert index == 0
    future = [w for w in caught if issubclass(w.category, FutureWarning)]
    assert [str(w.message) for w in future] == ["Use `current_device_index` instead.", "Use `set_device_index` instead."]
    assert future[0].filename == __file__ and future[0].lineno == line


def test_graphs_are_unsupported_like_the_source_familys(on_target):
    with torchdevice.patched():
        with pytest.raises(torchdevice.UnsupportedError, match="torch.accelerator.Graph.*graphs do not exist"):
            torch.accelerator.Graph()


@pytest.mark.cpu_only(reason="report_available=False hides a host target only; sim is an accelerator whatever the option")
def test_without_report_available_there_is_no_accelerator(on_target):
    with torchdevice.patched(report_available=False):
        assert torch.accelerator.is_available() is False
        assert torch.accelerator.current_accelerator() is None
        assert torch.accelerator.device_count() == 0


def test_the_source_family_names_the_accelerator(on_target):
    with torchdevice.patched(source="mps"):
        assert torch.accelerator.current_accelerator() == RealDevice("mps")
        assert torch.accelerator.is_available() and torch.mps.is_available() and not torch.cuda.is_available()


def _ask_from(filename: str, expression: str):
    scope = {"torch": torch}
    exec(compile(f"result = {expression}", filename, "exec"), scope)
    return scope["result"]


@pytest.mark.parametrize("inside", ["_inductor/codecache.py", "random.py", "nn/parallel/_functions.py",
                                    "distributed/distributed_c10d.py", "utils/data/dataloader.py"])
def test_all_of_torch_gets_the_real_answers(on_target, target, inside):
    native = (torch.accelerator.is_available(), torch.accelerator.current_accelerator(),
              torch.accelerator.device_count())
    filename = os.path.join(TORCH_DIR, *inside.split("/"))
    expression = ("(torch.accelerator.is_available(), torch.accelerator.current_accelerator(), "
                  "torch.accelerator.device_count())")
    with torchdevice.patched():
        assert _ask_from(filename, expression) == native
        assert _ask_from("/home/user/train.py", expression) == (True, RealDevice("cuda"), target.count)


def test_unpatch_restores_torch_accelerator_exactly(backend):
    before = _module_state()
    with torchdevice.patched():
        assert torch.accelerator.is_available is not before["torch.accelerator"]["is_available"]
        assert torch.accelerator.memory.memory_allocated is torch.accelerator.memory_allocated
    after = _module_state()
    assert after.keys() == before.keys()
    for module, names in before.items():
        assert after[module].keys() == names.keys()
        assert [n for n, v in names.items() if after[module][n] is not v] == [], module


def test_nothing_is_installed_where_the_target_is_the_source_device(router_state):
    class StandInCuda(TorchNamespaceBackend):
        name, device_type, namespace, label, priority = "acceltest_cuda", "cuda", "cuda", "CUDA", 100

    before = _module_state()
    with registered(StandInCuda(StandIn("cuda"))), torchdevice.use("acceltest_cuda"), torchdevice.patched():
        assert _module_state() == before


def _standins():
    import torchdevice_mps
    import torchdevice_mtia
    import torchdevice_xpu

    return {
        "mps": lambda: torchdevice_mps.MPSBackend(StandIn("mps"), StandIn("backends.mps")),
        "xpu": lambda: torchdevice_xpu.XPUBackend(StandIn("xpu", devices=2)),
        "mtia": lambda: torchdevice_mtia.MTIABackend(StandIn("mtia")),
    }


@pytest.mark.parametrize("plugin", ["mps", "xpu", "mtia"])
def test_stand_in_plugins_answer_as_the_source_family(router_state, plugin):
    """stand-in, not hardware-verified: the queries reach the plugin's own operations, as torch.cuda's do."""
    pytest.importorskip(f"torchdevice_{plugin}")
    backend = _standins()[plugin]()
    with registered(backend), torchdevice.use(backend.name), torchdevice.patched():
        A, C = torch.accelerator, torch.cuda
        assert A.is_available() and A.current_accelerator() == RealDevice("cuda")
        assert A.device_count() == C.device_count() and A.current_device_index() == C.current_device()
        assert A.memory_allocated() == C.memory_allocated()
        assert A.current_stream() == C.current_stream()
        A.synchronize()
        for name in ("memory_allocated", "memory_stats", "synchronize", "get_memory_info"):
            assert getattr(A, name).__torchdevice_status__ == namespaces.api_status(
                router.active(), f"torch.accelerator.{name}"), name


def test_the_matrix_lists_torch_accelerator():
    from torchdevice import matrix

    rows = {row.api: row for row in matrix.extra_rows(["cpu"])}
    assert rows["torch.accelerator.is_available"].statuses["cpu"][0] is Status.TRANSLATED
    assert rows["torch.accelerator.memory_allocated"].statuses["cpu"] == (
        Status.TRANSLATED, "as torch.cuda.memory_allocated: " + namespaces.api_status(
            matrix.view("cpu"), "torch.cuda.memory_allocated")[1])
    assert matrix.status_for("torch.accelerator.memory.memory_allocated", "cpu")[0] is Status.TRANSLATED


def test_a_compiled_function_asking_torch_accelerator_runs_translated(on_target, target):
    with torchdevice.patched():
        def step(x):
            return x * torch.accelerator.device_count() + torch.accelerator.current_device_index()

        compiled = torch.compile(step, backend="eager")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dynamo's note on the graph break at the boundary's frame check
            assert torch.equal(compiled(torch.ones(2, device="cuda")).cpu(), torch.ones(2) * target.count)


def _run(translated: bool, *args: str, backend: str = "cpu") -> dict:
    script = str(PROGRAMS / "accelerator_mnist.py")
    command = [torchdevice_script(), "run", "--backend", backend, script] if translated else [sys.executable, script]
    result = run_command(command + list(args), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def native_mnist() -> dict:
    """The program run natively with ``--compile``: the reference of both tests below (``--compile`` adds a
    compiled evaluation after the training; the losses are the same with it or without)."""
    return _run(False, "--compile")


@pytest.mark.skipif(torch.accelerator.is_available(), reason="the native run would take its accelerator path")
def test_the_device_agnostic_mnist_takes_its_accelerator_path_with_the_native_numbers(native_mnist):
    native = native_mnist
    translated = _run(True, "--compile")
    assert (native["accelerator"], native["device"]) == (False, "cpu")
    assert (translated["accelerator"], translated["device"], translated["device_type"]) == (True, "cuda", "cuda")
    assert translated["device_count"] == 1 and translated["allocated"] > 0
    assert translated["losses"] == native["losses"]
    assert translated["evaluated"] == pytest.approx(native["evaluated"], rel=1e-6)


@pytest.mark.skipif(torch.accelerator.is_available(), reason="the native run would take its accelerator path")
def test_the_device_agnostic_mnist_on_mlx_gives_the_native_numbers(native_mnist):
    _backend("mlx")
    native = native_mnist
    translated = _run(True, backend="mlx")
    assert (translated["accelerator"], translated["device"]) == (True, "cuda")
    assert translated["losses"] == pytest.approx(native["losses"], abs=1e-5)
