"""The ATen-op -> MLX lowering table used by :mod:`torchdevice_mlx.tensor`.

Each lowering takes MLX arrays where the op takes tensors (other arguments
unchanged) and returns MLX arrays. Ops missing here are decomposed by torch's
decomposition table into ones present, or fall back to the host.
:data:`RANDOM_OPS` always run on the host with torch's CPU generator, so a
seed draws the same numbers as torch on CPU.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ._mlx import mx

aten = torch.ops.aten
LOWERINGS: dict = {}

RANDOM_OPS = {
    aten.native_dropout.default, aten.bernoulli.default, aten.bernoulli.p, aten.bernoulli_.float,
    aten.bernoulli_.Tensor, aten.rand_like.default, aten.randn_like.default, aten.normal_.default,
    aten.uniform_.default, aten.randint_like.default, aten.randint_like.low_dtype,
    aten.exponential_.default, aten.multinomial.default, aten.randperm.default,
}

#: Ops whose saved outputs feed a host backward kernel, so their forward must be torch's own
#: (the decomposition's logsumexp is not what the flash backward expects): run on the host.
HOST_OPS = {aten._scaled_dot_product_flash_attention_for_cpu.default}


def lower(*ops) -> Callable:
    def register(fn: Callable) -> Callable:
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return register


_m = mx  # short name used throughout the table


def _dt(dtype):
    from .tensor import to_mx_dtype

    return to_mx_dtype(dtype)


def _is_float(a) -> bool:
    return _m().issubdtype(a.dtype, _m().floating)


def _arr(x, like=None):
    core = _m()
    if isinstance(x, core.array):
        return x
    return core.array(x) if like is None else core.array(x, dtype=like.dtype)


def _dims(dim, ndim):
    if ndim == 0:  # torch accepts dim 0/-1 on a 0-d tensor
        return []
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return [d % ndim if ndim else 0 for d in dim]


# -- elementwise ------------------------------------------------------------

def _scalar_ok(a, b):
    """torch's type promotion for tensor (op) python-scalar: keep the tensor's dtype class."""
    core = _m()
    if isinstance(b, bool):
        return b
    if isinstance(b, float) and isinstance(a, core.array) and not _is_float(a):
        return core.array(b, dtype=core.float32)
    return b


@lower(aten.add.Tensor, aten.add.Scalar)
def _add(a, b, alpha=1):
    b = _scalar_ok(a, b)
    if alpha != 1:
        b = b * alpha
    return _m().add(a, b)


@lower(aten.sub.Tensor, aten.sub.Scalar)
def _sub(a, b, alpha=1):
    b = _scalar_ok(a, b)
    if alpha != 1:
        b = b * alpha
    return _m().subtract(a, b)


@lower(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(a, b, alpha=1):
    return _m().subtract(b, a * alpha if alpha != 1 else a)


@lower(aten.mul.Tensor, aten.mul.Scalar)
def _mul(a, b):
    return _m().multiply(a, _scalar_ok(a, b))


@lower(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    core = _m()
    a = a if _is_float(a) else a.astype(core.float32)
    return core.divide(a, b)


@lower(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, rounding_mode=None):
    core = _m()
    if rounding_mode is None:
        return _div(a, b)
    q = core.divide(a.astype(core.float32) if not _is_float(a) else a, b)
    q = core.floor(q) if rounding_mode == "floor" else core.where(q < 0, core.ceil(q), core.floor(q))
    return q.astype(a.dtype) if not _is_float(a) else q


def _unary(op, name):
    def fn(a):
        return getattr(_m(), name)(a)
    LOWERINGS[op] = fn


for _op, _name in [
    (aten.neg.default, "negative"), (aten.exp.default, "exp"), (aten.log.default, "log"),
    (aten.sqrt.default, "sqrt"), (aten.rsqrt.default, "rsqrt"), (aten.tanh.default, "tanh"),
    (aten.sigmoid.default, "sigmoid"), (aten.abs.default, "abs"), (aten.sin.default, "sin"),
    (aten.cos.default, "cos"), (aten.erf.default, "erf"), (aten.log1p.default, "log1p"),
    (aten.expm1.default, "expm1"), (aten.reciprocal.default, "reciprocal"),
    (aten.floor.default, "floor"), (aten.ceil.default, "ceil"), (aten.sign.default, "sign"),
    (aten.logical_not.default, "logical_not"), (aten.square.default, "square"),
]:
    _unary(_op, _name)


@lower(aten.relu.default)
def _relu(a):
    return _m().maximum(a, _m().array(0, dtype=a.dtype))


@lower(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)
def _pow(a, b):
    return _m().power(a, _scalar_ok(a, b))


@lower(aten.pow.Scalar)
def _pow_s(a, b):
    return _m().power(_m().array(a, dtype=b.dtype), b)


@lower(aten.maximum.default)
def _maximum(a, b):
    return _m().maximum(a, b)


@lower(aten.minimum.default)
def _minimum(a, b):
    return _m().minimum(a, b)


@lower(aten.where.self)
def _where(c, a, b):
    return _m().where(c, a, b)


for _op, _name in [("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                   ("gt", "greater"), ("ge", "greater_equal")]:
    def _cmp(a, b, _name=_name):
        return getattr(_m(), _name)(a, b)
    LOWERINGS[getattr(aten, _op).Tensor] = _cmp
    LOWERINGS[getattr(aten, _op).Scalar] = _cmp

for _op, _name in [("logical_and", "logical_and"), ("logical_or", "logical_or"),
                   ("bitwise_and", "bitwise_and"), ("bitwise_or", "bitwise_or")]:
    LOWERINGS[getattr(aten, _op).default if _op.startswith("logical") else getattr(aten, _op).Tensor] = (
        lambda a, b, _name=_name: getattr(_m(), _name)(a, b))


@lower(aten.clamp.default)
def _clamp(a, min=None, max=None):
    core = _m()
    if min is not None:
        a = core.maximum(a, _m().array(min, dtype=a.dtype))
    if max is not None:
        a = core.minimum(a, _m().array(max, dtype=a.dtype))
    return a


@lower(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(a, b, w):
    return a + w * (b - a)


@lower(aten.addcmul.default)
def _addcmul(a, t1, t2, value=1):
    return a + value * t1 * t2


@lower(aten.addcdiv.default)
def _addcdiv(a, t1, t2, value=1):
    return a + value * t1 / t2


# -- copies, casts, factories -----------------------------------------------

@lower(aten._to_copy.default)
def _to_copy(a, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if device is not None and torch.device(device).type != "cpu":
        raise NotImplementedError(f"MLXTensor cannot move to {device}")
    return a.astype(_dt(dtype)) if dtype is not None else _m().array(a)


@lower(aten.clone.default)
def _clone(a, memory_format=None):
    return _m().array(a)


@lower(aten.lift_fresh.default)
def _lift(a):
    return a


def _like(value):
    def fn(a, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        dt = _dt(dtype) if dtype is not None else a.dtype
        return _m().full(a.shape, value, dtype=dt)
    return fn


LOWERINGS[aten.zeros_like.default] = _like(0)
LOWERINGS[aten.ones_like.default] = _like(1)
LOWERINGS[aten.empty_like.default] = _like(0)


@lower(aten.full_like.default)
def _full_like(a, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _m().full(a.shape, fill_value, dtype=_dt(dtype) if dtype is not None else a.dtype)


@lower(aten.fill.Scalar, aten.fill.Tensor)
def _fill(a, value):
    return _m().full(a.shape, value, dtype=a.dtype)


@lower(aten.new_zeros.default, aten.new_ones.default, aten.new_empty.default, aten.new_full.default)
def _new(a, size, *rest, dtype=None, layout=None, device=None, pin_memory=None):
    value = rest[0] if rest else 0
    return _m().full(tuple(size), value, dtype=_dt(dtype) if dtype is not None else a.dtype)


LOWERINGS[aten.new_ones.default] = lambda a, size, dtype=None, layout=None, device=None, pin_memory=None: (
    _m().ones(tuple(size), dtype=_dt(dtype) if dtype is not None else a.dtype))


# -- views (aliasing handled in tensor.py) -----------------------------------

@lower(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default)
def _view(a, size, *stride):
    return a.reshape(tuple(size))


@lower(aten.alias.default, aten.detach.default)
def _alias(a):
    return a


@lower(aten.unsqueeze.default)
def _unsqueeze(a, dim):
    return _m().expand_dims(a, dim % (a.ndim + 1))


@lower(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(a, dim=None):
    dims = [d for d in _dims(dim, a.ndim) if a.shape[d] == 1] if a.ndim else []
    return _m().squeeze(a, dims) if dims else a


@lower(aten.t.default)
def _t(a):
    return a.T if a.ndim == 2 else a


@lower(aten.transpose.int)
def _transpose(a, d0, d1):
    return _m().swapaxes(a, d0, d1) if a.ndim else a


@lower(aten.permute.default)
def _permute(a, dims):
    return _m().transpose(a, [d % a.ndim for d in dims])


@lower(aten.expand.default)
def _expand(a, size, implicit=False):
    lead = len(size) - a.ndim
    shape = [a.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return _m().broadcast_to(a, shape)


@lower(aten.slice.Tensor)
def _slice(a, dim=0, start=None, end=None, step=1):
    n = a.shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    start, end = (start + n if start < 0 else start), (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    idx = [slice(None)] * a.ndim
    idx[dim] = slice(start, max(start, end), step)
    return a[tuple(idx)]


@lower(aten.select.int)
def _select(a, dim, index):
    idx = [slice(None)] * a.ndim
    idx[dim] = index
    return a[tuple(idx)]


# -- reductions -------------------------------------------------------------

@lower(aten.sum.dim_IntList, aten.sum.default)
def _sum(a, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        a = a.astype(_dt(dtype))
    elif not _is_float(a):
        a = a.astype(_m().int64)
    return _m().sum(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


@lower(aten.mean.dim, aten.mean.default)
def _mean(a, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        a = a.astype(_dt(dtype))
    return _m().mean(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


@lower(aten.amax.default)
def _amax(a, dim=(), keepdim=False):
    return _m().max(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


@lower(aten.amin.default)
def _amin(a, dim=(), keepdim=False):
    return _m().min(a, axis=_dims(dim, a.ndim), keepdims=keepdim)


@lower(aten.argmax.default)
def _argmax(a, dim=None, keepdim=False):
    core = _m()
    if dim is None:
        return core.argmax(a.reshape(-1)).astype(core.int64)
    return core.argmax(a, axis=dim, keepdims=keepdim).astype(core.int64)


@lower(aten.var.correction)
def _var(a, dim=None, correction=None, keepdim=False):
    ddof = 1 if correction is None else correction
    return _m().var(a, axis=_dims(dim, a.ndim), keepdims=keepdim, ddof=int(ddof))


# -- linear algebra, nn ------------------------------------------------------

@lower(aten.mm.default, aten.bmm.default)
def _mm(a, b):
    return _m().matmul(a, b)


@lower(aten.addmm.default)
def _addmm(bias, a, b, beta=1, alpha=1):
    core = _m()
    out = core.matmul(a, b)
    if alpha != 1:
        out = out * alpha
    return out + (bias * beta if beta != 1 else bias)


@lower(aten.cat.default)
def _cat(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    return _m().concatenate(list(tensors), axis=dim % tensors[0].ndim)


@lower(aten.stack.default)
def _stack(tensors, dim=0):
    return _m().stack(list(tensors), axis=dim % (tensors[0].ndim + 1))


@lower(aten.index_select.default)
def _index_select(a, dim, index):
    return _m().take(a, index, axis=dim)


@lower(aten.embedding.default)
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _m().take(weight, indices, axis=0)


@lower(aten.gather.default)
def _gather(a, dim, index, sparse_grad=False):
    return _m().take_along_axis(a, index, axis=dim)


@lower(aten._softmax.default)
def _softmax(a, dim, half_to_float=False):
    return _m().softmax(a, axis=dim, precise=True)


@lower(aten._log_softmax.default)
def _log_softmax(a, dim, half_to_float=False):
    return a - _m().logsumexp(a, axis=dim, keepdims=True)


@lower(aten.convolution.default)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    core = _m()
    if transposed or x.ndim != 4:
        raise NotImplementedError("only 2-d non-transposed convolution is lowered")
    # torch NCHW / OIHW -> MLX NHWC / OHWI
    out = core.conv2d(x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), stride=tuple(stride),
                      padding=tuple(padding), dilation=tuple(dilation), groups=groups)
    if bias is not None:
        out = out + bias
    return out.transpose(0, 3, 1, 2)


# -- prims that torch's decompositions produce --------------------------------

prims = torch.ops.prims


@lower(prims.where.default)
def _p_where(c, a, b):
    return _m().where(c, a, b)


@lower(prims.broadcast_in_dim.default)
def _p_broadcast(a, shape, broadcast_dimensions):
    shape = list(shape)
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        expanded[dst] = a.shape[src]
    return _m().broadcast_to(a.reshape(expanded), shape)


@lower(prims.sum.default)
def _p_sum(a, dims, *, output_dtype=None):
    out = _m().sum(a, axis=list(dims))
    return out.astype(_dt(output_dtype)) if output_dtype is not None else out


@lower(prims.var.default)
def _p_var(a, dims, correction=1, *, output_dtype=None):
    return _m().var(a, axis=list(dims), ddof=int(correction))


@lower(prims.div.default)
def _p_div(a, b):
    core = _m()
    if _is_float(a) if isinstance(a, core.array) else isinstance(a, float):
        return core.divide(a, b)
    q = core.divide(a, b)
    return core.where(q < 0, core.ceil(q), core.floor(q)).astype(a.dtype)


@lower(aten.copy.default)
def _copy(a, src, non_blocking=False):
    return _m().broadcast_to(src, a.shape).astype(a.dtype)


@lower(aten.scatter_add.default)
def _scatter_add(a, dim, index, src):
    return _scatter_add_impl(a, dim, index, src)


def _scatter_add_impl(a, dim, index, src):
    core = _m()
    src = src[tuple(slice(0, n) for n in index.shape)]
    grids = list(core.meshgrid(*[core.arange(n) for n in index.shape], indexing="ij"))
    grids[dim] = index
    return a.at[tuple(grids)].add(src)


@lower(aten.scatter.value)
def _scatter_value(a, dim, index, value):
    core = _m()
    grids = list(core.meshgrid(*[core.arange(n) for n in index.shape], indexing="ij"))
    grids[dim] = index
    out = core.array(a)
    out[tuple(grids)] = value
    return out
