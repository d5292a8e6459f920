"""torch.cuda.comm on the active backend (torchdevice.namespaces.comm), against hand-computed results.

Runs in this process with translation on (``torch.cuda.comm`` is then
torchdevice's), on the suite's target (the built-in CPU backend; sim in
``tox -e sim``) and on a 2-device fake backend over the CPU operations. The CUDA aliasing rule for backends with device
memory is checked on ``meta`` tensors.
"""
from __future__ import annotations

import pytest
import torch
from helpers import make_backend

import torchdevice
import torchdevice.namespaces.comm as tdcomm
from torchdevice.backend import Status
from torchdevice.collectives import DeviceComm, NativeCUDAComm

_Device = type(torch.empty(0).device)


@pytest.fixture
def comm(on_target):
    """torch.cuda.comm while translating to the suite's target."""
    with torchdevice.patched():
        import torch.cuda.comm as cuda_comm

        assert getattr(cuda_comm.broadcast, "__wrapped__", cuda_comm.broadcast) is tdcomm.broadcast
        yield cuda_comm


@pytest.fixture
def two_devices(router_state):
    """A backend with two devices on the CPU operations (device type cpu), translated."""
    router_state.register(make_backend("twin", priority=500, device_count=2))
    torchdevice.use("twin")
    with torchdevice.patched():
        import torch.cuda.comm as cuda_comm

        yield cuda_comm


def _shares_storage(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# -- broadcast --------------------------------------------------------------------------------


def test_broadcast_gives_independent_copies_on_each_listed_device(comm, target):
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    out = comm.broadcast(t, [0, "cuda:0", torch.device("cuda", 0)])
    assert isinstance(out, list) and len(out) == 3
    for o in out:
        assert torch.equal(o.cpu(), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        assert o.device == t.device and o.dtype == t.dtype
        if target.indexed:  # a device of its own: CUDA's rule, the input itself for the input's device
            assert o is t
        else:  # a host target: a copy per entry
            assert not _shares_storage(o, t)
    if not target.indexed:
        out[0].add_(10)
        assert t[0, 0].item() == 1.0 and out[1][0, 0].item() == 1.0


def test_broadcast_into_out(comm):
    t = torch.arange(3.0, device="cuda")
    a, b = torch.zeros(3, device="cuda"), torch.zeros(3, device="cuda")
    result = comm.broadcast(t, out=[a, b])
    assert result[0] is a and result[1] is b
    assert a.tolist() == [0.0, 1.0, 2.0] == b.tolist()
    with pytest.raises(RuntimeError, match="same shape"):
        comm.broadcast(t, out=[torch.zeros(4, device="cuda")])


def test_broadcast_needs_exactly_one_of_devices_and_out(comm):
    with pytest.raises(RuntimeError, match="Exactly one"):
        comm.broadcast(torch.ones(1))
    with pytest.raises(RuntimeError, match="Exactly one"):
        comm.broadcast(torch.ones(1), [0], out=[torch.ones(1)])


@pytest.mark.parametrize("device", ["missing", "cuda:missing", "device missing", 7])
def test_a_device_that_does_not_exist_raises_cudas_error_class(comm, target, device):
    missing = target.count  # one past the target's last device
    device = {"missing": missing, "cuda:missing": f"cuda:{missing}", "device missing": _Device("cuda", missing)}.get(
        device, device)
    with pytest.raises(torchdevice.InvalidDeviceError) as info:
        comm.broadcast(torch.ones(2, device="cuda"), [0, device])
    assert isinstance(info.value, torch.AcceleratorError)
    assert "invalid device ordinal" in str(info.value)


def test_device_without_index_is_refused_where_torch_refuses_it(comm):
    with pytest.raises(ValueError, match="specified index"):
        comm.broadcast(torch.ones(2), [_Device("cuda")])
    with pytest.raises(RuntimeError, match="non-negative"):
        comm.broadcast(torch.ones(2), [-2])


def test_broadcast_of_complex_gives_real_views_as_torch_does(comm):
    z = torch.tensor([1 + 2j, 3 - 4j], device="cuda")
    (out,) = comm.broadcast(z, [0])
    assert torch.equal(out.cpu(), torch.view_as_real(z.cpu()))


def test_broadcast_to_two_devices(two_devices):
    t = torch.tensor([5, 6], dtype=torch.int32)
    a, b = two_devices.broadcast(t, ["cuda:0", "cuda:1"])
    assert a.tolist() == b.tolist() == [5, 6] and b.dtype == torch.int32
    with pytest.raises(torchdevice.InvalidDeviceError):
        two_devices.broadcast(t, [0, 2])


def test_broadcast_coalesced_keeps_inputs_as_first_row(comm):
    a = torch.tensor([1.0, 2.0], device="cuda")
    b = torch.tensor([[3, 4], [5, 6]], dtype=torch.int64, device="cuda")
    c = torch.tensor([7.0], device="cuda")
    rows = comm.broadcast_coalesced([a, b, c], [0, 0, 0], buffer_size=8)
    assert isinstance(rows, list) and len(rows) == 3
    assert rows[0][0] is a and rows[0][1] is b and rows[0][2] is c
    for row in rows[1:]:
        assert [r.tolist() for r in row] == [[1.0, 2.0], [[3, 4], [5, 6]], [7.0]]
        assert [r.dtype for r in row] == [torch.float32, torch.int64, torch.float32]
        assert not any(_shares_storage(r, x) for r, x in zip(row, (a, b, c)))
    rows[1][0].add_(1)
    assert rows[2][0].tolist() == [1.0, 2.0]  # each copy is its own


# -- reduce_add ----------------------------------------------------------------------------------


def test_reduce_add_sums_element_wise(comm):
    a = torch.tensor([1.0, 2.0, 3.0], device="cuda")
    b = torch.tensor([10.0, 20.0, 30.0], device="cuda")
    c = torch.tensor([100.0, 200.0, 300.0], device="cuda")
    result = comm.reduce_add([a, b, c])
    assert result.tolist() == [111.0, 222.0, 333.0]
    assert result is not a and a.tolist() == [1.0, 2.0, 3.0]
    assert comm.reduce_add([a, b], destination="cuda:0").tolist() == [11.0, 22.0, 33.0]


def test_reduce_add_of_one_input_is_that_input(comm):
    a = torch.ones(2, device="cuda")
    assert comm.reduce_add([a]) is a


def test_reduce_add_checks_sizes_and_destination(comm, target):
    with pytest.raises(ValueError, match="invalid size"):
        comm.reduce_add([torch.ones(2, device="cuda"), torch.ones(3, device="cuda")])
    with pytest.raises(torchdevice.InvalidDeviceError):
        comm.reduce_add([torch.ones(2, device="cuda"), torch.ones(2, device="cuda")], destination=target.count)


def test_reduce_add_coalesced(comm):
    dev0 = [torch.tensor([1.0, 2.0], device="cuda"), torch.tensor([[1, 1]], dtype=torch.int32, device="cuda")]
    dev1 = [torch.tensor([3.0, 4.0], device="cuda"), torch.tensor([[2, 5]], dtype=torch.int32, device="cuda")]
    result = comm.reduce_add_coalesced([dev0, dev1], buffer_size=4)
    assert isinstance(result, tuple)
    assert result[0].tolist() == [4.0, 6.0]
    assert result[1].tolist() == [[3, 6]] and result[1].dtype == torch.int32


# -- scatter / gather -------------------------------------------------------------------------------


def test_scatter_splits_into_copies(comm, target):
    t = torch.arange(12.0, device="cuda").view(6, 2)
    parts = comm.scatter(t, [0, 0, 0])
    assert isinstance(parts, tuple)
    assert [p.tolist() for p in parts] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]]]
    if target.indexed:  # CUDA's rule on the input's own device: views of the input
        assert all(p._base is t._base for p in parts)
    else:
        assert not any(_shares_storage(p, t) for p in parts)


def test_scatter_chunk_sizes_dim_and_short_tensor(comm):
    t = torch.arange(12.0, device="cuda").view(6, 2)
    a, b = comm.scatter(t, [0, "cuda:0"], chunk_sizes=[1, 5])
    assert a.tolist() == [[0.0, 1.0]] and b.shape == (5, 2)
    left, right = comm.scatter(t, [0, 0], dim=1)
    assert left.view(-1).tolist() == [0, 2, 4, 6, 8, 10] and right.view(-1).tolist() == [1, 3, 5, 7, 9, 11]
    # like CUDA: Tensor.chunk may give fewer chunks than devices
    assert len(comm.scatter(torch.arange(2.0, device="cuda"), [0, 0, 0])) == 2
    with pytest.raises(RuntimeError, match="sum up"):
        comm.scatter(t, [0, 0], chunk_sizes=[1, 1])
    with pytest.raises(RuntimeError, match="same length"):
        comm.scatter(t, [0, 0], chunk_sizes=[6])


def test_scatter_into_out(comm):
    t = torch.arange(6.0, device="cuda")
    a, b = torch.empty(2, device="cuda"), torch.empty(4, device="cuda")
    result = comm.scatter(t, out=[a, b])
    assert result == (a, b) and a.tolist() == [0.0, 1.0] and b.tolist() == [2.0, 3.0, 4.0, 5.0]
    with pytest.raises(RuntimeError, match="does not match"):
        comm.scatter(t, out=[torch.empty(2, device="cuda")])
    with pytest.raises(RuntimeError, match="must not be specified"):
        comm.scatter(t, [0], out=[a])


class _StreamOn:
    def __init__(self, index):
        self.device_index = index


def test_scatter_checks_stream_devices(two_devices):
    stream = _StreamOn(1)
    with pytest.raises(RuntimeError, match="stream at index 0"):
        two_devices.scatter(torch.arange(4.0), [0, 1], streams=[stream, None])
    a, b = two_devices.scatter(torch.arange(4.0), [0, 1], streams=[None, stream])
    assert a.tolist() == [0.0, 1.0] and b.tolist() == [2.0, 3.0]


def test_gather_concatenates(comm):
    a = torch.tensor([[1.0, 2.0]], device="cuda")
    b = torch.tensor([[3.0, 4.0], [5.0, 6.0]], device="cuda")
    assert comm.gather([a, b]).tolist() == [[1, 2], [3, 4], [5, 6]]
    assert comm.gather([a, a], dim=1).tolist() == [[1, 2, 1, 2]]
    assert comm.gather([a, b], destination="cpu").device.type == "cpu"
    with pytest.warns(FutureWarning, match="-1"):
        assert comm.gather([a, b], destination=-1).shape == (3, 2)
    out = torch.empty(3, 2, device="cuda")
    assert comm.gather([a, b], out=out) is out and out.tolist() == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(RuntimeError, match="invalid shape"):
        comm.gather([a, torch.ones(1, 3, device="cuda")])
    with pytest.raises(RuntimeError, match="must not be specified"):
        comm.gather([a], destination=0, out=out)


# -- status, and use without translation -----------------------------------------------------------------


def test_every_function_has_a_status(on_cpu):
    for name in tdcomm.FUNCTIONS:
        status, note = tdcomm.status(name)
        assert status is Status.EMULATED and note
    assert tdcomm.status("torch.cuda.comm.gather")[0] is Status.EMULATED
    with pytest.raises(KeyError):
        tdcomm.status("all_reduce")


def test_usable_without_translation(on_cpu):
    out = tdcomm.broadcast(torch.ones(2), ["cuda:0", 0])
    assert [o.tolist() for o in out] == [[1.0, 1.0], [1.0, 1.0]]
    assert tdcomm.reduce_add([torch.ones(2), torch.ones(2)], destination="cuda:0").tolist() == [2.0, 2.0]


# -- the CUDA rule on a backend with device memory (checked on meta tensors) -------------------------------


class _MetaComm(DeviceComm):
    device_type = "meta"


def test_device_memory_backends_keep_cudas_aliasing():
    ops = _MetaComm("fake")
    t = torch.empty(3, device="meta")
    out = ops.broadcast(t, [0, 0], None)
    assert out[0] is t and out[1] is t  # CUDA returns the input for its own device
    host = torch.ones(3)
    copies = ops.broadcast(host, [0], None)
    assert copies[0].device.type == "meta"  # a host tensor is copied to the device
    chunks = ops.scatter(torch.empty(4, device="meta"), [0, 0], None, 0, None, None)
    assert all(c._base is not None for c in chunks)  # views of the input, as in CUDA
    with pytest.raises(AssertionError, match="on CPU"):
        ops.reduce_add([torch.ones(2), torch.ones(2)], 0)


def test_native_cuda_comm_passes_through(monkeypatch):
    import torch.nn.parallel.comm as torch_comm

    calls = []
    monkeypatch.setattr(torch_comm, "broadcast", lambda *a, **k: calls.append(("broadcast", a, k)) or "b")
    monkeypatch.setattr(torch_comm, "gather", lambda *a, **k: calls.append(("gather", a, k)) or "g")
    ops = NativeCUDAComm("cuda")
    t = torch.ones(1)
    assert ops.broadcast(t, [0, 1], None) == "b"
    assert ops.gather([t], 0, tdcomm.HOST, None) == "g"
    assert calls == [("broadcast", (t, [0, 1]), {"out": None}), ("gather", ([t], 0, "cpu"), {})]
    assert all(tdcomm.status_of(ops, n)[0] is Status.NATIVE for n in tdcomm.FUNCTIONS)


def test_the_old_import_path_answers_with_a_deprecation_warning():
    """``torchdevice.comm`` is the one alias left of the moved names: each still answers, naming its home."""
    import torchdevice.comm as old

    with pytest.warns(DeprecationWarning, match="torchdevice.collectives"):
        assert old.DeviceComm is DeviceComm
    with pytest.warns(DeprecationWarning, match="torchdevice.namespaces.comm"):
        assert old.broadcast is tdcomm.broadcast
    with pytest.raises(AttributeError, match="no_such_name"):
        old.no_such_name  # noqa: B018
