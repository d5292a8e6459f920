"""``to_mlx``/``from_mlx``, run for real on MLX (mlx[cpu] on Linux)."""
from __future__ import annotations

import gc

import mlx.core as mx
import pytest
import torch

from torchdevice_mlx import from_mlx, to_mlx

PAIRS = [
    (torch.float32, mx.float32), (torch.float64, mx.float64), (torch.float16, mx.float16), (torch.bfloat16, mx.bfloat16),
    (torch.int64, mx.int64), (torch.int32, mx.int32), (torch.uint8, mx.uint8), (torch.bool, mx.bool_),
    (torch.complex64, mx.complex64),
]


def test_from_mlx_is_zero_copy():
    array = mx.arange(12).astype(mx.float32) * 2  # lazy: evaluated by from_mlx
    first, second = from_mlx(array), from_mlx(array)
    assert first.device.type == "cpu" and first.tolist() == [2.0 * i for i in range(12)]
    assert first.data_ptr() == second.data_ptr()  # both view the array's buffer
    first[0] = 42.0  # the documented caveat: writes reach the array
    assert array[0].item() == 42.0


def test_from_mlx_keeps_the_buffer_alive():
    array = mx.arange(1000).astype(mx.float32)
    tensor = from_mlx(array)
    del array
    gc.collect()
    churn = [mx.ones((100_000,)) + i for i in range(5)]
    mx.eval(*churn)
    assert tensor.tolist() == [float(i) for i in range(1000)]


def test_from_mlx_copy_is_independent():
    array = mx.zeros((4,))
    copied = from_mlx(array, copy=True)
    copied[0] = 1.0
    assert array[0].item() == 0.0 and copied.data_ptr() != from_mlx(array).data_ptr()


def test_from_mlx_strided_and_broadcast_views():
    sliced = mx.arange(12).reshape(3, 4)[:, 1]
    assert from_mlx(sliced).tolist() == [1, 5, 9]
    wide = mx.broadcast_to(mx.array([1.0, 2.0]), (3, 2))
    assert from_mlx(wide).tolist() == [[1.0, 2.0]] * 3


@pytest.mark.parametrize("tdtype,mdtype", PAIRS, ids=[str(p[0]) for p in PAIRS])
def test_dtypes_round_trip(tdtype, mdtype):
    tensor = (torch.arange(6) % 2).reshape(2, 3).to(tdtype)
    array = to_mlx(tensor)
    assert array.dtype == mdtype and array.shape == (2, 3)
    back = from_mlx(array)
    assert back.dtype == tdtype and torch.equal(back, tensor)


def test_to_mlx_always_copies():
    tensor = torch.zeros(4)
    array = to_mlx(tensor)
    tensor[0] = 5.0
    assert array[0].item() == 0.0


def test_to_mlx_detaches_and_resolves_views():
    grad = torch.ones(3, requires_grad=True) * 2
    assert to_mlx(grad).tolist() == [2.0, 2.0, 2.0]
    transposed = torch.arange(6.0).reshape(2, 3).t()
    assert to_mlx(transposed).tolist() == transposed.tolist()
    complex_view = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj()
    assert to_mlx(complex_view).tolist() == [1 - 2j, 3 + 1j]
    negative_view = torch.tensor([1.0, -2.0])._neg_view()
    assert to_mlx(negative_view).tolist() == [-1.0, 2.0]


def test_type_errors():
    with pytest.raises(TypeError, match="torch.Tensor"):
        to_mlx([1, 2])
    with pytest.raises(TypeError, match="mlx.core.array"):
        from_mlx(torch.ones(2))


def test_from_mlx_of_negative_stride_views():
    """MLX's a[::-1] is a negative-stride view; torch's DLPack import of it aborted the whole process."""
    import mlx.core as mx

    a = mx.arange(6).reshape(2, 3)
    assert from_mlx(a[::-1]).tolist() == [[3, 4, 5], [0, 1, 2]]
    assert from_mlx(a[:, ::-2], copy=True).tolist() == [[2, 0], [5, 3]]
    assert from_mlx(a.astype(mx.bfloat16)[::-1]).float().tolist() == [[3, 4, 5], [0, 1, 2]]
    assert from_mlx(mx.broadcast_to(mx.array([1.0, 2.0]), (3, 2))).tolist() == [[1.0, 2.0]] * 3


def test_from_mlx_of_an_element_of_a_larger_buffer():
    """MLX exports a 0-d element with a DLPack byte offset, which torch refuses; bfloat16 has no NumPy dtype."""
    for mdtype, tdtype in ((mx.bfloat16, torch.bfloat16), (mx.float16, torch.float16), (mx.float32, torch.float32)):
        array = mx.arange(6).astype(mdtype)
        for element in (array[2:3].reshape(()), mx.squeeze(mx.split(array, 3)[1][:1]), mx.take(array, 2)):
            tensor = from_mlx(element)
            assert tensor.dtype == tdtype and tensor.shape == () and tensor.item() == 2.0
            assert from_mlx(element, copy=True).item() == 2.0


def test_from_mlx_of_bfloat16_is_zero_copy():
    array = mx.arange(12).reshape(3, 4).astype(mx.bfloat16)
    first, second = from_mlx(array), from_mlx(array)
    assert first.dtype == torch.bfloat16 and first.data_ptr() == second.data_ptr()
    assert first.tolist() == [[float(4 * r + c) for c in range(4)] for r in range(3)]
