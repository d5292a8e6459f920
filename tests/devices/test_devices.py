"""Device translation (torchdevice.devices) onto the suite's target (the CPU backend; sim in ``tox -e sim``),
compared with native runs of the same code written for the target."""
from __future__ import annotations

import copy
import copyreg
import io
import pickle
import typing

import pytest
import torch
import torch.nn as nn

import torchdevice
from torchdevice.errors import InvalidDeviceError

RealDevice = torch.device
RealGenerator = torch.Generator


def snapshot():
    return (
        dict(vars(torch)),
        dict(vars(torch.Tensor)),
        dict(vars(nn.Module)),
        dict(vars(torch.utils.data.DataLoader)),
        copyreg.dispatch_table.get(RealDevice),
    )


def test_unpatch_restores_every_attribute_by_identity():
    import torch._dynamo  # noqa: F401  (imports that rebind torch attributes happen first)

    before = snapshot()
    torchdevice.patch()
    assert torch.device is not RealDevice
    torchdevice.patch()  # idempotent
    torchdevice.unpatch()
    torchdevice.unpatch()  # idempotent
    after = snapshot()
    for old, new in zip(before[:4], after[:4]):
        changed = {k for k in set(old) | set(new) if old.get(k, None) is not new.get(k, None)}
        changed.discard("__slotnames__")  # copyreg caches this on first pickle, not us
        assert not changed
    assert after[4] is before[4]
    assert torch.device is RealDevice and torch.Generator is RealGenerator


def test_patched_context_manager_restores():
    with torchdevice.patched() as target:
        assert target.name == torchdevice.current_backend()
        assert torch.zeros(1, device="cuda").device.type == target.device_type
    assert torch.device is RealDevice


def test_device_strings_and_objects_map_to_the_target(translated, target):
    x = torch.ones(3, device="cuda")
    assert x.device == target.device(0)
    assert torch.device("cuda") == target.device()  # no index, as torch.device("cuda") has none
    assert torch.device("cuda:0") == x.device
    assert torch.device("cuda", 0) == x.device
    assert torch.device(type="cuda", index=0) == x.device
    assert torch.ones(1, device=torch.device("cuda")).device == x.device
    assert torch.ones(1, device=0).device == x.device
    for source in ("mps", "xpu", "mtia"):
        assert torch.zeros(1, device=source).device == x.device
    assert torch.device("cpu") == RealDevice("cpu")


def test_index_beyond_device_count_raises_like_cuda(translated, target):
    missing = target.count  # one past the target's last device
    for bad in (f"cuda:{missing}", ("cuda", missing + 2)):
        with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
            torch.device(*bad) if isinstance(bad, tuple) else torch.device(bad)
    with pytest.raises(InvalidDeviceError, match=str(missing)):
        torch.zeros(2, device=f"cuda:{missing}")
    with pytest.raises(RuntimeError):
        torch.randn(2).to("cuda:7")


def test_device_class_keeps_its_contracts(translated):
    d = torch.device("cuda")
    assert isinstance(d, torch.device)
    assert issubclass(RealDevice, torch.device)
    assert type(d) is RealDevice
    union = torch.device | None
    assert isinstance(d, union) and isinstance(None, union)
    assert (None | torch.device) == (None | RealDevice)

    def f(dev: typing.Optional[torch.device] = None) -> torch.device | str:
        return dev

    hint = typing.get_type_hints(f)["dev"]
    assert isinstance(d, typing.get_args(hint)[0]) and type(None) in typing.get_args(hint)
    assert pickle.loads(pickle.dumps(d)) == d
    assert copy.deepcopy(d) == d
    assert repr(torch.device) == repr(RealDevice)
    assert torch.device.__module__ == "torch" and torch.device.__qualname__ == "device"


def test_pickled_device_loads_natively_after_unpatch():
    with torchdevice.patched():
        blob = pickle.dumps({"d": torch.device("cuda"), "c": torch.device("cpu")})
    assert pickle.loads(blob) == {"d": RealDevice("cpu"), "c": RealDevice("cpu")}


def test_factories_like_and_new_match_native(translated, target):
    torch.manual_seed(0)
    got = [
        torch.randn(4, device="cuda"), torch.rand(2, 3, device="cuda"),
        torch.randint(0, 10, (5,), device="cuda"), torch.arange(5, device="cuda"),
        torch.full((2,), 3.0, device="cuda"), torch.eye(3, device="cuda"),
        torch.linspace(0, 1, 5, device="cuda"), torch.tensor([1, 2], device="cuda"),
        torch.as_tensor([1.0], device="cuda"), torch.randperm(6, device="cuda"),
    ]
    base = torch.ones(2, 2)
    got += [torch.zeros_like(base, device="cuda"), torch.randn_like(base, device="cuda"),
            base.new_zeros(3, device="cuda"), base.new_full((2,), 7.0, device="cuda"),
            base.new_tensor([5.0], device="cuda")]
    torchdevice.unpatch()
    torch.manual_seed(0)
    d = target.device(0)  # the same code written for the target
    want = [
        torch.randn(4, device=d), torch.rand(2, 3, device=d), torch.randint(0, 10, (5,), device=d),
        torch.arange(5, device=d), torch.full((2,), 3.0, device=d), torch.eye(3, device=d),
        torch.linspace(0, 1, 5, device=d), torch.tensor([1, 2], device=d), torch.as_tensor([1.0], device=d),
        torch.randperm(6, device=d),
        torch.zeros_like(base, device=d), torch.randn_like(base, device=d), base.new_zeros(3, device=d),
        base.new_full((2,), 7.0, device=d), base.new_tensor([5.0], device=d),
    ]
    for g, w in zip(got, want):
        assert g.device == w.device
        assert torch.equal(g.cpu(), w.cpu())


def test_tensor_and_module_moves(translated):
    t = torch.randn(3, device="cuda")
    assert t.cuda() is t  # already on the target: .cuda() returns self, as on CUDA
    assert t.to("cuda", torch.float64).dtype == torch.float64
    assert t.to(device="cuda:0").device == t.device
    assert t.cuda(0, non_blocking=True).device == t.device
    assert t.is_cuda and torch.ones(1, device="cuda").is_cuda
    m = nn.Linear(3, 2).cuda()
    assert next(m.parameters()).device == t.device
    m = nn.Linear(3, 2, device="cuda").to("cuda", dtype=torch.float64)
    assert next(m.parameters()).dtype == torch.float64
    m = m.to(torch.float32)  # Module.to(dtype) keeps working
    assert next(m.parameters()).dtype == torch.float32
    m2 = nn.Linear(2, 2, device="meta").to_empty(device="cuda")
    assert next(m2.parameters()).device == t.device


def test_generator_default_device_and_context(translated, target):
    g = torch.Generator(device="cuda")
    assert isinstance(g, torch.Generator) and g.device == target.device(0)
    g.manual_seed(3)
    a = torch.randn(4, generator=g, device="cuda")
    torch.set_default_device("cuda")
    try:
        assert torch.zeros(1).device == target.device(0)
    finally:
        torch.set_default_device(None)
    with torch.device("cuda"):
        assert torch.zeros(1).device == target.device(0)
    torchdevice.unpatch()
    d = target.device(0)
    assert torch.equal(a.cpu(), torch.randn(4, generator=torch.Generator(device=d).manual_seed(3), device=d).cpu())


def test_checkpoint_round_trip_with_map_location(translated):
    state = {"w": torch.randn(3, device="cuda"), "step": 4}
    for map_location in ("cuda:0", torch.device("cuda"), {"cpu": "cuda:0"}, None, "cpu"):
        buf = io.BytesIO()
        torch.save(state, buf)
        buf.seek(0)
        loaded = torch.load(buf, map_location=map_location)
        assert torch.equal(loaded["w"].cpu(), state["w"].cpu()) and loaded["step"] == 4


def test_pinned_memory_does_not_crash(translated):
    t = torch.randn(4)
    assert torch.equal(t.pin_memory(), t)
    data = list(range(6))
    loader = torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.cpu_only(reason="a host target has no pinned memory; sim pins host memory as CUDA does "
                             "(its pinned allocator: plugins/torchdevice-sim/tests)")
def test_a_factorys_pin_memory_is_a_no_op_on_a_host_target(translated):
    staged = torch.empty(3, device="cpu", pin_memory=True)
    assert staged.device.type == "cpu" and not staged.is_pinned()
    assert torch.zeros(2, 2, device="cuda", pin_memory=True).shape == (2, 2)
    assert torch.randn(4).new_ones(2, pin_memory=True).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_safetensors_loads_onto_the_target(translated, target, tmp_path, device):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    state = {"w": torch.randn(3, 4), "step": torch.tensor([7], dtype=torch.int64), "h": torch.ones(5, dtype=torch.float16)}
    path = str(tmp_path / "model.safetensors")
    save_file(state, path)
    loaded = load_file(path, device=device)
    with safe_open(path, framework="pt", device=device) as f:
        opened = {key: f.get_tensor(key) for key in f.keys()}
    for tensors in (loaded, opened):
        assert sorted(tensors) == sorted(state)
        for key, tensor in tensors.items():
            assert tensor.device == target.device(0) and tensor.is_cuda
            assert tensor.dtype == state[key].dtype and torch.equal(tensor.cpu(), state[key])


def test_optimizers_and_dynamo_import_work_translated(translated, target):
    import torch._dynamo  # noqa: F401

    results = {}
    for opt_cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop,
                    torch.optim.Adagrad, torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam):
        torch.manual_seed(0)
        p = nn.Parameter(torch.randn(4, device="cuda"))
        opt = opt_cls([p], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (p ** 2).sum().backward()
            opt.step()
        results[opt_cls] = p.detach().cpu()
    torchdevice.unpatch()
    for opt_cls, value in results.items():
        torch.manual_seed(0)
        p = nn.Parameter(torch.randn(4, device=target.device(0)))
        opt = opt_cls([p], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (p ** 2).sum().backward()
            opt.step()
        assert torch.equal(value, p.detach().cpu()), opt_cls.__name__


def test_explicit_cpu_stays_on_cpu(translated):
    assert torch.zeros(1, device="cpu").device == RealDevice("cpu")
    assert torch.randn(2).to("cpu").device == RealDevice("cpu")
