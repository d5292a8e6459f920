"""The ATen-op -> MLX lowering table used by :mod:`torchdevice_mlx.dispatch`: lowerings on MLX arrays.

Each lowering takes MLX arrays where the op takes tensors (other arguments
unchanged) and returns MLX arrays (or tuples/lists of them, ``None`` where the
op returns no tensor). A lowering that cannot compute some arguments exactly
as torch does raises :class:`NotImplementedError`, and the op falls back to
torch on the host (counted): it never returns other numbers than torch's.

Ops missing here are rewritten by torch's decomposition tables, whose
``prims`` and core ATen ops are lowered here too, or fall back to the host.
:data:`RANDOM_OPS` always run on the host with torch's CPU generator, so a
seed draws the same numbers as torch on CPU (dropout draws its mask there and
applies it in MLX).

Type promotion follows torch, not MLX: a binary op's operands are cast to
``torch.result_type`` of them (worked out once per combination of dtypes,
dimensioned/zero-dim tensor and Python scalar kind) before MLX sees them.

This module imports ``mlx.core`` at import: it is imported (inside functions) only by the
dispatch of MLX tensors, which exist only where MLX does. It knows nothing of tensors: the lowerings on
the tensors themselves are :mod:`torchdevice_mlx.tensor_lowerings`'.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, NoReturn

import mlx.core as _mlx_core
import torch
from torch._ops import OpOverload

from .bridge import from_mlx, to_mlx
from .conversion import note_fallback, to_mx_dtype, to_torch_dtype
from .runtime import Array

aten = torch.ops.aten
prims = torch.ops.prims
LOWERINGS: dict = {}

# the names the lowerings' annotations use (Array: an ``mlx.core.array``, see torchdevice_mlx.runtime)
#: a dimension argument: one, several, or None (all)
Dims = int | Sequence[int] | None
#: an int-list argument of convolution and pooling (stride, padding ...: ATen passes a list)
Ints = Sequence[int]
#: a Python number argument
Scalar = int | float | bool
#: an MLX dtype (``mlx.core.Dtype``)
DType = Any
#: an argument that is an MLX array or a Python number (Any, like Array: no narrowing by ``type(x) is _ARR``)
ArrayOrScalar = Any

RANDOM_OPS = {
    aten.bernoulli.default, aten.bernoulli.p, aten.bernoulli_.float,
    aten.bernoulli_.Tensor, aten.rand_like.default, aten.randn_like.default, aten.normal_.default,
    aten.uniform_.default, aten.randint_like.default, aten.randint_like.low_dtype,
    aten.exponential_.default, aten.multinomial.default, aten.randperm.default,
}

#: Ops run on the host whatever their arguments (none today: the flash-attention kernels, whose
#: saved logsumexp feeds the backward, are lowered forward and backward alike).
HOST_OPS: set = set()

#: MLX primitives whose float64 kernels compute at float32 precision (measured against numpy's float64,
#: MLX 0.32.4 on CPU: relative errors from 1e-8 (logsumexp) to 3e-4 (cos, erf); the rest of the ones the
#: lowerings call agree within 1e-12). A lowering that calls one on a float64 array declines
#: (NotImplementedError), so the op runs as torch's decomposition or in torch on the host, counted:
#: float64 results are never float32-precise numbers passed off as float64.
FLOAT64_INEXACT = ("exp", "sin", "cos", "sigmoid", "erf", "erfinv", "softmax", "logsumexp", "logaddexp",
                   "conv_general")
_F64 = _mlx_core.float64


def _float64_exact(name: str, fn: Callable) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Array:
        for a in args[:2]:
            if getattr(a, "dtype", None) == _F64:
                raise NotImplementedError(f"mlx.core.{name} computes float64 at float32 precision")
        return fn(*args, **kwargs)

    run.__name__ = name
    return run


def _round_exact(a: Array, decimals: int = 0, **kwargs: Any) -> Array:
    if decimals and getattr(a, "dtype", None) == _F64:  # scaling by 10**decimals in float32 precision
        raise NotImplementedError("mlx.core.round with decimals computes float64 at float32 precision")
    return _mlx_core.round(a, decimals, **kwargs)


#: mlx.core as the lowerings use it: the module's names, the float64-inexact ones guarded (a plain
#: namespace, so a lookup costs what a module attribute does)
core = SimpleNamespace(**{n: getattr(_mlx_core, n) for n in dir(_mlx_core) if not n.startswith("__")})
for _name in FLOAT64_INEXACT:
    setattr(core, _name, _float64_exact(_name, getattr(_mlx_core, _name)))
core.round = _round_exact

_ARR = core.array
_FLOATS = {core.float16, core.bfloat16, core.float32, core.float64}
_INTS = {core.int8, core.int16, core.int32, core.int64, core.uint8, core.uint16, core.uint32, core.uint64}


def lower(*ops: Any) -> Callable:
    def register(fn: Callable) -> Callable:
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return register


def _dt(dtype: torch.dtype) -> DType:
    return to_mx_dtype(dtype)


def _tdt(dtype: torch.dtype | None) -> torch.dtype:
    return to_torch_dtype(dtype)


def _dims(dim: Dims, ndim: int) -> list[int]:
    if ndim == 0:  # torch accepts dim 0/-1 on a 0-d tensor
        return []
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % ndim for d in dim})


# -- type promotion (torch's rules) -------------------------------------------------------

_PROMO: dict = {}
_SAMPLE = {bool: True, int: 1, float: 1.0, complex: 1j}


def _key(x: Array) -> object:
    if type(x) is _ARR:
        return x.dtype if x.ndim else (x.dtype, 0)
    return type(x)


def _dummy(key: Any) -> torch.Tensor | Scalar | complex:  # key: a _key
    if isinstance(key, tuple):
        return torch.empty((), dtype=_tdt(key[0]))
    if isinstance(key, type):
        if key not in _SAMPLE:
            raise NotImplementedError(f"operand of type {key.__name__}")
        return _SAMPLE[key]
    return torch.empty(1, dtype=_tdt(key))


def result_dtype(*operands: Any) -> DType:
    """torch.result_type of MLX arrays / Python scalars, as an MLX dtype."""
    a = operands[0]
    if len(operands) == 2:
        b = operands[1]
        # the common cases without the table: same dtype; a floating tensor and a Python number;
        # an integer tensor and a Python int
        if type(a) is _ARR:
            if type(b) is _ARR:
                if a.dtype == b.dtype:
                    return a.dtype
            elif type(b) is float or type(b) is int:
                if a.dtype in _FLOATS or (type(b) is int and a.dtype in _INTS):
                    return a.dtype
    key = tuple(_key(x) for x in operands if x is not None)
    hit = _PROMO.get(key)
    if hit is None:
        from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

        dummies = [_dummy(k) for k in key]
        _, result = elementwise_dtypes(*dummies, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        hit = _PROMO[key] = _dt(result)
    return hit


def _cast(x: Array, dt: DType) -> Array:
    if type(x) is _ARR:
        return x if x.dtype == dt else x.astype(dt)
    if x is None:
        return x
    if dt == core.bool_ or dt in _INTS:
        if isinstance(x, float) and not x.is_integer():
            raise NotImplementedError("a fractional scalar with an integer result")
        return core.array(int(x), dtype=dt) if not isinstance(x, bool) else core.array(x, dtype=dt)
    return x  # a Python number: MLX keeps the array's dtype (a weak scalar), as torch does


def _promoted(a: Array, b: Array) -> tuple[Array, Array, DType]:
    dt = result_dtype(a, b)
    return _cast(a, dt), _cast(b, dt), dt


def _to_float(a: Array) -> Array:
    return a if a.dtype in _FLOATS else a.astype(core.float32)


# -- elementwise --------------------------------------------------------------------------

def _binary(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array, b: Array) -> Array:
        # the common cases first: two arrays of one dtype; a floating array and a Python number
        if type(a) is _ARR and ((type(b) is _ARR and a.dtype == b.dtype)
                                or (type(b) is float and a.dtype in _FLOATS)):
            return fn(a, b)
        a, b, _ = _promoted(a, b)
        return fn(a, b)
    return lowering


def _binary_alpha(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array, b: Array, alpha: Scalar = 1) -> Array:
        if alpha == 1 and type(a) is _ARR and ((type(b) is _ARR and a.dtype == b.dtype)
                                               or (type(b) is float and a.dtype in _FLOATS)):
            return fn(a, b)
        a, b, dt = _promoted(a, b)
        if alpha != 1:
            if dt == core.bool_:
                raise NotImplementedError("alpha with bool operands")
            b = b * alpha
        return fn(a, b)
    return lowering


lower(aten.add.Tensor, aten.add.Scalar)(_binary_alpha(core.add))
lower(aten.sub.Tensor, aten.sub.Scalar)(_binary_alpha(core.subtract))
lower(aten.mul.Tensor, aten.mul.Scalar, prims.mul.default)(_binary(core.multiply))
lower(prims.add.default)(_binary(core.add))
lower(prims.sub.default)(_binary(core.subtract))
lower(aten.maximum.default, prims.maximum.default)(_binary(core.maximum))
lower(aten.minimum.default, prims.minimum.default)(_binary(core.minimum))
lower(aten.atan2.default, prims.atan2.default)(_binary(lambda a, b: core.arctan2(_to_float(a), _to_float(b))))
lower(aten.remainder.Tensor, aten.remainder.Scalar, prims.remainder.default)(_binary(core.remainder))


@lower(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(a: Array, b: Array, alpha: Scalar = 1) -> Array:
    a, b, _ = _promoted(a, b)
    return core.subtract(b, a * alpha if alpha != 1 else a)


@lower(aten.div.Tensor, aten.div.Scalar)
def _div(a: Array, b: Array) -> Array:
    dt = result_dtype(a, b)
    if dt not in _FLOATS and not core.issubdtype(dt, core.complexfloating):
        # integers divide as floats, each operand converted from its own dtype (as torch's true division)
        dt = core.float32
    return core.divide(_cast(a, dt), _cast(b, dt))


def _trunc_div_int(a: Array, b: Array) -> Array:
    q = core.floor_divide(a, b)
    r = core.remainder(a, b)
    fix = (r != 0) & ((a < 0) != (b < 0))
    return core.where(fix, q + 1, q)


@lower(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a: Array, b: Array, rounding_mode: str | None = None) -> Array:
    if rounding_mode is None:
        return _div(a, b)
    a, b, dt = _promoted(a, b)
    if dt in _FLOATS:
        q = core.divide(a, b)
        return core.floor(q) if rounding_mode == "floor" else core.where(q < 0, core.ceil(q), core.floor(q))
    if dt not in _INTS:
        raise NotImplementedError(f"division of {dt}")
    return core.floor_divide(a, b) if rounding_mode == "floor" else _trunc_div_int(a, b)


@lower(prims.div.default)
def _p_div(a: Array, b: Array) -> Array:
    a, b, dt = _promoted(a, b)
    if dt in _FLOATS:
        return core.divide(a, b)
    return _trunc_div_int(a, b)  # prims.div truncates integers


@lower(aten.fmod.Tensor, aten.fmod.Scalar, prims.fmod.default)
def _fmod(a: Array, b: Array) -> Array:
    a, b, dt = _promoted(a, b)
    if dt in _FLOATS:
        q = core.divide(a, b)
        return a - b * core.where(q < 0, core.ceil(q), core.floor(q))
    r = core.remainder(a, b)
    return core.where((r != 0) & ((r < 0) != (a < 0)), r - b, r)


@lower(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, prims.pow.default)
def _pow(a: Array, b: Array) -> Array:
    a, b, dt = _promoted(a, b)
    if dt not in _FLOATS:
        # integer powers: negative exponents raise (or round) in torch; only what is exact here
        if type(b) is _ARR or not isinstance(b, int) or b < 0:
            raise NotImplementedError("integer power with a tensor or negative exponent")
    return core.power(a, b)


@lower(aten.pow.Scalar)
def _pow_s(a: Array, b: Array) -> Array:
    dt = result_dtype(a, b)
    if dt not in _FLOATS:
        raise NotImplementedError("integer power of a scalar")
    return core.power(core.array(a, dtype=dt), _cast(b, dt))


def _float_unary(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array) -> Array:
        return fn(_to_float(a))
    return lowering


for _names, _fn in [
    (("exp",), core.exp), (("log",), core.log), (("log2",), core.log2), (("log10",), core.log10),
    (("log1p",), core.log1p), (("expm1",), core.expm1), (("sqrt",), core.sqrt), (("rsqrt",), core.rsqrt),
    (("sin",), core.sin), (("cos",), core.cos), (("tan",), core.tan), (("asin",), core.arcsin),
    (("acos",), core.arccos), (("atan",), core.arctan), (("sinh",), core.sinh), (("cosh",), core.cosh),
    (("tanh",), core.tanh), (("asinh",), core.arcsinh), (("acosh",), core.arccosh), (("atanh",), core.arctanh),
    (("erf",), core.erf), (("erfinv", "erf_inv"), core.erfinv), (("sigmoid",), core.sigmoid),
    (("reciprocal",), core.reciprocal), (("exp2",), lambda a: core.power(core.array(2.0, dtype=a.dtype), a)),
]:
    for _name in _names:
        for _packet in (getattr(aten, _name, None), getattr(prims, _name, None)):
            if _packet is not None and hasattr(_packet, "default"):
                LOWERINGS[_packet.default] = _float_unary(_fn)


def _same_unary(fn: Callable[..., Any], *, ints_identity: bool=False) -> Callable[..., Array]:
    def lowering(a: Array) -> Array:
        if a.dtype == core.bool_:
            raise NotImplementedError("on bool")
        if ints_identity and a.dtype not in _FLOATS:
            return a
        return fn(a)
    return lowering


lower(aten.neg.default, prims.neg.default)(_same_unary(core.negative))
lower(aten.abs.default, prims.abs.default)(_same_unary(core.abs))
lower(aten.sign.default, prims.sign.default)(_same_unary(core.sign))
lower(aten.square.default)(_same_unary(core.square))
lower(aten.floor.default, prims.floor.default)(_same_unary(core.floor, ints_identity=True))
lower(aten.ceil.default, prims.ceil.default)(_same_unary(core.ceil, ints_identity=True))
lower(aten.trunc.default, prims.trunc.default)(_same_unary(
    lambda a: core.where(a < 0, core.ceil(a), core.floor(a)), ints_identity=True))


@lower(aten.round.default, aten.round.decimals, prims.round.default)
def _round(a: Array, decimals: int = 0) -> Array:
    if a.dtype not in _FLOATS:
        if decimals:
            raise NotImplementedError("round of an integer tensor to decimals")
        return a
    return core.round(a, decimals)  # half to even, as torch


@lower(aten.logical_not.default)
def _logical_not(a: Array) -> Array:
    return core.logical_not(a)


@lower(aten.bitwise_not.default, prims.bitwise_not.default)
def _bitwise_not(a: Array) -> Array:
    if a.dtype == core.bool_:
        return core.logical_not(a)
    if a.dtype not in _INTS:
        raise NotImplementedError("bitwise_not of a floating tensor")
    return core.bitwise_invert(a)


@lower(aten.isnan.default)
def _isnan(a: Array) -> Array:
    return core.isnan(a) if a.dtype in _FLOATS else core.zeros(a.shape, dtype=core.bool_)


@lower(aten.isinf.default)
def _isinf(a: Array) -> Array:
    return core.isinf(a) if a.dtype in _FLOATS else core.zeros(a.shape, dtype=core.bool_)


@lower(aten.isfinite.default, prims.isfinite.default)
def _isfinite(a: Array) -> Array:
    return core.isfinite(a) if a.dtype in _FLOATS else core.ones(a.shape, dtype=core.bool_)


@lower(aten.relu.default)
def _relu(a: Array) -> Array:
    if a.dtype == core.bool_:
        raise NotImplementedError("relu of bool")
    return core.maximum(a, core.array(0, dtype=a.dtype))


@lower(aten.gelu.default)
def _gelu(a: Array, approximate: str = "none") -> Array:
    if a.dtype not in _FLOATS:
        raise NotImplementedError("gelu of an integer tensor")
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (a + 0.044715 * a * a * a)
        return 0.5 * a * (1 + core.tanh(inner))
    return a * 0.5 * (1 + core.erf(a * (1 / math.sqrt(2))))


@lower(aten.silu.default)
def _silu(a: Array) -> Array:
    if a.dtype not in _FLOATS:
        raise NotImplementedError("silu of an integer tensor")
    return a * core.sigmoid(a)


def _compare(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array, b: Array) -> Array:
        a, b, _ = _promoted(a, b)
        return fn(a, b)
    return lowering


for _op, _fn in [("eq", core.equal), ("ne", core.not_equal), ("lt", core.less), ("le", core.less_equal),
                 ("gt", core.greater), ("ge", core.greater_equal)]:
    LOWERINGS[getattr(aten, _op).Tensor] = LOWERINGS[getattr(aten, _op).Scalar] = _compare(_fn)
    LOWERINGS[getattr(prims, _op).default] = _compare(_fn)


def _logical(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array, b: Array) -> Array:
        return fn(a if type(a) is not _ARR or a.dtype == core.bool_ else a != 0,
                  b if type(b) is not _ARR or b.dtype == core.bool_ else b != 0)
    return lowering


LOWERINGS[aten.logical_and.default] = _logical(core.logical_and)
LOWERINGS[aten.logical_or.default] = _logical(core.logical_or)
LOWERINGS[aten.logical_xor.default] = _logical(core.not_equal)


def _bitwise(fn: Callable[..., Any], logical: Callable[..., Array]) -> Callable[..., Array]:
    def lowering(a: Array, b: Array) -> Array:
        a, b, dt = _promoted(a, b)
        if dt == core.bool_:
            return logical(a, b)
        if dt not in _INTS:
            raise NotImplementedError("bitwise op on a floating tensor")
        return fn(a, b)
    return lowering


for _name, _fn, _logical_fn in [("bitwise_and", core.bitwise_and, core.logical_and),
                                ("bitwise_or", core.bitwise_or, core.logical_or),
                                ("bitwise_xor", core.bitwise_xor, core.not_equal)]:
    _packet = getattr(aten, _name)
    LOWERINGS[_packet.Tensor] = LOWERINGS[_packet.Scalar] = _bitwise(_fn, _logical_fn)
    LOWERINGS[getattr(prims, _name).default] = _bitwise(_fn, _logical_fn)


@lower(aten.where.self, prims.where.default)
def _where(c: Array, a: Array, b: Array) -> Array:
    a, b, _ = _promoted(a, b)
    return core.where(c if c.dtype == core.bool_ else c != 0, a, b)


@lower(aten.clamp.default, aten.clamp.Tensor)
def _clamp(a: Array, min: Scalar | Array | None=None, max: Scalar | Array | None=None) -> Array:
    dt = result_dtype(a, min, max)
    a = _cast(a, dt)
    if min is not None:
        a = core.maximum(a, _cast(min, dt) if type(min) is _ARR else core.array(min, dtype=dt))
    if max is not None:
        a = core.minimum(a, _cast(max, dt) if type(max) is _ARR else core.array(max, dtype=dt))
    return a


@lower(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(a: Array, min: Scalar | Array | None) -> Array:
    return _clamp(a, min=min)


@lower(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(a: Array, max: Scalar | Array | None) -> Array:
    return _clamp(a, max=max)


@lower(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(a: Array, b: Array, w: Array) -> Array:
    if a.dtype not in _FLOATS:
        raise NotImplementedError("lerp of an integer tensor")
    return a + w * (b - a)


@lower(aten.addcmul.default)
def _addcmul(a: Array, t1: Array, t2: Array, value: Scalar=1) -> Array:
    dt = result_dtype(a, t1, t2)
    a, t1, t2 = _cast(a, dt), _cast(t1, dt), _cast(t2, dt)
    return a + value * t1 * t2 if value != 1 else a + t1 * t2


@lower(aten.addcdiv.default)
def _addcdiv(a: Array, t1: Array, t2: Array, value: Scalar=1) -> Array:
    dt = result_dtype(a, t1, t2)
    if dt not in _FLOATS:
        raise NotImplementedError("addcdiv of integer tensors")
    a, t1, t2 = _cast(a, dt), _cast(t1, dt), _cast(t2, dt)
    return a + value * t1 / t2 if value != 1 else a + t1 / t2


# -- copies, casts, factories -----------------------------------------------

@lower(aten._to_copy.default)
def to_copy(a: Array, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
             device: torch.device | str | None = None, pin_memory: bool | None = None, non_blocking: bool = False,
             memory_format: torch.memory_format | None = None) -> Array:
    if device is not None and torch.device(device).type != "cpu":
        raise NotImplementedError(f"MLXTensor cannot move to {device}")
    if dtype is not None and _dt(dtype) != a.dtype:
        return _convert(a, _dt(dtype))
    return core.array(a)


def _convert(a: Array, dt: DType) -> Array:
    """``a`` as dtype ``dt`` with torch's conversion rules (float -> int truncates toward zero, as both do)."""
    if dt == core.bool_ and a.dtype != core.bool_:
        return a != 0
    return a.astype(dt)


@lower(prims.convert_element_type.default)
def _p_convert(a: Array, dtype: torch.dtype) -> Array:
    return _convert(a, _dt(dtype)) if _dt(dtype) != a.dtype else a


@lower(aten.clone.default, prims.clone.default)
def clone(a: Array, memory_format: torch.memory_format | None = None) -> Array:
    return core.array(a)


@lower(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def _lift(a: Array) -> Array:
    return a


def _like(value: Scalar) -> Callable[..., Array]:
    def fn(a: Array, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
           device: torch.device | str | None = None, pin_memory: bool | None = None,
           memory_format: torch.memory_format | None = None) -> Array:
        dt = _dt(dtype) if dtype is not None else a.dtype
        return core.full(a.shape, value, dtype=dt)
    return fn


LOWERINGS[aten.zeros_like.default] = _like(0)
LOWERINGS[aten.ones_like.default] = _like(1)
LOWERINGS[aten.empty_like.default] = _like(0)


@lower(aten.full_like.default)
def _full_like(a: Array, fill_value: Scalar, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
               device: torch.device | str | None = None, pin_memory: bool | None = None,
               memory_format: torch.memory_format | None = None) -> Array:
    return core.full(a.shape, fill_value, dtype=_dt(dtype) if dtype is not None else a.dtype)


@lower(aten.fill.Scalar, aten.fill.Tensor, prims.fill.default)
def _fill(a: Array, value: ArrayOrScalar) -> Array:
    return core.full(a.shape, value if type(value) is not _ARR else value.astype(a.dtype), dtype=a.dtype)


@lower(aten.new_zeros.default, aten.new_empty.default, aten.new_full.default, aten.new_ones.default)
def _new(a: Array, size: Sequence[int], *rest: Any, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
         device: torch.device | str | None = None, pin_memory: bool | None = None) -> Array:
    value = rest[0] if rest else 0
    return core.full(tuple(size), value, dtype=_dt(dtype) if dtype is not None else a.dtype)


LOWERINGS[aten.new_ones.default] = lambda a, size, dtype=None, layout=None, device=None, pin_memory=None: (
    core.ones(tuple(size), dtype=_dt(dtype) if dtype is not None else a.dtype))


@lower(aten.copy.default)
def _copy(a: Array, src: Array, non_blocking: bool = False) -> Array:
    return core.broadcast_to(_convert(src, a.dtype) if src.dtype != a.dtype else src, a.shape)


@lower(aten.tril.default)
def _tril(a: Array, diagonal: int = 0) -> Array:
    return core.tril(a, diagonal) if a.ndim >= 2 else _raise("tril of a tensor with fewer than 2 dims")


@lower(aten.triu.default)
def _triu(a: Array, diagonal: int = 0) -> Array:
    return core.triu(a, diagonal) if a.ndim >= 2 else _raise("triu of a tensor with fewer than 2 dims")


def _raise(why: str) -> NoReturn:
    raise NotImplementedError(why)


@lower(aten.flip.default, prims.rev.default)
def _flip(a: Array, dims: Sequence[int]) -> Array:
    idx = [slice(None)] * a.ndim
    for d in dims:
        idx[d % a.ndim] = slice(None, None, -1)
    return a[tuple(idx)] if a.ndim else a


# -- views (aliasing handled in views.py) ------------------------------------

@lower(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default, prims.reshape.default)
def _view(a: Array, size: Sequence[int], *stride: Any) -> Array:
    return a.reshape(tuple(size))


@lower(aten.alias.default, aten.detach.default, prims.view_of.default)
def _alias(a: Array) -> Array:
    return a


@lower(aten.unsqueeze.default)
def _unsqueeze(a: Array, dim: int) -> Array:
    return core.expand_dims(a, dim % (a.ndim + 1))


@lower(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, prims.squeeze.default)
def _squeeze(a: Array, dim: Dims | None = None) -> Array:
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        return a  # squeeze.dims with no dims squeezes nothing
    dims = [d for d in _dims(dim, a.ndim) if a.shape[d] == 1] if a.ndim else []
    return core.squeeze(a, dims) if dims else a


@lower(aten.t.default)
def _t(a: Array) -> Array:
    return a.T if a.ndim == 2 else a


@lower(aten.transpose.int)
def _transpose(a: Array, d0: int, d1: int) -> Array:
    return core.swapaxes(a, d0, d1) if a.ndim else a


@lower(aten.permute.default, prims.transpose.default)
def _permute(a: Array, dims: Sequence[int]) -> Array:
    return core.transpose(a, [d % a.ndim for d in dims]) if a.ndim else a


@lower(aten.expand.default)
def _expand(a: Array, size: Sequence[int], implicit: bool = False) -> Array:
    lead = len(size) - a.ndim
    shape = [a.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return core.broadcast_to(a, shape)


@lower(aten.slice.Tensor)
def _slice(a: Array, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1) -> Array:
    n = a.shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    start, end = (start + n if start < 0 else start), (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    idx = [slice(None)] * a.ndim
    idx[dim] = slice(start, max(start, end), step)
    return a[tuple(idx)]


@lower(aten.select.int)
def _select(a: Array, dim: int, index: int) -> Array:
    idx: list[slice | int] = [slice(None)] * a.ndim
    idx[dim] = index
    return a[tuple(idx)]


@lower(prims.broadcast_in_dim.default)
def _p_broadcast(a: Array, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Array:
    shape = list(shape)
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        expanded[dst] = a.shape[src]
    return core.broadcast_to(a.reshape(expanded), shape)


@lower(prims.collapse_view.default, prims.collapse.default)
def _p_collapse(a: Array, start: int, end: int) -> Array:
    shape = list(a.shape)
    n = 1
    for s in shape[start:end]:
        n *= s
    return a.reshape(shape[:start] + [n] + shape[end:])


@lower(prims.split_dim.default)
def _p_split_dim(a: Array, dim: int, outer_length: int) -> Array:
    shape = list(a.shape)
    return a.reshape(shape[:dim] + [outer_length, shape[dim] // outer_length] + shape[dim + 1:])


# -- reductions -------------------------------------------------------------

def _acc(a: Array, dtype: torch.dtype | None) -> Array:
    """torch's accumulation dtype for sum/prod/cumsum: the requested one, else int64 for integers and bool."""
    if dtype is not None:
        return _convert(a, _dt(dtype)) if _dt(dtype) != a.dtype else a
    return a if a.dtype in _FLOATS else a.astype(core.int64)


@lower(aten.sum.dim_IntList, aten.sum.default)
def _sum(a: Array, dim: Dims | None = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Array:
    a = _acc(a, dtype)
    return core.sum(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


@lower(aten.prod.default, aten.prod.dim_int)
def _prod(a: Array, dim: Dims | None = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Array:
    a = _acc(a, dtype)
    return core.prod(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


@lower(aten.mean.dim, aten.mean.default)
def _mean(a: Array, dim: Dims | None = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Array:
    if dtype is not None:
        a = a.astype(_dt(dtype))
    if a.dtype not in _FLOATS:
        raise NotImplementedError("mean of an integer tensor")  # torch raises
    return core.mean(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


def _extreme(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array, dim: Dims = (), keepdim: bool = False) -> Array:
        axes = _dims(dim, a.ndim)
        if any(a.shape[d] == 0 for d in axes) or (a.size == 0 and not axes):
            raise NotImplementedError("reduction over an empty dimension")  # torch raises
        return fn(a, axis=axes, keepdims=keepdim)
    return lowering


lower(aten.amax.default)(_extreme(core.max))
lower(aten.amin.default)(_extreme(core.min))


@lower(aten.max.default)
def _max_all(a: Array) -> Array:
    return _extreme(core.max)(a)


@lower(aten.min.default)
def _min_all(a: Array) -> Array:
    return _extreme(core.min)(a)


def _arg(fn: Callable[..., Any], extreme: str) -> Callable[..., Array]:
    def lowering(a: Array, dim: Dims | None = None, keepdim: bool = False) -> Array:
        if a.size == 0:
            raise NotImplementedError("argmax/argmin of an empty tensor")
        if a.ndim == 0:
            return core.array(0, dtype=core.int64)
        if a.dtype in _FLOATS:
            # torch returns the first NaN (NaN is the extreme); MLX ignores NaN
            nan = core.isnan(a)
            a = core.where(nan, core.array(math.inf if extreme == "max" else -math.inf, dtype=a.dtype), a)
            flat_first_nan = None
            if dim is None:
                flat = a.reshape(-1)
                idx = fn(flat)
                flat_first_nan = core.argmax(nan.reshape(-1))
                out = core.where(core.any(nan), flat_first_nan, idx).astype(core.int64)
                return out.reshape([1] * a.ndim) if keepdim else out
            idx = fn(a, axis=dim, keepdims=keepdim)
            first_nan = core.argmax(nan, axis=dim, keepdims=keepdim)
            return core.where(core.any(nan, axis=dim, keepdims=keepdim), first_nan, idx).astype(core.int64)
        if dim is None:
            out = fn(a.reshape(-1)).astype(core.int64)
            return out.reshape([1] * a.ndim) if keepdim else out
        return fn(a, axis=dim, keepdims=keepdim).astype(core.int64)
    return lowering


lower(aten.argmax.default)(_arg(core.argmax, "max"))
lower(aten.argmin.default)(_arg(core.argmin, "min"))


def _extreme_dim(fn: Callable[..., Any], argfn: Callable[..., Any], extreme: str) -> Callable[..., Array]:
    def lowering(a: Array, dim: int, keepdim: bool = False) -> tuple[Array, Array]:
        if a.ndim == 0:
            return a, core.array(0, dtype=core.int64)
        idx = _arg(argfn, extreme)(a, dim, True)
        values = core.take_along_axis(a, idx, axis=dim)
        if not keepdim:
            values, idx = core.squeeze(values, dim), core.squeeze(idx, dim)
        return values, idx
    return lowering


lower(aten.max.dim)(_extreme_dim(core.max, core.argmax, "max"))
lower(aten.min.dim)(_extreme_dim(core.min, core.argmin, "min"))


def _bool_reduce(fn: Callable[..., Any]) -> Callable[..., Array]:
    def lowering(a: Array, dim: Dims | None = None, keepdim: bool = False) -> Array:
        out = fn(a if a.dtype == core.bool_ else a != 0, axis=_dims(dim, a.ndim), keepdims=keepdim)
        return out.astype(core.uint8) if a.dtype == core.uint8 else out
    return lowering


lower(aten.any.default, aten.any.dim, aten.any.dims)(_bool_reduce(core.any))
lower(aten.all.default, aten.all.dim, aten.all.dims)(_bool_reduce(core.all))


def _var_impl(a: Array, dims: Sequence[int], correction: Scalar, keepdim: bool) -> Array:
    if a.dtype not in _FLOATS:
        raise NotImplementedError("var of an integer tensor")
    n = 1
    for d in dims:
        n *= a.shape[d]
    mean = core.mean(a, axis=dims, keepdims=True)
    sq = core.sum(core.square(a - mean), axis=dims, keepdims=keepdim)
    return sq / max(0, n - correction)


@lower(aten.var.correction)
def _var(a: Array, dim: Dims | None = None, *, correction: Scalar | None = None, keepdim: bool = False) -> Array:
    return _var_impl(a, _dims(dim, a.ndim), 1 if correction is None else correction, keepdim)


@lower(aten.std.correction)
def _std(a: Array, dim: Dims | None = None, *, correction: Scalar | None = None, keepdim: bool = False) -> Array:
    return core.sqrt(_var(a, dim, correction=correction, keepdim=keepdim))


@lower(aten.var_mean.correction)
def _var_mean(a: Array, dim: Dims | None = None, *, correction: Scalar | None = None, keepdim: bool = False) -> tuple[Array, Array]:
    dims = _dims(dim, a.ndim)
    return (_var_impl(a, dims, 1 if correction is None else correction, keepdim),
            core.mean(a, axis=dims, keepdims=keepdim))


@lower(prims.sum.default)
def _p_sum(a: Array, dims: Sequence[int], *, output_dtype: torch.dtype | None = None) -> Array:
    out = core.sum(a, axis=list(dims))
    return out.astype(_dt(output_dtype)) if output_dtype is not None else out


@lower(prims.prod.default)
def _p_prod(a: Array, dims: Sequence[int], *, output_dtype: torch.dtype | None = None) -> Array:
    out = core.prod(a, axis=list(dims))
    return out.astype(_dt(output_dtype)) if output_dtype is not None else out


@lower(prims.amax.default)
def _p_amax(a: Array, dims: Sequence[int], *, output_dtype: torch.dtype | None = None) -> Array:
    return _extreme(core.max)(a, list(dims))


@lower(prims.amin.default)
def _p_amin(a: Array, dims: Sequence[int], *, output_dtype: torch.dtype | None = None) -> Array:
    return _extreme(core.min)(a, list(dims))


@lower(prims.var.default)
def _p_var(a: Array, dims: Sequence[int], correction: Scalar = 1, *, output_dtype: torch.dtype | None = None) -> Array:
    return _var_impl(a, list(dims), correction, False)


@lower(aten.logsumexp.default)
def _logsumexp(a: Array, dim: Dims, keepdim: bool = False) -> Array:
    a = _to_float(a)
    axes = _dims(dim, a.ndim)
    if a.size == 0:
        raise NotImplementedError("logsumexp of an empty tensor")
    return core.logsumexp(a, axis=axes, keepdims=keepdim) if axes else a


@lower(aten.cumsum.default)
def _cumsum(a: Array, dim: int, dtype: torch.dtype | None = None) -> Array:
    a = _acc(a, dtype)
    return core.cumsum(a, axis=dim % a.ndim) if a.ndim else a


@lower(aten.cumprod.default)
def _cumprod(a: Array, dim: int, dtype: torch.dtype | None = None) -> Array:
    a = _acc(a, dtype)
    return core.cumprod(a, axis=dim % a.ndim) if a.ndim else a


# -- sorting ------------------------------------------------------------------

def _descending_order(a: Array, axis: int) -> Array:
    """Indices sorting ``a`` descending along ``axis``, ties in index order, NaN first (torch's order)."""
    n = a.shape[axis]
    rev = [slice(None)] * a.ndim
    rev[axis] = slice(None, None, -1)
    order = core.argsort(a[tuple(rev)], axis=axis)[tuple(rev)]
    return (n - 1) - order


@lower(aten.sort.default, aten.sort.stable)
def _sort(a: Array, dim: int = -1, descending: bool = False, *, stable: bool | None = None) -> tuple[Array, Array]:
    if stable:
        raise NotImplementedError("stable sort")  # MLX does not document a stable sort
    if a.ndim == 0:
        return a, core.array(0, dtype=core.int64)
    axis = dim % a.ndim
    order = _descending_order(a, axis) if descending else core.argsort(a, axis=axis)
    return core.take_along_axis(a, order, axis=axis), order.astype(core.int64)


@lower(aten.topk.default)
def _topk(a: Array, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Array, Array]:
    if a.ndim == 0:
        return a, core.array(0, dtype=core.int64)
    axis = dim % a.ndim
    if k > a.shape[axis]:
        raise NotImplementedError("k larger than the dimension")  # torch raises
    order = _descending_order(a, axis) if largest else core.argsort(a, axis=axis)
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(0, k)
    order = order[tuple(idx)]
    return core.take_along_axis(a, order, axis=axis), order.astype(core.int64)


# -- linear algebra, indexing, nn ------------------------------------------------

#: torch's two spellings of a floating dtype in its matmul dtype errors ("BFloat16", "c10::BFloat16")
_MATMUL_NAMES = {core.float32: ("Float", "float"), core.float64: ("Double", "double"),
                 core.float16: ("Half", "c10::Half"), core.bfloat16: ("BFloat16", "c10::BFloat16")}


def _dtype_names(*arrays: Any, c10: bool = False) -> list:
    return [_MATMUL_NAMES.get(x.dtype, (str(_tdt(x.dtype)),) * 2)[c10] for x in arrays]


def _check_floating(a: Array, b: Array) -> None:
    if a.dtype not in _FLOATS or b.dtype not in _FLOATS:
        raise NotImplementedError("integer matmul")  # MLX multiplies floating arrays only: torch on the host


@lower(aten.mm.default)
def _mm(a: Array, b: Array) -> Array:
    if a.dtype != b.dtype:  # torch refuses mixed dtypes (CUDA too); promoting would hide the program's bug
        raise RuntimeError("expected m1 and m2 to have the same dtype, but got: {} != {}".format(*_dtype_names(a, b, c10=True)))
    _check_floating(a, b)
    return core.matmul(a, b)


@lower(aten.bmm.default)
def _bmm(a: Array, b: Array) -> Array:
    if a.dtype != b.dtype:
        raise RuntimeError("expected scalar type {} but found {}".format(*_dtype_names(a, b)))
    _check_floating(a, b)
    return core.matmul(a, b)


@lower(aten.addmm.default)
def _addmm(bias: Array, a: Array, b: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    if a.dtype != b.dtype:
        raise RuntimeError("mat1 and mat2 must have the same dtype, but got {} and {}".format(*_dtype_names(a, b)))
    if bias.dtype != b.dtype:
        raise RuntimeError("self and mat2 must have the same dtype, but got {} and {}".format(*_dtype_names(bias, b)))
    _check_floating(a, b)
    return _scaled_addmm(bias, a, b, beta, alpha)


def _scaled_addmm(bias: Array, a: Array, b: Array, beta: Scalar, alpha: Scalar) -> Array:
    if beta == 1 and alpha == 1:
        return core.addmm(bias, a, b)
    out = core.matmul(a, b)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out  # torch ignores bias (even NaN) when beta is 0
    return out + (bias * beta if beta != 1 else bias)


@lower(aten.baddbmm.default)
def _baddbmm(bias: Array, a: Array, b: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    if not bias.dtype == a.dtype == b.dtype:
        raise RuntimeError("Input dtypes must be the same, got: input {}, batch1: {}, batch2: {}".format(
            *_dtype_names(bias, a, b, c10=True)))
    _check_floating(a, b)
    return _scaled_addmm(bias, a, b, beta, alpha)


@lower(aten.cat.default, prims.cat.default)
def _cat(tensors: Sequence[Array], dim: int = 0) -> Array:
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    dt = result_dtype(*tensors)
    return core.concatenate([_cast(t, dt) for t in tensors], axis=dim % tensors[0].ndim)


@lower(aten.stack.default)
def _stack(tensors: Sequence[Array], dim: int = 0) -> Array:
    dt = result_dtype(*tensors)
    return core.stack([_cast(t, dt) for t in tensors], axis=dim % (tensors[0].ndim + 1))


def _index(index: Array, n: int) -> Array:
    """An index array with torch's negative-index meaning."""
    if index.dtype not in _INTS:
        raise NotImplementedError(f"index of dtype {index.dtype}")
    return core.where(index < 0, index + n, index)


@lower(aten.index_select.default)
def _index_select(a: Array, dim: int, index: Array) -> Array:
    if index.ndim > 1:
        raise NotImplementedError("index_select with a multi-dimensional index")  # torch raises
    if a.ndim == 0:
        return core.take(a.reshape(1), _index(index.reshape(-1), 1), axis=0).reshape(a.shape)
    return core.take(a, _index(index.reshape(-1), a.shape[dim]), axis=dim)


@lower(aten.embedding.default)
def _embedding(weight: Array, indices: Array, padding_idx: int = -1, scale_grad_by_freq: bool = False,
               sparse: bool = False) -> Array:
    return core.take(weight, _index(indices, weight.shape[0]), axis=0)


def _fit(a: Array, shape: Sequence[int], skip: int) -> Array:
    """``a`` cut to ``shape`` in every dim but ``skip`` (torch's gather/scatter read only index's extent)."""
    if tuple(a.shape) == tuple(shape):
        return a
    return a[tuple(slice(None) if d == skip else slice(0, n) for d, n in enumerate(shape))]


@lower(aten.gather.default)
def _gather(a: Array, dim: int, index: Array, sparse_grad: bool = False) -> Array:
    if index.size == 0:
        return core.zeros(index.shape, dtype=a.dtype)
    if a.ndim == 0 or index.ndim == 0:
        if a.ndim > 1 or index.ndim > 1:
            raise NotImplementedError("gather with mixed 0-d operands")
        return core.take(a.reshape(-1), _index(index.reshape(-1), a.size)).reshape(index.shape)
    dim %= a.ndim
    return core.take_along_axis(_fit(a, index.shape, dim), _index(index, a.shape[dim]), axis=dim)


def _scatter_positions(a: Array, dim: int, index: Array) -> tuple[Array, ...]:
    grids = []
    for d, n in enumerate(index.shape):
        shape = [1] * index.ndim
        shape[d] = n
        grids.append(core.broadcast_to(core.arange(n).reshape(shape), index.shape))
    grids[dim] = _index(index, a.shape[dim])
    return tuple(grids)


def _scatter_0d(fn: Callable[..., Any], a: Array, dim: int, index: Array, src: Array) -> Array:
    """scatter with 0-d operands, as 1-d ones."""
    if max(a.ndim, index.ndim, src.ndim if type(src) is _ARR else 0) > 1:
        raise NotImplementedError("scatter with mixed 0-d operands")
    flat_src = src.reshape(-1) if type(src) is _ARR else src
    return fn(a.reshape(-1), 0, index.reshape(-1), flat_src).reshape(a.shape)


@lower(aten.scatter_add.default)
def _scatter_add(a: Array, dim: int, index: Array, src: Array) -> Array:
    if index.size == 0:
        return core.array(a)
    if a.ndim == 0 or index.ndim == 0:
        return _scatter_0d(_scatter_add, a, dim, index, src)
    dim %= a.ndim
    return a.at[_scatter_positions(a, dim, index)].add(_fit(src, index.shape, -1).astype(a.dtype))


@lower(aten.scatter.value, aten.scatter.src)
def _scatter(a: Array, dim: int, index: Array, value: ArrayOrScalar) -> Array:
    if a.ndim == 0 or index.ndim == 0:
        return _scatter_0d(_scatter, a, dim, index, value)
    out = core.array(a)
    if index.size == 0:
        return out
    dim %= a.ndim
    update = _fit(value, index.shape, -1).astype(a.dtype) if type(value) is _ARR else value
    out[_scatter_positions(a, dim, index)] = update
    return out


def _advanced_index(a: Array, indices: Array) -> Array:
    if len(indices) > a.ndim:
        raise NotImplementedError("too many indices")
    idx: list = []
    masks = False
    for d, i in enumerate(indices):
        if i is None:
            idx.append(slice(None))
        elif i.dtype == core.bool_ or i.dtype == core.uint8:
            # a mask: its positions are data (read on the host, as CUDA synchronizes for them), the gather is MLX's
            if i.dtype == core.uint8 or i.ndim == 0 or tuple(i.shape) != tuple(a.shape[d:d + i.ndim]):
                raise NotImplementedError("this mask indexing")
            import numpy

            idx.extend(core.array(p.astype("int64")) for p in numpy.nonzero(numpy.asarray(i)))
            masks = True
        else:
            idx.append(_index(i, a.shape[d]))
    if masks and sum(1 for i in indices if i is not None) > 1:
        raise NotImplementedError("a mask combined with other indices")
    return tuple(idx)


@lower(aten._local_scalar_dense.default)
def _local_scalar_dense(a: Array) -> Scalar:
    return a.item()


@lower(prims.copy_strided.default)
def _copy_strided(a: Array, stride: Ints) -> Array:
    return core.array(a)


@lower(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index_tensor(a: Array, indices: Array) -> Array:
    return a[_advanced_index(a, indices)]


@lower(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(a: Array, indices: Array, values: Array, accumulate: bool = False) -> Array:
    idx = _advanced_index(a, indices)
    values = values.astype(a.dtype) if values.dtype != a.dtype else values
    if accumulate:
        return a.at[idx].add(values)
    out = core.array(a)
    out[idx] = values
    return out


@lower(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(a: Array, mask: Array, value: ArrayOrScalar) -> Array:
    value = value.astype(a.dtype) if type(value) is _ARR else core.array(value, dtype=a.dtype)
    return core.where(mask, value, a)


@lower(aten._softmax.default)
def _softmax(a: Array, dim: int, half_to_float: bool = False) -> Array:
    if half_to_float:
        a = a.astype(core.float32)
    if a.size == 0:
        return a
    if a.ndim == 0:
        return core.exp(a - a)
    return core.softmax(a, axis=dim, precise=True)


@lower(aten._log_softmax.default)
def _log_softmax(a: Array, dim: int, half_to_float: bool = False) -> Array:
    if half_to_float:
        a = a.astype(core.float32)
    if a.size == 0:
        return a
    if a.ndim == 0:
        return a - a
    if a.dtype in (core.float16, core.bfloat16):
        # torch's CPU kernel computes in float32 and rounds once, except that over the last dimension it
        # keeps the sum of exponentials, and then its log, in the input's dtype: the same roundings here
        half, f = a.dtype, a.astype(core.float32)
        m = core.max(f, axis=dim, keepdims=True)
        s = core.sum(core.exp(f - m), axis=dim, keepdims=True)
        if dim in (-1, a.ndim - 1):
            log_s = core.log(s.astype(half).astype(core.float32)).astype(half).astype(core.float32)
        else:
            log_s = core.log(s)
        return (f - m - log_s).astype(half)
    return a - core.logsumexp(a, axis=dim, keepdims=True)


@lower(aten.native_dropout.default)
def _native_dropout(a: Array, p: float, train: bool) -> tuple[Array, Array]:
    if not train or p == 0:
        return core.array(a), core.ones(a.shape, dtype=core.bool_)
    # torch's own CPU kernel on a host tensor of the same shape and dtype draws the mask: the generator
    # advances exactly as natively, so the same seed drops the same elements; applied here in MLX
    _, mask = torch.ops.aten.native_dropout.default(torch.ones(a.shape, dtype=_tdt(a.dtype)), p, train)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return (a * to_mlx(mask)) * scale, to_mlx(mask)


# -- convolution and pooling ---------------------------------------------------------

def _conv_core(x: Array, w: Array, stride: Ints, padding: Ints, dilation: Ints, groups: int) -> Array:
    n = x.ndim - 2
    # torch NC... / OI... -> MLX N...C / O...I
    to_last = [0, *range(2, n + 2), 1]
    out = core.conv_general(x.transpose(to_last), w.transpose(to_last), stride=list(stride),
                            padding=list(padding), kernel_dilation=list(dilation), groups=groups)
    return out.transpose([0, n + 1, *range(1, n + 1)])


def _conv_checks(x: Array, transposed: bool, padding: Ints) -> None:
    if transposed:
        raise NotImplementedError("transposed convolution")
    if x.ndim not in (3, 4, 5):
        raise NotImplementedError("convolution of an unbatched input")
    if x.dtype not in _FLOATS:
        raise NotImplementedError("integer convolution")


@lower(aten.convolution.default)
def _convolution(x: Array, w: Array, bias: Array | None, stride: Ints, padding: Ints, dilation: Ints, transposed: bool,
                 output_padding: Ints, groups: int) -> Array:
    _conv_checks(x, transposed, padding)
    out = _conv_core(x, w.astype(x.dtype), stride, padding, dilation, groups)
    if bias is not None:
        out = out + bias.reshape([1, -1] + [1] * (x.ndim - 2))
    return out


@lower(aten.convolution_backward.default)
def _convolution_backward(grad: Array, x: Array, w: Array, bias_sizes: Sequence[int] | None, stride: Ints, padding: Ints,
                          dilation: Ints, transposed: bool, output_padding: Ints, groups: int,
                          output_mask: Sequence[bool]) -> tuple[Array, Array, Array]:
    _conv_checks(x, transposed, padding)

    def conv(x_: Array, w_: Array) -> Array:
        return _conv_core(x_, w_, stride, padding, dilation, groups)

    _, (gx, gw) = core.vjp(conv, [x, w], [grad])
    gb = core.sum(grad, axis=[0, *range(2, grad.ndim)]) if output_mask[2] else None
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb)


def _pool_windows(x: Array, kernel: Sequence[int], stride: Ints, padding: Ints | None, pad_value: Scalar) -> list[Array]:
    """Every (kernel offset) slice of ``x`` padded: a list of arrays shaped like the output."""
    n = len(kernel)
    if padding and any(padding):
        pads = [(0, 0)] * (x.ndim - n) + [(p, p) for p in padding]
        x = core.pad(x, pads, constant_values=pad_value)
    spatial = x.shape[-n:]
    out = [(s - k) // st + 1 for s, k, st in zip(spatial, kernel, stride)]
    windows = []

    def rec(prefix: tuple[int, ...]) -> None:
        if len(prefix) == n:
            idx = [slice(None)] * (x.ndim - n) + [
                slice(o, o + st * (m - 1) + 1, st) for o, st, m in zip(prefix, stride, out)]
            windows.append(x[tuple(idx)])
            return
        for o in range(kernel[len(prefix)]):
            rec((*prefix, o))

    rec(())
    return windows


def _pool_args(kernel_size: Ints, stride: Ints, padding: Ints | int, n: int = 2) -> tuple[list[int], list[int], list[int]]:
    kernel = list(kernel_size) * (n if len(kernel_size) == 1 else 1)
    stride = list(stride) * (n if len(stride) == 1 else 1) if stride else kernel
    padding = list(padding) * (n if len(padding) == 1 else 1) if not isinstance(padding, int) else [padding] * n
    return kernel, stride, padding


def _pool_extent(size: int, k: int, st: int, p: int, ceil_mode: bool) -> tuple[int, int]:
    """torch's pooling output length, and the right padding that makes every window fit."""
    span = size + 2 * p - k
    out = (-(-span // st) if ceil_mode else span // st) + 1
    if ceil_mode and (out - 1) * st >= size + p:
        out -= 1  # the last window must start inside the input or its left padding
    return out, max(0, (out - 1) * st + k - (size + 2 * p))


def _avg_pool2d_fn(kernel_size: Ints, stride: Ints, padding: Ints | int, ceil_mode: bool, count_include_pad: bool,
                   divisor_override: int | None, spatial: Sequence[int]) -> Callable[..., Array]:
    kernel, stride, padding = _pool_args(kernel_size, stride, padding)
    extents = [_pool_extent(s, k, st, p, ceil_mode) for s, k, st, p in zip(spatial, kernel, stride, padding)]
    extra = [e for _, e in extents]
    divisor: ArrayOrScalar  # an int, or the per-window counts
    if divisor_override:
        divisor = divisor_override
    elif not any(extra) and (count_include_pad or not any(padding)):
        divisor = kernel[0] * kernel[1]
    else:
        # per-window element counts: torch counts the padded input (up to the left/right padding) or, without
        # count_include_pad, the input itself -- never the extra right padding ceil_mode adds
        if count_include_pad:
            ones = core.pad(core.ones([s + 2 * p for s, p in zip(spatial, padding)], dtype=core.float32),
                            [(0, e) for e in extra])
        else:
            ones = core.pad(core.ones(spatial, dtype=core.float32), [(p, p + e) for p, e in zip(padding, extra)])
        windows = _pool_windows(ones, kernel, stride, None, 0)
        divisor = windows[0]
        for w in windows[1:]:
            divisor = divisor + w

    def pool(x: Array) -> Array:
        xp = core.pad(x, [(0, 0)] * (x.ndim - 2) + [(p, p + e) for p, e in zip(padding, extra)])
        windows = _pool_windows(xp, kernel, stride, None, 0)
        total = windows[0]
        for w in windows[1:]:
            total = total + w
        return total / (divisor.astype(total.dtype) if type(divisor) is _ARR else divisor)
    return pool


@lower(aten.avg_pool2d.default)
def _avg_pool2d(x: Array, kernel_size: Ints, stride: Ints = (), padding: Ints | int = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: int | None = None) -> Array:
    if x.dtype not in _FLOATS:
        raise NotImplementedError("integer avg_pool2d")
    return _avg_pool2d_fn(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                          x.shape[-2:])(x)


@lower(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(grad: Array, x: Array, kernel_size: Ints, stride: Ints, padding: Ints, ceil_mode: bool,
                         count_include_pad: bool, divisor_override: int | None) -> Array:
    pool = _avg_pool2d_fn(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                          x.shape[-2:])
    _, (gx,) = core.vjp(pool, [x], [grad])
    return gx


# -- attention ------------------------------------------------------------------------

def _attention_scores(q: Array, k: Array, is_causal: bool, attn_mask: Array, scale: float | None) -> tuple[Array, float]:
    if q.ndim != k.ndim or q.shape[:-2] != k.shape[:-2]:
        raise NotImplementedError("attention with broadcast or grouped key/value heads")
    if q.dtype not in _FLOATS:
        raise NotImplementedError("integer attention")
    scale = (1.0 / math.sqrt(q.shape[-1])) if scale is None else scale
    s = core.matmul(q, core.swapaxes(k, -1, -2)) * scale
    neg_inf = core.array(-math.inf, dtype=s.dtype)
    if is_causal:
        length, source = q.shape[-2], k.shape[-2]
        s = core.where(core.tril(core.ones((length, source), dtype=core.bool_)), s, neg_inf)
    if attn_mask is not None:
        s = core.where(attn_mask, s, neg_inf) if attn_mask.dtype == core.bool_ else s + attn_mask.astype(s.dtype)
    return s, scale


def _attention_probs(s: Array, lse: Array) -> Array:
    # a row with every position masked: probabilities 0 (torch's flash kernel writes 0 there)
    dead = core.isinf(lse) & (lse < 0)
    return core.where(dead, core.array(0, dtype=s.dtype), core.exp(s - core.where(dead, 0, lse)))


@lower(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_flash(q: Array, k: Array, v: Array, dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask: Array = None,
                scale: float | None=None) -> tuple[Array, Array]:
    if dropout_p > 0:
        raise NotImplementedError("attention dropout (drawn by torch's generator on the host)")
    s, _ = _attention_scores(q, k, is_causal, attn_mask, scale)
    # half types accumulate in float32; float64 stays float64 (torch >= 2.14 sends float64 here, not to the math path)
    s32 = s.astype(_attention_accumulator(q))
    lse = core.logsumexp(s32, axis=-1, keepdims=True)
    p = _attention_probs(s32, lse).astype(q.dtype)
    return core.matmul(p, v), core.squeeze(lse, -1)


def _attention_accumulator(q: Array) -> Array:
    return core.float64 if q.dtype == core.float64 else core.float32


@lower(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_flash_backward(grad_out: Array, q: Array, k: Array, v: Array, out: Array, logsumexp: Array, dropout_p: float,
                         is_causal: bool, *,
                         attn_mask: Array = None, scale: float | None=None) -> tuple[Array, Array, Array]:
    if dropout_p > 0:
        raise NotImplementedError("attention dropout (drawn by torch's generator on the host)")
    s, scale = _attention_scores(q, k, is_causal, attn_mask, scale)
    acc = _attention_accumulator(q)
    p = _attention_probs(s.astype(acc), core.expand_dims(logsumexp.astype(acc), -1))
    go, o = grad_out.astype(acc), out.astype(acc)
    grad_v = core.matmul(core.swapaxes(p, -1, -2), go)
    dp = core.matmul(go, core.swapaxes(v.astype(acc), -1, -2))
    ds = p * (dp - core.sum(go * o, axis=-1, keepdims=True))
    grad_q = core.matmul(ds, k.astype(acc)) * scale
    grad_k = core.matmul(core.swapaxes(ds, -1, -2), q.astype(acc)) * scale
    return grad_q.astype(q.dtype), grad_k.astype(k.dtype), grad_v.astype(v.dtype)


@lower(aten.constant_pad_nd.default)
def _constant_pad_nd(a: Array, pad: Sequence[int], value: Scalar=0) -> Array:
    if len(pad) % 2 or len(pad) // 2 > a.ndim or any(p < 0 for p in pad):
        raise NotImplementedError("negative (cropping) or malformed padding")
    widths = [(0, 0)] * a.ndim
    for i in range(len(pad) // 2):
        widths[a.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if a.dtype not in _FLOATS and isinstance(value, float) and not value.is_integer():
        raise NotImplementedError("a fractional pad value for an integer tensor")
    return core.pad(a, widths, constant_values=core.array(value, dtype=a.dtype))


def _adaptive_fn(x: Array, output_size: Sequence[int]) -> Callable[..., Array]:
    n = len(output_size)
    spatial = x.shape[-n:]
    if any(o == 0 or s % o for s, o in zip(spatial, output_size)):
        raise NotImplementedError("adaptive pooling with windows of unequal sizes")
    kernel = [s // o for s, o in zip(spatial, output_size)]

    def pool(x_: Array) -> Array:
        windows = _pool_windows(x_, kernel, kernel, None, 0)
        total = windows[0]
        for w in windows[1:]:
            total = total + w
        return total / math.prod(kernel)
    return pool


@lower(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(x: Array, output_size: Sequence[int]) -> Array:
    if x.dtype not in _FLOATS:
        raise NotImplementedError("integer adaptive_avg_pool2d")
    return _adaptive_fn(x, list(output_size))(x)


@lower(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(grad: Array, x: Array) -> Array:
    pool = _adaptive_fn(x, list(grad.shape[-2:]))
    _, (gx,) = core.vjp(pool, [x], [grad])
    return gx


# -- normalization, losses and the backward kernels of training ---------------------------

def _norm_axes(x: Array, k: int) -> Array:
    return list(range(x.ndim - k, x.ndim))


@lower(aten.native_layer_norm.default)
def _native_layer_norm(x: Array, normalized_shape: Sequence[int], weight: Array | None, bias: Array | None,
                       eps: float) -> tuple[Array, Array, Array]:
    if x.dtype not in _FLOATS:
        raise NotImplementedError("layer_norm of an integer tensor")
    axes = _norm_axes(x, len(normalized_shape))
    xf = x if x.dtype in (core.float32, core.float64) else x.astype(core.float32)
    mean = core.mean(xf, axis=axes, keepdims=True)
    centered = xf - mean
    rstd = core.rsqrt(core.mean(core.square(centered), axis=axes, keepdims=True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    if xf is x:
        return out, mean, rstd
    return out.astype(x.dtype), mean.astype(x.dtype), rstd.astype(x.dtype)


@lower(aten.native_layer_norm_backward.default)
def _native_layer_norm_backward(grad: Array, x: Array, normalized_shape: Sequence[int], mean: Array, rstd: Array,
                                weight: Array | None, bias: Array | None,
                                output_mask: Sequence[bool]) -> tuple[Array, Array, Array]:
    if x.dtype not in _FLOATS:
        raise NotImplementedError("layer_norm of an integer tensor")
    acc = core.float32 if x.dtype != core.float64 else x.dtype
    axes = _norm_axes(x, len(normalized_shape))
    lead = list(range(x.ndim - len(normalized_shape)))
    g, xf, mean, rstd = grad.astype(acc), x.astype(acc), mean.astype(acc), rstd.astype(acc)
    xhat = (xf - mean) * rstd
    gx = g * weight.astype(acc) if weight is not None else g
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = (rstd * (gx - core.mean(gx, axis=axes, keepdims=True)
                              - xhat * core.mean(gx * xhat, axis=axes, keepdims=True))).astype(x.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = core.sum(g * xhat, axis=lead).astype(weight.dtype)
    if output_mask[2] and bias is not None:
        grad_bias = core.sum(g, axis=lead).astype(bias.dtype)
    return grad_input, grad_weight, grad_bias


def _channel(v: Array, ndim: int) -> Array:
    return v.reshape([1, -1] + [1] * (ndim - 2))


def _bn_checks(x: Array, *params: Any) -> None:
    if x.dtype not in _FLOATS or x.ndim < 2:
        raise NotImplementedError("batch_norm of this dtype or rank")
    # parameters of the input's dtype, or float32 ones with a half input (autocast: torch's "mixed type" kernel)
    mixed = core.float32 if x.dtype in (core.float16, core.bfloat16) else x.dtype
    if any(p is not None and p.dtype not in (x.dtype, mixed) for p in params):
        raise NotImplementedError("batch_norm with mixed dtypes")


def _bn_dtypes(xa: Array, params: Sequence[Array | None]) -> tuple:
    """(the dtype batch norm computes in, the dtype of its statistics) as torch's kernels have them: a half input
    in float32 (opmath, rounded once); statistics in the parameters' dtype (float32 under autocast, where the
    input is half and the parameters are not), else the input's."""
    compute = core.float32 if xa.dtype in (core.float16, core.bfloat16) else xa.dtype
    stats = next((a.dtype for a in params if a is not None), xa.dtype)
    return compute, stats


def _as(a: Array, dtype: DType) -> Array:  # None (an absent optional tensor) passes through
    return a if a is None or a.dtype == dtype else a.astype(dtype)


def batch_norm_arrays(xa: Array, wa: Array, ba: Array, rm: Array, rv: Array, training: bool, momentum: float,
                      eps: float) -> tuple[Array, Array, Array, Array, Array]:
    """(out, save_mean, save_invstd, new running mean, new running var) of batch norm on arrays, computed and
    rounded in torch's dtypes (:func:`_bn_dtypes`)."""
    _bn_checks(xa, wa, ba, rm, rv)
    compute, stats = _bn_dtypes(xa, (wa, rm))
    x = _as(xa, compute)
    axes = [0, *range(2, xa.ndim)]
    new_rm, new_rv = rm, rv
    if training:
        mean = core.mean(x, axis=axes)
        var = core.mean(core.square(x - _channel(mean, x.ndim)), axis=axes)
        invstd = core.rsqrt(var + eps)
        if rm is not None:
            n = xa.size // xa.shape[1]
            new_rm = _as((1 - momentum) * _as(rm, compute) + momentum * mean, rm.dtype)
            new_rv = _as((1 - momentum) * _as(rv, compute) + momentum * var * (n / max(n - 1, 1)), rv.dtype)
        save_mean, save_invstd = _as(mean, stats), _as(invstd, stats)
    else:
        if rm is None:
            raise NotImplementedError("batch_norm in eval mode without running statistics")
        mean, invstd = _as(rm, compute), core.rsqrt(_as(rv, compute) + eps)
        save_mean = save_invstd = core.zeros((0,), dtype=stats)
    scale = invstd if wa is None else invstd * _as(wa, compute)
    out = (x - _channel(mean, x.ndim)) * _channel(scale, x.ndim)
    if ba is not None:
        out = out + _channel(_as(ba, compute), x.ndim)
    return _as(out, xa.dtype), save_mean, save_invstd, new_rm, new_rv


@lower(aten._native_batch_norm_legit_functional.default)
def _bn_functional(x: Array, weight: Array | None, bias: Array | None, running_mean: Array | None, running_var: Array | None,
                   training: bool, momentum: float, eps: float) -> Array:
    return batch_norm_arrays(x, weight, bias, running_mean, running_var, training, momentum, eps)


@lower(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(x: Array, weight: Array | None, bias: Array | None, running_mean: Array | None, running_var: Array | None,
                    momentum: float, eps: float) -> Array:
    return batch_norm_arrays(x, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@lower(aten.native_batch_norm_backward.default)
def _native_batch_norm_backward(grad: Array, x: Array, weight: Array | None, running_mean: Array | None,
                                running_var: Array | None, save_mean: Array, save_invstd: Array, train: bool, eps: float,
                                output_mask: Sequence[bool]) -> tuple[Array, Array, Array]:
    _bn_checks(x, weight, running_mean, running_var)
    compute, stats = _bn_dtypes(x, (weight, running_mean))
    axes = [0, *range(2, x.ndim)]
    if train:
        mean, invstd = _as(save_mean, compute), _as(save_invstd, compute)
    else:
        mean, invstd = _as(running_mean, compute), core.rsqrt(_as(running_var, compute) + eps)
    xc, g = _as(x, compute), _as(grad, compute)
    xhat = (xc - _channel(mean, x.ndim)) * _channel(invstd, x.ndim)
    grad_bias = core.sum(g, axis=axes)
    grad_weight = core.sum(g * xhat, axis=axes)
    scale = invstd if weight is None else invstd * _as(weight, compute)
    grad_input = None
    if output_mask[0]:
        if train:
            n = x.size // x.shape[1]
            grad_input = _channel(scale, x.ndim) * (g - _channel(grad_bias / n, x.ndim)
                                                    - xhat * _channel(grad_weight / n, x.ndim))
        else:
            grad_input = g * _channel(scale, x.ndim)
        grad_input = _as(grad_input, x.dtype)
    return (grad_input, _as(grad_weight, stats) if output_mask[1] else None,
            _as(grad_bias, stats) if output_mask[2] else None)


@lower(aten._softmax_backward_data.default)
def _softmax_backward_data(grad: Array, output: Array, dim: int, input_dtype: torch.dtype) -> Array:
    out = output * (grad - core.sum(grad * output, axis=dim, keepdims=True))
    return out.astype(_dt(input_dtype))


@lower(aten._log_softmax_backward_data.default)
def _log_softmax_backward_data(grad: Array, output: Array, dim: int, input_dtype: torch.dtype) -> Array:
    out = grad - core.exp(output) * core.sum(grad, axis=dim, keepdims=True)
    return out.astype(_dt(input_dtype))


@lower(aten.gelu_backward.default)
def _gelu_backward(grad: Array, x: Array, approximate: str = "none") -> Array:
    if x.dtype not in _FLOATS:
        raise NotImplementedError("gelu backward of an integer tensor")
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = core.tanh(k * (x + c * x * x * x))
        return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x))
    cdf = 0.5 * (1 + core.erf(x * (1 / math.sqrt(2))))
    pdf = core.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
    return grad * (cdf + x * pdf)


@lower(aten.threshold_backward.default)
def _threshold_backward(grad: Array, x: Array, threshold: Scalar) -> Array:
    return core.where(x <= threshold, core.array(0, dtype=grad.dtype), grad)


def _nll_parts(x: Array, target: Array, weight: Array | None, ignore_index: int) -> tuple[Array, Array, Array]:
    if x.ndim not in (1, 2) or x.dtype not in _FLOATS:
        raise NotImplementedError("nll_loss of this rank")
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    t = target.reshape(-1)
    valid = t != ignore_index
    safe = core.where(valid, t, 0)
    w = core.take(weight, safe) if weight is not None else core.ones(t.shape, dtype=x.dtype)
    w = core.where(valid, w, core.array(0, dtype=w.dtype)).astype(x.dtype)
    return x2, safe, w


@lower(aten.nll_loss_forward.default)
def _nll_loss_forward(x: Array, target: Array, weight: Array | None, reduction: int, ignore_index: int) -> tuple[Array, Array]:
    x2, safe, w = _nll_parts(x, target, weight, ignore_index)
    picked = -core.take_along_axis(x2, safe.reshape(-1, 1), axis=1).reshape(-1) * w
    total = core.sum(w)
    if reduction == 0:  # none
        return (picked.reshape(()) if x.ndim == 1 else picked), core.array(0, dtype=x.dtype)
    if reduction == 1:  # mean
        return core.sum(picked) / total, total
    return core.sum(picked), total


@lower(aten.nll_loss_backward.default)
def _nll_loss_backward(grad: Array, x: Array, target: Array, weight: Array | None, reduction: int, ignore_index: int,
                       total_weight: Array) -> Array:
    x2, safe, w = _nll_parts(x, target, weight, ignore_index)
    g = grad.reshape(-1) if reduction == 0 else core.broadcast_to(grad.reshape(1), w.shape)
    if reduction == 1:
        g = g / total_weight
    rows = core.arange(x2.shape[0])
    out = core.zeros(x2.shape, dtype=x.dtype).at[rows, safe].add(-(w * g).astype(x.dtype))
    return out.reshape(x.shape)


@lower(aten.embedding_dense_backward.default)
def _embedding_dense_backward(grad: Array, indices: Array, num_weights: int, padding_idx: int, scale_grad_by_freq: bool) -> Array:
    if scale_grad_by_freq:
        raise NotImplementedError("embedding backward scaled by frequency")
    d = grad.shape[-1]
    flat = indices.reshape(-1)
    g = grad.reshape(-1, d)
    if padding_idx >= 0:
        g = core.where(core.expand_dims(flat == padding_idx, 1), core.array(0, dtype=g.dtype), g)
    return core.zeros((num_weights, d), dtype=grad.dtype).at[flat].add(g)


# -- factories (they reach MLX inside captured graphs: torch.compile(backend="mlx")) --------------------

def _factory_dtype(dtype: torch.dtype | None, *values: Any) -> DType:
    if dtype is not None:
        return _dt(dtype)
    if all(isinstance(v, (bool, int)) for v in values):
        return core.int64
    return _dt(torch.get_default_dtype())


@lower(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(*args: Any, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
            device: torch.device | str | None = None, pin_memory: bool | None = None) -> Array:
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    dt = _factory_dtype(dtype, start, end, step)
    if dt in _FLOATS:
        n = max(0, math.ceil((end - start) / step))
        return (core.arange(n, dtype=core.float32) * step + start).astype(dt) if n else core.zeros((0,), dtype=dt)
    return core.arange(start, end, step, dtype=dt)


@lower(aten.full.default)
def _full(size: Sequence[int], fill_value: Scalar, *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
          device: torch.device | str | None = None, pin_memory: bool | None = None) -> Array:
    return core.full(tuple(size), fill_value, dtype=_factory_dtype(dtype, fill_value))


@lower(aten.zeros.default, aten.empty.memory_format)
def _zeros(size: Sequence[int], *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
           device: torch.device | str | None = None, pin_memory: bool | None = None,
           memory_format: torch.memory_format | None = None) -> Array:
    return core.zeros(tuple(size), dtype=_factory_dtype(dtype, 0.0))


@lower(aten.ones.default)
def _ones(size: Sequence[int], *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
          device: torch.device | str | None = None, pin_memory: bool | None = None) -> Array:
    return core.ones(tuple(size), dtype=_factory_dtype(dtype, 0.0))


@lower(aten.empty_strided.default)
def _empty_strided(size: Sequence[int], stride: Ints, *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
                   device: torch.device | str | None = None, pin_memory: bool | None = None) -> Array:
    return core.zeros(tuple(size), dtype=_factory_dtype(dtype, 0.0))


@lower(aten.scalar_tensor.default)
def _scalar_tensor(value: Scalar, *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
                   device: torch.device | str | None = None, pin_memory: bool | None = None) -> Array:
    return core.array(value, dtype=_factory_dtype(dtype, 0.0))


@lower(prims.iota.default)
def _iota(length: int, *, start: int, step: int, dtype: torch.dtype, device: torch.device | str | None,
          requires_grad: bool) -> Array:
    return core.arange(start, start + length * step, step, dtype=_dt(dtype)) if length else core.zeros((0,), _dt(dtype))


# -- multi-output views (in captured graphs; eager dispatch makes them aliasing views itself) ----------

@lower(aten.split_with_sizes.default)
def _split_with_sizes(a: Array, split_sizes: Sequence[int], dim: int = 0) -> Array:
    dim %= a.ndim
    out, start = [], 0
    for n in split_sizes:
        out.append(_slice(a, dim, start, start + n))
        start += n
    return out


@lower(aten.split.Tensor)
def _split(a: Array, split_size: int, dim: int = 0) -> Array:
    n = a.shape[dim % a.ndim]
    return _split_with_sizes(a, [min(split_size, n - s) for s in range(0, n, split_size)] or [0], dim)


@lower(aten.unbind.int)
def _unbind(a: Array, dim: int = 0) -> list[Array]:
    dim %= a.ndim
    return [_select(a, dim, i) for i in range(a.shape[dim])]


@lower(aten.diagonal.default)
def _diagonal(a: Array, offset: int=0, dim1: int=0, dim2: int=1) -> Array:
    return core.diagonal(a, offset, dim1 % a.ndim, dim2 % a.ndim)


def _max_pool2d_parts(x: Array, kernel_size: Ints, stride: Ints, padding: Ints | int, dilation: Ints,
                      ceil_mode: bool) -> tuple[Array, Array]:
    kernel, stride, padding = _pool_args(kernel_size, stride, padding)
    if any(d != 1 for d in (list(dilation) or [1])):
        raise NotImplementedError("dilated max pooling")
    if x.dtype not in _FLOATS:
        raise NotImplementedError("integer max pooling")
    spatial = x.shape[-2:]
    extents = [_pool_extent(sz, k, st, p, ceil_mode) for sz, k, st, p in zip(spatial, kernel, stride, padding)]
    pads = [(p, p + e) for p, (_, e) in zip(padding, extents)]
    xp = core.pad(x, [(0, 0)] * (x.ndim - 2) + pads, constant_values=core.array(-math.inf, dtype=x.dtype))
    windows = core.stack(_pool_windows(xp, kernel, stride, None, 0), axis=0)
    out_h, out_w = windows.shape[-2:]
    # the flat input position (h * W + w) of every window element, as torch's indices
    oh = core.arange(out_h).reshape(-1, 1) * stride[0] - padding[0]
    ow = core.arange(out_w).reshape(1, -1) * stride[1] - padding[1]
    positions = core.stack([(oh + i) * spatial[1] + (ow + j) for i in range(kernel[0]) for j in range(kernel[1])])
    return windows, positions


@lower(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(x: Array, kernel_size: Ints, stride: Ints = (), padding: Ints | int = 0, dilation: Ints = (1,),
                             ceil_mode: bool = False) -> tuple[Array, Array]:
    windows, positions = _max_pool2d_parts(x, kernel_size, stride, padding, [dilation] if isinstance(dilation, int)
                                           else dilation, ceil_mode)
    # the first maximum of each window (NaN counts as the maximum, as in torch)
    key = core.where(core.isnan(windows), core.array(math.inf, dtype=windows.dtype), windows)
    best = core.argmax(key, axis=0)
    values = core.take_along_axis(windows, core.expand_dims(best, 0), axis=0)[0]
    lead = [1] * (x.ndim - 2)
    idx = core.take_along_axis(core.broadcast_to(positions.reshape([positions.shape[0], *lead, *positions.shape[1:]]),
                                                 windows.shape), core.expand_dims(best, 0), axis=0)[0]
    return values, idx.astype(core.int64)


@lower(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_with_indices_backward(grad: Array, x: Array, kernel_size: Ints, stride: Ints, padding: Ints, dilation: Ints,
                                      ceil_mode: bool, indices: Array) -> Array:
    lead = x.shape[:-2]
    plane = x.shape[-2] * x.shape[-1]
    rows = math.prod(lead)
    flat_idx = indices.reshape(rows, -1)
    row_ids = core.broadcast_to(core.arange(rows).reshape(-1, 1), flat_idx.shape)
    out = core.zeros((rows, plane), dtype=grad.dtype).at[row_ids, flat_idx].add(grad.reshape(rows, -1))
    return out.reshape(x.shape)


# half-precision ops computed in float32 and rounded once, as torch's kernels do (see opmath.py)
from .opmath import apply as _apply_opmath  # noqa: E402 -- wraps the table built above

_apply_opmath(LOWERINGS)


def run_on_arrays(op: OpOverload, args: tuple, kwargs: dict) -> Array:
    """View op ``op`` on MLX arrays (``args[0]`` one): its lowering, else (a view op that reinterprets data:
    ``view(dtype)``, ``view_as_real`` ...) torch on the host, counted."""
    lowering = LOWERINGS.get(op)
    if lowering is not None:
        return lowering(*args, **kwargs)
    note_fallback(str(op))
    return to_mlx(op(from_mlx(args[0], copy=True), *args[1:], **kwargs).contiguous())
