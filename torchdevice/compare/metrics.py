"""Error metrics of one output against its reference, and the default tolerances per dtype.

Every metric is computed in float64 on the host from the two tensors' values:

* ``max_abs``: ``max |b - r|``;
* ``max_rel``: ``max |b - r| / |r|`` over the elements where ``r != 0`` (0 when there are none);
* ``cosine``: ``<b, r> / (|b| |r|)`` of the flattened tensors (1.0 when both are all zeros, 0.0 when one is);
* ``ulp``: ``max |b - r| / (eps(dtype) * |r|)`` over the elements where ``r != 0``: the error in units of the
  dtype's resolution at the reference value (``torch.finfo(dtype).eps * |r|``), 0 for integer dtypes.

NaN where the reference has NaN counts as equal; NaN (or an infinity) on one side only makes every metric
infinite (cosine 0). An output is *within tolerance* when ``|b - r| <= atol + rtol * |r|`` everywhere
(``torch.allclose``'s rule, NaNs equal) and the shapes agree.
"""
from __future__ import annotations

import math

import torch

#: (rtol, atol) per dtype when --rtol/--atol are not given: torch.testing.assert_close's defaults, float32's
#: loosened to 1e-5 relative (one op's float32 result differs between two correct kernels by a few ulp, and
#: a reduction or matmul by its length times that)
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def tolerance(dtype: torch.dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """The (rtol, atol) to judge an output of ``dtype`` by: the given ones, else the dtype's default (0 for
    integer and bool dtypes: they must be equal)."""
    d_rtol, d_atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return (d_rtol if rtol is None else rtol), (d_atol if atol is None else atol)


def _host64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.device.type != "cpu" or type(t) is not torch.Tensor:
        t = t.to("cpu")
    if t.is_complex():
        return torch.view_as_real(t.to(torch.complex128)).reshape(-1)
    return t.to(torch.float64).reshape(-1)


def errors(out: torch.Tensor, ref: torch.Tensor, rtol: float | None = None, atol: float | None = None) -> dict:
    """The metrics of ``out`` against ``ref`` (module docstring) and whether it is within tolerance."""
    dtype = ref.dtype
    r_tol, a_tol = tolerance(dtype, rtol, atol)
    result = {"dtype": str(dtype).replace("torch.", ""), "shape": list(ref.shape), "rtol": r_tol, "atol": a_tol}
    if tuple(out.shape) != tuple(ref.shape):
        return {**result, "max_abs": math.inf, "max_rel": math.inf, "cosine": 0.0, "ulp": math.inf, "within": False,
                "note": f"shape {list(out.shape)} against the reference's {list(ref.shape)}"}
    b, r = _host64(out), _host64(ref)
    if b.numel() == 0:
        return {**result, "max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "ulp": 0.0, "within": True}
    both_nan = torch.isnan(b) & torch.isnan(r)
    diff = (b - r).abs()
    same_inf = torch.isinf(b) & (b == r)
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    max_abs = float(diff.max())
    nonzero = (r != 0) & torch.isfinite(r)
    rel = diff[nonzero] / r[nonzero].abs()
    max_rel = float(rel.max()) if rel.numel() else (0.0 if max_abs == 0 else math.inf)
    if dtype.is_floating_point or dtype.is_complex:
        eps = torch.finfo(dtype).eps
        ulp = max_rel / eps if math.isfinite(max_rel) else math.inf
    else:
        ulp = 0.0
    finite = torch.isfinite(b) & torch.isfinite(r)
    if not bool(finite.all()) and max_abs != 0:
        cosine = 0.0
    else:
        bf, rf = b[finite], r[finite]
        nb, nr = float(bf.norm()), float(rf.norm())
        cosine = 1.0 if nb == 0 and nr == 0 else 0.0 if nb == 0 or nr == 0 else float(bf @ rf) / (nb * nr)
    within = bool((diff <= a_tol + r_tol * r.abs().nan_to_num(posinf=0.0)).all())
    return {**result, "max_abs": max_abs, "max_rel": max_rel, "cosine": cosine, "ulp": ulp, "within": within}


def scalar_errors(out: float, ref: float, dtype: torch.dtype, rtol: float | None = None,
                  atol: float | None = None) -> dict:
    """:func:`errors` of two Python numbers (``Tensor.item()`` of a ``dtype`` tensor), judged as that dtype."""
    return errors(torch.tensor(out, dtype=dtype), torch.tensor(ref, dtype=dtype), rtol, atol)


def worst(a: dict | None, b: dict) -> dict:
    """The elementwise worst of two metric dicts (for a group of outputs: an op's, a module's)."""
    if a is None:
        return dict(b)
    out = dict(a)
    for key in ("max_abs", "max_rel", "ulp"):
        out[key] = max(a.get(key, 0.0), b.get(key, 0.0))
    out["cosine"] = min(a.get("cosine", 1.0), b.get("cosine", 1.0))
    out["within"] = a.get("within", True) and b.get("within", True)
    return out
