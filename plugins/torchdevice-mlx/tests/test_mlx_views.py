"""Views of MLX tensors: torch's strides and storage offsets, aliasing, writes through any view in MLX.

Every case runs natively on torch CPU and on an MLXTensor from the same data; metadata, values and the
base after a write are compared.
"""
from __future__ import annotations

import pytest
import torch

import torchdevice
from torchdevice.testing import router_sandbox
from torchdevice_mlx.conversion import fallback_counts, reset_fallback_counts
from torchdevice_mlx.tensor import MLXTensor
from torchdevice_mlx.views import meta_geometry, view_geometry

VIEWS = {
    "t": lambda x: x.t(),
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.permute(1, 0),
    "row": lambda x: x[1],
    "column": lambda x: x[:, 2],
    "negative index": lambda x: x[-1, 1:],
    "slice step": lambda x: x[::2, 1::2],
    "slice empty": lambda x: x[3:3],
    "view": lambda x: x.view(2, 10),
    "view -1": lambda x: x.view(-1, 5),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "unsqueeze end": lambda x: x.unsqueeze(-1),
    "squeeze": lambda x: x[:1].squeeze(0),
    "expand": lambda x: x[:1].expand(3, 5),
    "diagonal": lambda x: x.diagonal(),
    "diagonal offset": lambda x: x.diagonal(1),
    "as_strided": lambda x: x.as_strided((2, 2), (5, 1), 1),
    "unfold": lambda x: x.unfold(1, 2, 2),
    "narrow": lambda x: x.narrow(0, 1, 2),
    "t then slice": lambda x: x.t()[1:3],
    "t then select": lambda x: x.t()[2],
    "slice then t then view": lambda x: x[1:3].t().contiguous().view(-1),
    "split": lambda x: x.split(2, dim=1)[1],
    "chunk": lambda x: x.chunk(2, dim=0)[1],
    "unbind": lambda x: x.unbind(1)[3],
    "movedim": lambda x: x.movedim(0, 1),
    "as_strided of a view": lambda x: x[1:].as_strided((2, 3), (1, 5), 2),
    "detach": lambda x: x.detach(),
}


def _pair():
    host = torch.arange(20.0).reshape(4, 5)
    return host, MLXTensor.from_torch(host)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_metadata_and_values_match_native(name):
    host, m = _pair()
    want, got = VIEWS[name](host), VIEWS[name](m)
    assert isinstance(got, MLXTensor)
    assert (got.shape, got.stride(), got.storage_offset(), got.is_contiguous()) == (
        want.shape, want.stride(), want.storage_offset(), want.is_contiguous())
    assert torch.equal(got.cpu(), want)


WRITABLE = sorted(set(VIEWS) - {"expand", "slice then t then view", "slice empty"})


@pytest.mark.parametrize("name", WRITABLE)
def test_writes_through_a_view_reach_the_base_in_mlx(name):
    host, m = _pair()
    reset_fallback_counts()
    vh, vm = VIEWS[name](host), VIEWS[name](m)
    vh.mul_(-2).add_(1)
    vm.mul_(-2).add_(1)
    assert torch.equal(m.cpu(), host), name
    assert torch.equal(vm.cpu(), vh)
    assert fallback_counts() == {}  # scattered into the base in MLX, never a host round trip


def test_a_view_sees_later_writes_to_its_base_and_sibling_views():
    host, m = _pair()
    for x in (host, m):
        col, diag = x[:, 1], x.diagonal()
        x.add_(100)
        col[2] = -1.0  # index assignment through a view
        diag.zero_()
    assert torch.equal(m.cpu(), host)
    assert torch.equal(m[:, 1].cpu(), host[:, 1]) and torch.equal(m.diagonal().cpu(), host.diagonal())


def test_view_of_a_non_viewable_layout_raises_torchs_error():
    host, m = _pair()
    with pytest.raises(RuntimeError) as native:
        host.t().view(20)
    with pytest.raises(RuntimeError) as translated:
        m.t().view(20)
    assert str(translated.value) == str(native.value)
    assert m.t().reshape(20).tolist() == host.t().reshape(20).tolist()  # reshape copies, as natively


def test_writing_into_an_expanded_view_raises_as_natively():
    host, m = _pair()
    with pytest.raises(RuntimeError, match="more than one element"):
        host[:1].expand(3, 5).add_(1)
    with pytest.raises(RuntimeError, match="more than one element"):
        m[:1].expand(3, 5).add_(1)


GEOMETRY_CASES = [
    (torch.ops.aten.t.default, ()), (torch.ops.aten.transpose.int, (0, -1)), (torch.ops.aten.permute.default, ([1, 0],)),
    (torch.ops.aten.select.int, (1, -2)), (torch.ops.aten.slice.Tensor, (1, -4, None, 2)),
    (torch.ops.aten.slice.Tensor, (0, 1, 100, 1)), (torch.ops.aten.unsqueeze.default, (-1,)),
    (torch.ops.aten.unsqueeze.default, (0,)), (torch.ops.aten.view.default, ([5, -1],)),
    (torch.ops.aten.detach.default, ()),
]


@pytest.mark.parametrize("op,args", GEOMETRY_CASES, ids=lambda v: str(v))
def test_worked_out_geometry_is_torchs(op, args):
    """The hot view ops' strides are computed in Python: they must equal torch's own (meta device)."""
    _, m = _pair()
    for src in (m, m[1:, ::2], m.t()):
        if op is torch.ops.aten.view.default and not src.is_contiguous():
            continue
        if op is torch.ops.aten.view.default and src.numel() != 20:
            continue
        assert view_geometry(op, src, args, {}) == meta_geometry(op, src, args, {}), src.stride()


def test_views_keep_autograd_right():
    def run(conv):
        x = conv(torch.arange(12.0).reshape(3, 4)).requires_grad_()
        y = x * 1
        y[:, 1].mul_(3)
        y.t()[2].add_(y[:, 0])
        (y * conv(torch.arange(12.0).reshape(3, 4))).sum().backward()
        return x.grad.cpu(), y.detach().cpu()

    (g1, y1), (g2, y2) = run(lambda t: t), run(MLXTensor.from_torch)
    assert torch.equal(g1, g2) and torch.equal(y1, y2)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_of_normal_tensors_in_inference_mode(name):
    # a view of a normal tensor made under inference_mode is a normal tensor sharing its base's version
    # counter (a model's eval forward under inference_mode views its inputs and parameters)
    def run(conv):
        x = conv(torch.arange(20.0).reshape(4, 5))
        with torch.inference_mode():
            v = VIEWS[name](x)
            out = (v * 2).cpu()
            inference = v.is_inference()
        return out, inference, v.cpu()

    (o1, i1, v1), (o2, i2, v2) = run(lambda t: t), run(MLXTensor.from_torch)
    assert torch.equal(o1, o2) and torch.equal(v1, v2) and i1 == i2


def test_writes_in_inference_mode_through_a_view_of_a_normal_tensor():
    def run(conv):
        x = conv(torch.arange(6.0))
        with torch.inference_mode():
            x.view(2, 3)[0, 0] = 100.0
            x[4:].mul_(2)
        return x.cpu(), x._version

    assert run(lambda t: t)[0].tolist() == run(MLXTensor.from_torch)[0].tolist()
    assert run(lambda t: t)[1] == run(MLXTensor.from_torch)[1]


def test_host_copy_has_torch_layout():
    """``.cpu()`` of an MLX tensor is laid out as torch's copy of a device tensor is (its strides where dense,
    else contiguous: ``clone()``'s rule), whatever layout MLX computed it in (a contiguous result of a
    transpose came back transposed: ``.cpu().view(-1)`` raised)."""
    native = torch.arange(20.0).reshape(4, 5)
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        x = torch.arange(20.0).reshape(4, 5).to("cuda")
        pairs = [(x.t().contiguous().cpu(), native.t().contiguous()), (x.t().cpu(), native.t().clone()),
                 (x[:, ::2].cpu(), native[:, ::2].clone())]
    for got, want in pairs:
        assert got.stride() == want.stride()
        assert torch.equal(got, want)
    assert torch.equal(pairs[0][0].view(-1), native.t().contiguous().view(-1))
