"""Device translation against native torch: compiled factories, torch's own ``is_cuda``, copyreg, what
torch rejects, the stand-in classes, ``map_location`` tables, unpatch.

Each test states what a CUDA program (or torch itself) can observe, with the expected value taken
from native torch or from the documented contract, never from torchdevice's own output:

* code compiled with ``torch.compile`` creates tensors where eager code does (dynamo traces the
  factories' plain twins, ``_torchdynamo_inline``, not the cached wrappers), and a missing device
  fails there as it fails eagerly;
* torch's own functions read the real ``Tensor.is_cuda`` even when user code calls them;
* ``unpatch()`` leaves ``copyreg``'s table exactly as it found it, whatever was in it;
* ``torch.Generator`` and ``Tensor.cuda()`` reject what native torch rejects;
* the stand-in ``torch.device`` class equals torch's class and hashes like it (equal objects,
  equal hashes: a dict keyed by the real class answers for the stand-in);
* ``torch.load`` with a ``map_location`` table whose value torch rejects fails as native torch fails;
* ``unpatch()`` succeeds when the program itself dropped the device pickler installed by ``patch()``;
* a factory this torch lacks is skipped, not an error.
"""
from __future__ import annotations

import copyreg
import io
import os
import pickle

import pytest
import torch
import torch.nn as nn

import torchdevice
from torchdevice import translate
from torchdevice.errors import InvalidDeviceError

RealDevice = torch.device
RealGenerator = torch.Generator
TORCH_DIR = os.path.dirname(torch.__file__)


@pytest.fixture
def translated(on_target):
    with torchdevice.patched():
        yield


def _error(call) -> type | None:
    try:
        call()
    except Exception as error:  # the class is what is compared
        return type(error)
    return None


# -- torch.compile ------------------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def test_compiled_factories_create_what_eager_code_creates(translated, fresh_dynamo):
    from torch._dynamo.backends.registry import lookup_backend

    aot_eager = lookup_backend("aot_eager")  # lowers to aten calls: the device is baked into the graph
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return aot_eager(gm, example_inputs)

    def step(x):
        return x + 1, torch.zeros(2, 3, device="cuda", dtype=torch.float64), torch.full((2,), 7, device="cuda:0")

    x = torch.arange(3.0)
    eager = step(x)
    assert eager[1].shape == (2, 3) and eager[1].dtype == torch.float64  # torch's own contract, eagerly
    compiled = torch.compile(step, backend=count, fullgraph=True)
    for got, want in zip(compiled(x), eager):
        assert (got.device, got.dtype, got.shape) == (want.device, want.dtype, want.shape)
        assert torch.equal(got, want)
    # the program goes on translating other spellings (the caches grow): the graph stays valid
    torch.zeros(1, device="xpu:0"), torch.device("mps"), torch.ones(1).to("cuda")  # noqa: B018
    assert all(torch.equal(g, w) for g, w in zip(compiled(x), eager)) and len(graphs) == 1


def test_compiled_code_rejects_a_missing_device_as_eager_code_does(translated, fresh_dynamo):
    def step(x):
        return x + torch.zeros(1, device="cuda:5")  # one device here

    with pytest.raises(InvalidDeviceError, match="invalid device ordinal 5"):
        step(torch.ones(1))
    with pytest.raises(RuntimeError, match="invalid device ordinal 5"):  # dynamo wraps it, message kept
        torch.compile(step, backend="eager", fullgraph=True)(torch.ones(1))


# -- Tensor.is_cuda: torch's code sees the truth, whoever calls it ------------------------------------


def test_a_torch_function_called_from_user_code_sees_the_real_is_cuda(translated):
    ns: dict = {}
    exec(compile("def read(t):\n    return t.is_cuda\n", os.path.join(TORCH_DIR, "_torchdevice_probe.py"), "exec"), ns)
    t = torch.ones(1, device="cuda")
    assert ns["read"](t) is False  # a host tensor, as torch's kernels must know
    assert t.is_cuda is True  # while the program sees a "cuda" tensor


# -- copyreg: unpatch restores what was there ------------------------------------------------------


@pytest.mark.parametrize("before", ["nothing", "another reducer"])
def test_unpatch_leaves_copyregs_table_as_it_found_it(on_target, target, before):
    translate.unpatch()
    saved = dict(copyreg.dispatch_table)

    def someone_elses(dev):
        return RealDevice, (dev.type,)

    try:
        copyreg.dispatch_table.pop(RealDevice, None)
        if before != "nothing":
            copyreg.pickle(RealDevice, someone_elses)
        table = dict(copyreg.dispatch_table)
        with torchdevice.patched():
            assert pickle.loads(pickle.dumps(torch.device("cuda"))) == target.device()
        assert dict(copyreg.dispatch_table) == table
        if before != "nothing":
            assert copyreg.dispatch_table[RealDevice] is someone_elses
        else:
            assert RealDevice not in copyreg.dispatch_table
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved)


# -- what native torch rejects stays rejected ------------------------------------------------------


def test_generator_rejects_extra_arguments_as_torchs_does(on_target, target):
    translate.unpatch()
    native = [_error(lambda: RealGenerator("cpu", 1)), _error(lambda: RealGenerator(device="cpu", seed=1))]
    assert native == [TypeError, TypeError]
    with torchdevice.patched():
        assert [_error(lambda: torch.Generator("cuda", 1)),
                _error(lambda: torch.Generator(device="cuda", seed=1))] == native
        assert torch.Generator(device="cuda").device == target.device(0)


def test_a_bool_is_no_device_for_cuda_moves(on_target):
    translate.unpatch()
    # torch's argument parser takes an int as a device, never a bool (True is no ordinal)
    assert _error(lambda: torch.ones(1).new_zeros(1, device=True)) is TypeError
    with torchdevice.patched():
        t = torch.ones(2)
        for flag in (True, False):
            assert _error(lambda flag=flag: t.cuda(flag)) is TypeError
            assert _error(lambda flag=flag: nn.Linear(1, 1).cuda(flag)) is TypeError
        assert t.cuda(0).dtype == t.dtype  # an int is a device


# -- the stand-in class --------------------------------------------------------------------------


def test_the_stand_in_classes_equal_and_hash_as_torchs_classes(translated):
    for stand_in, real in ((torch.device, RealDevice), (torch.Generator, RealGenerator)):
        assert stand_in is not real
        assert stand_in == real and real == stand_in and stand_in == stand_in
        assert not (stand_in != real) and not (stand_in != stand_in)
        for other in (object, int, "torch.device", None):
            assert not (stand_in == other) and stand_in != other
        assert hash(stand_in) == hash(real)  # equal objects hash alike (Python's data model)
        assert {real: "found"}[stand_in] == "found" and stand_in in {real}
    assert torch.device != torch.Generator and not (torch.device == torch.Generator)


# -- torch.load: a map_location table value torch rejects stays rejected ----------------------------


def _failure(call) -> tuple[type, str] | None:
    try:
        call()
    except Exception as error:  # the class and the message are what is compared
        return type(error), str(error)
    return None


@pytest.mark.parametrize("value", [0, None])
def test_load_with_a_table_value_torch_rejects_fails_as_natively(on_target, value):
    translate.unpatch()
    buffer = io.BytesIO()
    torch.save(torch.arange(3.0), buffer)

    def load():
        buffer.seek(0)
        return torch.load(buffer, map_location={"cpu": value})  # torch wants a location string

    native = _failure(load)
    assert native is not None and native[0] is TypeError
    with torchdevice.patched():
        assert _failure(load) == native


# -- unpatch() when the program removed the device pickler itself ------------------------------------


def test_unpatch_succeeds_when_the_program_dropped_the_device_pickler(on_cpu):
    translate.unpatch()
    saved = dict(copyreg.dispatch_table)
    try:
        copyreg.dispatch_table.pop(RealDevice, None)
        torchdevice.patch()
        copyreg.dispatch_table.pop(RealDevice)  # patch() installed it; the program takes it out
        translate.unpatch()
        assert not translate.is_patched() and torch.device is RealDevice
        assert RealDevice not in copyreg.dispatch_table
        assert pickle.loads(pickle.dumps(RealDevice("cpu", 0))) == RealDevice("cpu", 0)
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved)


# -- a factory missing from this torch is skipped ------------------------------------------------


def test_a_factory_missing_from_this_torch_is_skipped(on_target, target, monkeypatch):
    translate.unpatch()
    # devices.FACTORIES lists factories of several torch versions; patch only those present
    monkeypatch.delattr(torch, "empty_quantized")
    with torchdevice.patched():
        assert not hasattr(torch, "empty_quantized")
        assert torch.zeros(1, device="cuda").device == target.device(0)
    assert not hasattr(torch, "empty_quantized")
