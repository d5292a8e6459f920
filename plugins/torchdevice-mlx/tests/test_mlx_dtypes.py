"""Every torch dtype MLX has is held by an MLX tensor as natively; one MLX lacks is refused by name.

``torch.ones(3, dtype=torch.uint64, device="cuda")`` raised a bare ``KeyError`` on the mlx backend: the
dtype table had no uint16/uint32/uint64 (MLX has all three; ``distributed``'s table had them). And a
dtype MLX lacks was narrowed without a word (complex128 became complex64 through MLX's DLPack import).
The unsigned cases run natively on the CPU and translated on mlx (the ``native_and_mlx`` fixture), and are
compared.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torchdevice
from torchdevice.testing import router_sandbox
from torchdevice_mlx import conversion
from torchdevice_mlx.runtime import mx
from torchdevice_mlx.tensor import MLXTensor

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]


def _largest(dtype: torch.dtype) -> int:
    return {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**64 - 1}[dtype]


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_unsigned_tensors_on_the_device_as_natively(dtype: torch.dtype, native_and_mlx: Callable[..., Any]) -> None:
    # only ops torch's CPU kernels have for these dtypes (no add, arange or max there)
    def program(device: str) -> dict[str, Any]:
        ones = torch.ones(3, dtype=dtype, device=device)
        big = torch.full((2,), _largest(dtype), dtype=dtype, device=device)
        moved = torch.tensor([0, 7, _largest(dtype)], dtype=dtype).to(device)
        results = {"ones": ones, "zeros": torch.zeros(2, dtype=dtype, device=device), "big": big, "moved": moved,
                   "times 3": ones * 3, "sum": ones.sum(), "eq": moved == moved, "cat": torch.cat([ones, moved]),
                   "slice": moved[1:], "and": moved[1:] & big, "float": ones.float()}
        out: dict[str, Any] = {name: (t.dtype, t.cpu(), isinstance(t, MLXTensor)) for name, t in results.items()}
        out["tolist"] = big.tolist()
        return out

    native, translated = native_and_mlx(program)
    assert translated.keys() == native.keys()
    for name, want in native.items():
        if name == "tolist":
            assert translated[name] == want, name
            continue
        dtype_got, values, is_mlx = translated[name]
        assert is_mlx, name
        assert dtype_got == want[0], name
        assert torch.equal(values, want[1]), name


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_unsigned_dtype_maps_both_ways_from_empty_tables(dtype: torch.dtype) -> None:
    """The tables fill on first use; the first lookup used to be a bare ``KeyError`` when it went MLX -> torch."""
    saved_t2m, saved_m2t = dict(conversion._T2M), dict(conversion.TORCH_DTYPE_OF)
    conversion._T2M.clear(), conversion.TORCH_DTYPE_OF.clear()  # cleared in place: tensor holds TORCH_DTYPE_OF by name
    try:
        mlx_dtype = getattr(mx(), str(dtype).replace("torch.", ""))
        assert conversion.to_torch_dtype(mlx_dtype) is dtype
        assert conversion.to_mx_dtype(dtype) == mlx_dtype
    finally:
        conversion._T2M.update(saved_t2m), conversion.TORCH_DTYPE_OF.update(saved_m2t)


def test_the_distributed_dtype_table_agrees_with_the_tensor_one() -> None:
    distributed = pytest.importorskip("torchdevice_mlx.distributed")
    assert dict(distributed._MX_DTYPES) == dict(conversion._dtype_pairs())


@pytest.mark.parametrize("dtype", [torch.complex128, torch.float8_e4m3fn], ids=str)
@pytest.mark.parametrize("place", ["factory", "Tensor.to", "Tensor.cuda", "cast on the device"])
def test_a_dtype_mlx_lacks_is_refused_by_name(dtype: torch.dtype, place: str) -> None:
    makes: dict[str, Callable[[], torch.Tensor]] = {
        "factory": lambda: torch.ones(3, dtype=dtype, device="cuda"),
        "Tensor.to": lambda: torch.ones(3, dtype=dtype).to("cuda"),
        "Tensor.cuda": lambda: torch.ones(3, dtype=dtype).cuda(),
        "cast on the device": lambda: torch.ones(3, device="cuda").to(dtype),
    }
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        with pytest.raises(TypeError, match=rf"MLX has no dtype for {dtype}.*holds .*uint64.*complex64"):
            makes[place]()
    assert torch.ones(3, dtype=dtype).dtype == dtype  # natively it exists (on the host)
