"""The legacy typed tensor classes (``torch.cuda.FloatTensor`` ...), ``Tensor.type`` and
``torch.set_default_tensor_type`` taking them, translated onto the suite's target.

The reference is native torch: the CPU classes (``torch.FloatTensor`` ...) give the values, dtype and shape;
the device is where a ``device="cuda"`` tensor lands on the target (``target.device(0)``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import torchdevice
from torchdevice import matrix, namespaces
from torchdevice.namespaces.legacy import LEGACY_TYPES

NAMES = sorted(LEGACY_TYPES)
REAL = {name: vars(torch.cuda)[name] for name in NAMES}  # torch's own classes, read before any patch


def _same(result: torch.Tensor, native: torch.Tensor, target, values: bool = True) -> None:
    assert type(result) is torch.Tensor
    assert result.dtype == native.dtype
    assert result.shape == native.shape
    assert result.device == target.device(0)
    if values:
        assert torch.equal(result.cpu(), native)


def _error(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def test_every_legacy_type_of_torch_cuda_is_declared():
    found = {n for n, v in vars(torch.cuda).items() if isinstance(v, type) and type(v) is type(torch.FloatTensor)}
    assert found == set(NAMES)
    for name in NAMES:
        assert LEGACY_TYPES[name] == REAL[name].dtype == getattr(torch, name).dtype
        assert "torchdevice/namespaces/legacy.py" in namespaces.where(f"torch.cuda.{name}")


@pytest.mark.parametrize("name", NAMES)
def test_sizes_give_an_uninitialised_tensor_on_the_device(translated, target, name):
    cls, native_cls = torch.cuda.__dict__[name], getattr(torch, name)
    assert cls is not REAL[name]
    _same(cls(2, 3), native_cls(2, 3), target, values=False)
    _same(cls(torch.Size([4])), native_cls(torch.Size([4])), target, values=False)
    _same(cls(np.int64(3)), native_cls(np.int64(3)), target, values=False)
    _same(cls(0), native_cls(0), target)
    _same(cls(), native_cls(), target)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("data", [[1, 0, 3], [[1, 2], [0, 4]], (2, 3), [], [1.7, 2.5], range(3)],
                         ids=["list", "nested", "tuple", "empty", "floats", "range"])
def test_a_sequence_gives_its_data_on_the_device(translated, target, name, data):
    _same(torch.cuda.__dict__[name](data), getattr(torch, name)(data), target)


@pytest.mark.parametrize("name", ["FloatTensor", "LongTensor", "ByteTensor"])
def test_a_numpy_array_gives_its_data_on_the_device(translated, target, name):
    array = np.array([[1, 250], [3, 4]], dtype=np.int32)
    _same(torch.cuda.__dict__[name](array), getattr(torch, name)(array), target)


@pytest.mark.parametrize("args", [(2.5,), ("ab",), (2, 3.0), (-1,), (True,)], ids=repr)
def test_what_torch_rejects_is_rejected_alike(translated, args):
    assert _error(lambda: torch.cuda.FloatTensor(*args)) == _error(lambda: torch.FloatTensor(*args))


def test_a_tensor_of_the_type_gives_an_alias_and_another_is_refused(translated, target):
    x = torch.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    native = torch.FloatTensor(x.detach().cpu().requires_grad_())
    y = torch.cuda.FloatTensor(x)
    assert y is not x and y.data_ptr() == x.data_ptr() and y.device == x.device
    assert type(y.grad_fn).__name__ == type(native.grad_fn).__name__ == "AliasBackward0"
    with pytest.raises(TypeError):
        torch.LongTensor(torch.tensor([1, 2]).float())  # native: a tensor of another type is refused
    with pytest.raises(TypeError, match="FloatTensor"):
        torch.cuda.FloatTensor(torch.tensor([1, 2], device="cuda"))


def test_a_storage_on_the_device_gives_a_tensor_over_it(translated, target):
    x = torch.tensor([1.0, 2.0, 3.0], device="cuda")
    y = torch.cuda.FloatTensor(x.untyped_storage())
    native = torch.FloatTensor(torch.tensor([1.0, 2.0, 3.0]).untyped_storage())
    _same(y, native, target)
    assert y.data_ptr() == x.data_ptr()


def test_device_must_be_the_namespaces(translated, target):
    _same(torch.cuda.IntTensor(2, device="cuda"), torch.IntTensor(2), target, values=False)
    _same(torch.cuda.IntTensor([5], device=torch.device("cuda", 0)), torch.IntTensor([5]), target)
    _same(torch.cuda.IntTensor([5], device=0), torch.IntTensor([5]), target)
    _same(torch.cuda.IntTensor([5], device=None), torch.IntTensor([5], device=None), target)
    if target.count > 1:
        assert torch.cuda.IntTensor(2, device="cuda:1").device == target.device(1)
    kind, message = _error(lambda: torch.cuda.FloatTensor(2, device="meta"))
    assert (kind, message) == (RuntimeError, _error(lambda: torch.FloatTensor(2, device="meta"))[1].replace(
        "device type: cpu", "device type: cuda"))


@pytest.mark.parametrize("name", NAMES)
def test_isinstance_is_true_for_that_dtype_on_the_device(translated, target, name):
    cls = torch.cuda.__dict__[name]
    for dtype in {*LEGACY_TYPES.values()}:
        on_device = torch.zeros(2, dtype=dtype, device="cuda")
        native = isinstance(torch.zeros(2, dtype=dtype), getattr(torch, name))
        assert isinstance(on_device, cls) is native is (dtype == cls.dtype)
    made = cls(2)
    assert isinstance(made, cls)
    assert isinstance(torch.nn.Parameter(made, requires_grad=made.is_floating_point()), cls)
    assert not isinstance(torch.zeros(2, dtype=cls.dtype, device="meta"), cls)
    assert not isinstance(made.tolist(), cls) and not isinstance(cls, cls)
    on_cpu = torch.zeros(2, dtype=cls.dtype, device="cpu")
    assert isinstance(on_cpu, cls) is (target.device_type == "cpu")  # a host tensor is a "cuda" one only there


@pytest.mark.cpu_only(reason="sim makes no sparse tensors")
def test_a_sparse_tensor_is_no_instance(translated):
    dense = torch.ones(2, device="cuda")
    assert isinstance(dense, torch.cuda.FloatTensor)
    assert not isinstance(torch.ones(2).to_sparse(), torch.FloatTensor)  # native
    assert not isinstance(dense.to_sparse(), torch.cuda.FloatTensor)


def test_the_classes_describe_themselves_as_torchs(translated):
    for name in NAMES:
        cls, real = torch.cuda.__dict__[name], REAL[name]
        assert (repr(cls), cls.__name__, cls.__module__) == (repr(real), real.__name__, real.__module__)
        assert (cls.dtype, cls.layout, cls.is_cuda, cls.is_sparse) == (real.dtype, real.layout, True, False)


@pytest.mark.parametrize("spelling", ["class", "name"])
@pytest.mark.parametrize("name", ["FloatTensor", "DoubleTensor", "LongTensor", "BoolTensor"])
def test_tensor_type_moves_and_casts_to_the_device(translated, target, spelling, name):
    cls = torch.cuda.__dict__[name]
    arg = cls if spelling == "class" else f"torch.cuda.{name}"
    host = torch.tensor([1.5, 0.0, -2.0])
    native = host.type(getattr(torch, name) if spelling == "class" else f"torch.{name}")
    _same(host.type(arg), native, target)
    _same(host.type(dtype=arg, non_blocking=True), native, target)
    there = torch.tensor([1, 0, 2], dtype=cls.dtype, device="cuda")
    assert there.type(arg) is there  # already of the type: no copy, as torch


def test_tensor_type_passes_everything_else_to_torch(translated):
    x = torch.ones(2, device="cuda")
    assert x.type(torch.float64).dtype == torch.float64
    assert x.type("torch.DoubleTensor").device.type == "cpu"
    assert x.cpu().type() == "torch.FloatTensor"
    assert _error(lambda: x.type("torch.cuda.Nope")) == (ValueError, "invalid type: 'torch.cuda.Nope'")  # as CUDA
    with pytest.raises(torchdevice.UnsupportedError, match="sparse"):
        x.type("torch.cuda.sparse.FloatTensor")


@pytest.fixture
def default_type_restored():
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.set_default_tensor_type(torch.FloatTensor)
        torch.set_default_device(None)


@pytest.mark.parametrize("spelling", ["class", "name"])
def test_set_default_tensor_type_sets_dtype_and_device(translated, target, default_type_restored, spelling):
    arg = torch.cuda.DoubleTensor if spelling == "class" else "torch.cuda.DoubleTensor"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation warning (once a process: not checked)
        torch.set_default_tensor_type(arg)
    assert torch.get_default_dtype() == torch.float64
    made = torch.zeros(2)
    assert (made.dtype, made.device) == (torch.float64, target.device(0))
    assert torch.tensor([1.5]).device == target.device(0)
    _same(torch.Tensor(2, 3), torch.DoubleTensor(2, 3), target, values=False)  # torch.Tensor: the default type
    _same(torch.Tensor([1, 2]), torch.DoubleTensor([1, 2]), target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.set_default_tensor_type("torch.FloatTensor")  # a CPU type: CPU tensors again, as torch
    made = torch.zeros(2)
    assert (made.dtype, made.device, torch.get_default_device()) == (torch.float32, torch.device("cpu"),
                                                                    torch.device("cpu"))
    _same_on_cpu = torch.Tensor([1, 2])
    assert (_same_on_cpu.dtype, _same_on_cpu.device) == (torch.float32, torch.device("cpu"))


def test_set_default_tensor_type_refuses_what_torch_refuses(translated, default_type_restored):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        native = _error(lambda: torch.set_default_tensor_type(torch.LongTensor))
        assert _error(lambda: torch.set_default_tensor_type(torch.cuda.LongTensor)) == native
        assert _error(lambda: torch.set_default_tensor_type("torch.cuda.IntTensor")) == native
    assert torch.get_default_dtype() == torch.float32
    assert torch.zeros(1).device == torch.device("cpu")


def test_unpatch_gives_every_object_back(on_target):
    before = {name: vars(torch.cuda)[name] for name in NAMES}
    methods = (torch.Tensor.type, torch.set_default_tensor_type)
    assert "type" not in vars(torch.Tensor) and "__new__" not in vars(torch.Tensor)
    with torchdevice.patched():
        assert "__new__" in vars(torch.Tensor)
        assert all(vars(torch.cuda)[name] is not before[name] for name in NAMES)
        assert torch.Tensor.type is not methods[0] and torch.set_default_tensor_type is not methods[1]
    assert all(vars(torch.cuda)[name] is before[name] for name in NAMES)
    assert (torch.Tensor.type, torch.set_default_tensor_type) == methods
    assert torch.Tensor.type is methods[0] and torch.set_default_tensor_type is methods[1]
    assert "type" not in vars(torch.Tensor) and "__new__" not in vars(torch.Tensor)
    assert type(torch.Tensor([1])) is torch.Tensor and torch.Tensor.__new__ is torch._C.TensorBase.__new__


def test_the_matrix_says_translated_and_native_on_cuda():
    for api in [f"torch.cuda.{name}" for name in NAMES] + ["torch.Tensor.type", "torch.set_default_tensor_type"]:
        assert api in namespaces.fronted("cuda")
        assert matrix.status_for(api, "cpu")[0] is namespaces.TRANSLATED
        assert matrix.status_for(api, "cuda")[0] is namespaces.NATIVE


def test_run_report_counts_the_legacy_calls(translated):
    from torchdevice import trace

    trace.reset()
    trace.start_report()
    try:
        torch.cuda.FloatTensor(2)
        torch.cuda.FloatTensor([1.0])
        torch.ones(2).type("torch.cuda.LongTensor")
        torch.ones(2).type(torch.float64)  # not a legacy type: torch's own, not counted
        uses = {u.api: u for u in trace.report_data()}
    finally:
        trace.stop_report()
        trace.reset()
    assert uses["torch.cuda.FloatTensor"].calls == 2
    assert uses["torch.cuda.FloatTensor"].how.startswith("translated: the legacy constructor")
    assert uses["torch.Tensor.type"].calls == 1
