"""The boundary rule (torchdevice.boundary): the program sees its source device, torch sees the machine.

Checked from both sides of the line: code compiled under a file name inside torch's package is
"torch's own code"; code anywhere else is the program. Then torch's real machinery: modules of
torch imported while translating capture torch's own objects, dynamo's lazily built tables hold
torch's functions, and real CUDA-first programs (torch.compile with flex_attention, the profiler)
give the native run's numbers and no more noise than it.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_command, torchdevice_script

import torchdevice
from torchdevice import boundary

PROGRAMS = Path(__file__).parent / "programs"
TORCH_DIR = os.path.dirname(torch.__file__)
_Device = torch.device


def _ask_from(filename: str, expression: str):
    """Evaluate ``expression`` as code living in ``filename`` (the caller the boundary sees)."""
    scope = {"torch": torch}
    exec(compile(f"result = {expression}", filename, "exec"), scope)
    return scope["result"]


INDUCTOR = os.path.join(TORCH_DIR, "_inductor", "probe.py")
RANDOM = os.path.join(TORCH_DIR, "random.py")
PROGRAM = "/home/user/train.py"
QUERIES = {
    "torch.cuda.is_available()": False,
    "torch.cuda.device_count()": 0,
    "torch.backends.cuda.is_built()": torch.backends.cuda.is_built(),
}


@pytest.mark.parametrize("expression", sorted(QUERIES))
def test_torch_internals_get_the_real_answer_and_the_program_the_translated_one(translated, expression):
    native = QUERIES[expression]
    if expression != "torch.backends.cuda.is_built()" or not torch.backends.cuda.is_built():
        assert native in (False, 0)  # this machine has no CUDA; the rule is what makes the two differ
    # else a CUDA build without a GPU: is_built() is True natively too, and both must still say so
    assert _ask_from(INDUCTOR, expression) == native
    assert _ask_from(PROGRAM, expression) not in (False, 0)


def test_torchs_device_type_helper_tells_the_program_its_source_and_torch_the_machine(translated):
    """``torch._utils._get_available_device_type()`` asked by the program (torchtitan picks its device with it)
    answers as ``torch.cuda.is_available()`` does for it; asked by torch's own code, it describes the machine."""
    native = boundary.unpatched(lambda: torch._utils._get_available_device_type())()
    assert _ask_from(PROGRAM, "torch._utils._get_available_device_type()") == "cuda"
    assert _ask_from(INDUCTOR, "torch._utils._get_available_device_type()") == native


def test_torch_acting_on_the_programs_behalf_keeps_the_translated_answer(translated):
    assert _ask_from(RANDOM, "torch.cuda.is_available()") is True
    assert _ask_from(os.path.join(TORCH_DIR, "testing", "probe.py"), "torch.cuda.is_available()") is True


def test_is_built_agrees_with_is_available_for_the_program_and_is_restored(on_target, target):
    real = torch.backends.cuda.is_built
    with torchdevice.patched():
        assert torch.cuda.is_available() and torch.backends.cuda.is_built()
    assert torch.backends.cuda.is_built is real
    with torchdevice.patched(report_available=False):
        # a host target then claims no device; an accelerator of its own (sim) is one whatever the option
        assert torch.cuda.is_available() is target.indexed
        assert torch.backends.cuda.is_built() == (target.indexed or real())
    # only the source family claims a device, and so only its build flag follows
    real_mps = torch.backends.mps.is_built()
    with torchdevice.patched(source="mps"):
        assert torch.backends.mps.is_available() and torch.backends.mps.is_built()
        assert not torch.cuda.is_available() and torch.backends.cuda.is_built() == real()
    assert torch.backends.mps.is_built() == real_mps


def test_the_properties_torch_reads_are_the_real_ones(translated):
    # inductor asks for the current CUDA device's properties when it believes CUDA is there
    with pytest.raises((AssertionError, RuntimeError)):
        _ask_from(INDUCTOR, "torch.cuda.get_device_properties(torch.cuda.current_device())")
    assert _ask_from(PROGRAM, "torch.cuda.get_device_capability()") >= (7, 0)


class _ProbeFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a module ``torch._torchdevice_probe`` recording what torch.device was at import."""

    NAME = "torch._torchdevice_probe"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.NAME:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.device_class = torch.device
        module.factory = torch.ones


@pytest.fixture
def probe_finder():
    finder = _ProbeFinder()
    sys.meta_path.append(finder)
    yield finder
    sys.meta_path.remove(finder)
    sys.modules.pop(_ProbeFinder.NAME, None)


def test_torch_modules_imported_while_translating_capture_torchs_own_objects(translated, probe_finder):
    patched_device, patched_ones = torch.device, torch.ones
    assert patched_device is not _Device  # translation replaced it
    module = importlib.import_module(_ProbeFinder.NAME)
    assert module.device_class is _Device
    assert getattr(module.factory, "__wrapped__", None) is None  # torch's builtin, not our wrapper
    # and translation is back for the program once the import is done
    assert torch.device is patched_device and torch.ones is patched_ones
    assert module.__loader__ is probe_finder  # the module keeps its own loader


def test_a_program_module_imported_while_translating_sees_the_translation(translated, tmp_path, monkeypatch):
    (tmp_path / "user_probe_mod.py").write_text("import torch\ndevice_class = torch.device\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("user_probe_mod")
    try:
        assert module.device_class is torch.device and module.device_class is not _Device
    finally:
        sys.modules.pop("user_probe_mod", None)


def test_the_import_guard_leaves_with_unpatch(on_target):
    with torchdevice.patched():
        assert any(isinstance(f, boundary.TorchImports) for f in sys.meta_path)
    assert not any(isinstance(f, boundary.TorchImports) for f in sys.meta_path)


def _a_stand_in(obj: object) -> bool:
    """One of torchdevice's objects in place of torch's. Not one a plugin gave ``torch._C`` where torch has
    none (sim's ``_scatter``, ``_gather`` ... for DataParallel on a CPU build): dynamo's table names those
    by name, and they are what ``torch._C`` holds, translating or not."""
    if "torchdevice" not in str(getattr(obj, "__module__", "")):
        return False
    return getattr(torch._C, getattr(obj, "__name__", ""), None) is not obj


def test_dynamos_tables_hold_torchs_functions_after_compiling_under_translation(on_target):
    with torchdevice.patched():
        compiled = torch.compile(lambda x: torch.ones(2, device="cuda") + x, backend="eager")
        assert torch.equal(compiled(torch.zeros(2, device="cuda")).cpu(), torch.ones(2))
    from torch._dynamo import trace_rules

    table = trace_rules.get_torch_obj_rule_map()
    assert torch.ones in table and torch.full in table
    assert not [k for k in table if _a_stand_in(k)]
    assert torch.Tensor.to in trace_rules.get_tensor_method()


def test_dynamos_tables_hold_torchs_functions_after_init_process_group_cleared_them(on_target):
    import torch.distributed as dist
    from torch._dynamo import trace_rules

    with torchdevice.patched():
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)  # clears dynamo's caches
        try:
            compiled = torch.compile(lambda x: torch.ones(2, device="cuda") + x, backend="eager")
            assert torch.equal(compiled(torch.zeros(2, device="cuda")).cpu(), torch.ones(2))
        finally:
            dist.destroy_process_group()
    assert torch.ones in trace_rules.get_torch_obj_rule_map()
    assert torch.Tensor.to in trace_rules.get_tensor_method()


def test_dynamos_class_tables_hold_torchs_classes_when_first_read_under_translation(on_target):
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable as classes

    real = (torch.cuda.Stream, torch.cuda.Event, torch.cuda.FloatTensor, torch.cuda.LongTensor)
    classes._in_graph_classes.cache_clear()
    classes._constant_fold_classes.cache_clear()
    with torchdevice.patched():
        assert torch.cuda.FloatTensor is not real[2]  # fronted while translating
        classes._in_graph_classes()  # dynamo's first read, as when a compiled program constructs a stream
        classes._constant_fold_classes()
    assert all(cls in classes._in_graph_classes() for cls in real)
    assert torch.device in classes._constant_fold_classes()


def _run(program: str, translated: bool, tmp_path: Path, name: str):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}")}
    if translated:
        env["TORCHDEVICE_BACKEND"] = "cpu"
    script = str(PROGRAMS / program)
    args = [torchdevice_script(), "run", script] if translated else [sys.executable, script]
    result = run_command(args, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the native run would take its CUDA path, not the CPU port")
def test_torch_compile_of_a_cuda_program_gives_the_native_ports_losses(tmp_path):
    native, _ = _run("compile_train.py", False, tmp_path, "native")
    translated, stderr = _run("compile_train.py", True, tmp_path, "translated")
    assert native["device"] == "cpu" and translated["device"] == "cuda"  # the two paths were taken
    assert translated["losses"] == pytest.approx(native["losses"], abs=1e-5)
    assert translated["flex_max_error"] < 1e-5
    assert "Failed to pickle" not in stderr and "Traceback" not in stderr


def test_the_profiler_with_cuda_activity_is_as_quiet_as_natively(tmp_path):
    native, native_err = _run("profile_cuda.py", False, tmp_path, "native")
    translated, translated_err = _run("profile_cuda.py", True, tmp_path, "translated")
    assert translated["device"] == "cuda" and translated["has_table"]
    assert translated["ops"] == native["ops"]
    assert len(translated_err.splitlines()) <= len(native_err.splitlines())
    assert "Failed to record CUDA event" not in translated_err
