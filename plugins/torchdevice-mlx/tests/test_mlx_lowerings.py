"""Lowerings beyond the float32 OpInfo samples: torch's type promotion, edge cases and the ops the training
workloads need, each against native torch CPU, and run in MLX (no host fallback) where claimed."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from torchdevice_mlx.conversion import fallback_counts, reset_fallback_counts
from torchdevice_mlx.dispatch import _MLXFactories
from torchdevice_mlx.tensor import MLXTensor


def mlx(t):
    return MLXTensor.from_torch(t)


@pytest.fixture
def in_mlx():
    """The test's ops must all run in MLX."""
    reset_fallback_counts()
    yield
    assert fallback_counts() == {}


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool]
BINARY = {
    "add": torch.add, "sub": lambda a, b: torch.sub(a, b, alpha=2), "mul": torch.mul, "div": torch.div,
    "floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "trunc_divide": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "maximum": torch.maximum, "eq": torch.eq, "lt": torch.lt, "remainder": torch.remainder, "fmod": torch.fmod,
    "bitwise_and": torch.bitwise_and, "logical_or": torch.logical_or, "where": lambda a, b: torch.where(a > 1, a, b),
}


def _operand(dtype, shape):
    g = torch.Generator().manual_seed(3)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    values = torch.randint(1, 9, shape, generator=g)  # no zeros: integer division by zero is undefined
    return (values * 2 - 9 if dtype.is_floating_point or dtype in (torch.int64, torch.int32) else values).to(dtype)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_promote_as_torch(name):
    """dtype and values of a op b for every pair of dtypes, 0-d tensors and Python scalars, as natively."""
    fn = BINARY[name]
    cases = [(_operand(a, (3, 4)), _operand(b, shape)) for a, b in itertools.product(DTYPES, DTYPES)
             for shape in [(3, 4), ()]]
    cases += [(_operand(a, (3, 4)), s) for a in DTYPES for s in (2, 2.5, True)]
    checked = 0
    for a, b in cases:
        try:
            want = fn(a, b)
        except (RuntimeError, TypeError):
            continue  # torch refuses these dtypes
        got = fn(mlx(a), mlx(b) if isinstance(b, torch.Tensor) else b)
        assert got.dtype == want.dtype, (name, a.dtype, b)
        where = f"{name} {a.dtype} {b!r}"
        torch.testing.assert_close(got.cpu(), want, rtol=1e-2 if want.dtype in (torch.float16, torch.bfloat16)
                                   else 1e-6, atol=1e-2, equal_nan=True, msg=lambda m, where=where: f"{where}: {m}")
        checked += 1
    assert checked > 20


def test_avg_pool2d_every_mode_matches_native(in_mlx):
    torch.manual_seed(0)
    n = 0
    for size, k, s, p, ceil, include, divisor in itertools.product(
            [(5, 7), (6, 4)], [2, 3], [1, 2, 3], [0, 1], [False, True], [False, True], [None, 3]):
        if 2 * p > k:
            continue
        x = torch.randn(2, 3, *size, requires_grad=True)
        m = mlx(x.detach()).requires_grad_()
        want, got = F.avg_pool2d(x, k, s, p, ceil, include, divisor), F.avg_pool2d(m, k, s, p, ceil, include, divisor)
        torch.testing.assert_close(got.cpu(), want)
        want.square().sum().backward()
        got.square().sum().backward()
        torch.testing.assert_close(m.grad.cpu(), x.grad)
        n += 1
    assert n > 100


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"), (False, "float")])
def test_flash_attention_forward_and_backward_run_in_mlx(in_mlx, causal, mask):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))
    attn = None if mask is None else (torch.rand(5, 5) > 0.3 if mask == "bool" else torch.randn(5, 5))
    if mask == "bool":
        attn[:, 0] = True  # no row masked entirely
    outs = []
    for native in (True, False):
        qq, kk, vv = (t if native else mlx(t.detach()).requires_grad_() for t in (q, k, v))
        mask_arg = None if attn is None else (attn if native else mlx(attn))
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask_arg, is_causal=causal)
        out.square().sum().backward()
        outs.append((out, qq.grad, kk.grad, vv.grad))
    for want, got in zip(*outs):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


def test_matmul_of_vectors_and_in_place_squeeze(in_mlx):
    h = torch.arange(12.0).reshape(3, 4)
    v = torch.arange(4.0)
    assert torch.equal((mlx(h) @ mlx(v)).cpu(), h @ v)
    assert torch.equal((mlx(v) @ mlx(h).t()).cpu(), v @ h.t())
    assert (mlx(v) @ mlx(v)).item() == (v @ v).item()
    base = mlx(torch.arange(6.0).reshape(1, 6))
    part = base[0, 2:4]
    base.squeeze_(0)
    assert base.shape == (6,) and base.stride() == (1,)
    base.add_(1)
    assert part.tolist() == [3.0, 4.0]  # a view made before the in-place squeeze still sees its base


def test_mask_indexing(in_mlx):
    h = torch.arange(12.0).reshape(3, 4)
    mask = h.remainder(3) == 0
    assert torch.equal(mlx(h)[mlx(mask)].cpu(), h[mask])
    rows = torch.tensor([True, False, True])
    assert torch.equal(mlx(h)[mlx(rows)].cpu(), h[rows])
    x, y = h.clone(), mlx(h)
    x[mask] = -1.0
    y[mlx(mask)] = -1.0
    assert torch.equal(y.cpu(), x)


def test_sorting_and_extremes_with_nan(in_mlx):
    x = torch.tensor([[3.0, float("nan"), 1.0, 2.0, 1.0], [0.0, -1.0, 5.0, 5.0, 2.0]])
    m = mlx(x)
    for fn in (lambda t: t.sort(dim=1).values, lambda t: t.sort(dim=1, descending=True).values,
               lambda t: t.topk(2, dim=1).values, lambda t: t.argmax(dim=1), lambda t: t.argmin(dim=1),
               lambda t: t.max(dim=1).indices, lambda t: t.amax(dim=1), lambda t: t.argmax()):
        torch.testing.assert_close(fn(m).cpu(), fn(x), equal_nan=True)


def test_as_strided_outside_the_tensor_raises():
    m = mlx(torch.arange(6.0))
    assert m.as_strided((2, 2), (1, 2), 1).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    with pytest.raises(RuntimeError, match="outside"):
        m.as_strided((2, 2), (1, 2), 4)


def test_unsupported_arguments_fall_back_and_stay_right():
    """A lowering that does not cover its arguments declines (decomposition or host): never other numbers."""
    reset_fallback_counts()
    x = torch.tensor([5, -7, 9])
    assert torch.equal((mlx(x) ** mlx(torch.tensor([2, 0, 1]))).cpu(), x ** torch.tensor([2, 0, 1]))
    assert torch.equal(mlx(x).sort(stable=True).values.cpu(), x.sort(stable=True).values)
    assert fallback_counts()  # those two ran on the host, counted


def _both(fn, *tensors):
    """fn on native tensors and on MLX copies; returns ((outputs, grads) native, (outputs, grads) MLX)."""
    results = []
    for native in (True, False):
        ins = [t.detach().clone().requires_grad_(t.requires_grad) if native
               else mlx(t.detach()).requires_grad_(t.requires_grad) for t in tensors]
        out = fn(*ins)
        out.square().sum().backward()
        results.append((out, [t.grad for t in ins if t.requires_grad]))
    return results


TRAINING_OPS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (6,), w, b), [(4, 5, 6), (6,), (6,)]),
    "layer_norm no affine": (lambda x: F.layer_norm(x, (5, 6)), [(4, 5, 6)]),
    "batch_norm train": (lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, training=True),
                         [(4, 3, 5, 5), (3,), (3,)]),
    "batch_norm eval": (lambda x, w, b: F.batch_norm(x, torch.full((3,), 0.5), torch.full((3,), 2.0), w, b),
                        [(4, 3, 5), (3,), (3,)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.tensor([1, 0, 4, 2])), [(4, 5)]),
    "cross_entropy ignore+weight": (lambda x: F.cross_entropy(x, torch.tensor([1, -100, 4, 2]),
                                                              weight=torch.arange(1.0, 6.0)), [(4, 5)]),
    "cross_entropy sum": (lambda x: F.cross_entropy(x, torch.tensor([1, 0, 4, 2]), reduction="sum"), [(4, 5)]),
    "cross_entropy none": (lambda x: F.cross_entropy(x, torch.tensor([1, 0, 4, 2]), reduction="none"), [(4, 5)]),
    "embedding padding_idx": (lambda w: F.embedding(torch.tensor([[1, 2, 1], [0, 3, 2]]), w, padding_idx=2),
                              [(5, 4)]),
    "gelu": (F.gelu, [(3, 4)]),
    "gelu tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 4)]),
    "softmax": (lambda x: torch.softmax(x, dim=1), [(3, 4)]),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=0), [(3, 4)]),
    "relu": (torch.relu, [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(TRAINING_OPS))
def test_training_ops_forward_and_backward_in_mlx(in_mlx, name):
    fn, shapes = TRAINING_OPS[name]
    torch.manual_seed(0)
    tensors = [torch.randn(*s, requires_grad=True) for s in shapes]

    def run(*ins):  # constants (targets, running stats) made where the inputs live
        if isinstance(ins[0], MLXTensor):
            with _MLXFactories():
                return fn(*ins)
        return fn(*ins)

    (want, want_g), (got, got_g) = _both(run, *tensors)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    for a, b in zip(want_g, got_g):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)


def test_batch_norm_updates_running_statistics_in_mlx(in_mlx):
    torch.manual_seed(0)
    x = torch.randn(6, 3, 4)
    stats = [torch.zeros(3), torch.ones(3)]
    mstats = [mlx(t) for t in stats]
    F.batch_norm(x, *stats, training=True, momentum=0.3)
    F.batch_norm(mlx(x), *mstats, training=True, momentum=0.3)
    for a, b in zip(stats, mstats):
        torch.testing.assert_close(b.cpu(), a)
