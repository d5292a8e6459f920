"""MLX-backed torch tensors: :class:`MLXTensor` and its ATen dispatch (the plugin's public face).

An :class:`MLXTensor` is a torch wrapper subclass (``_make_wrapper_subclass``)
whose data is an ``mlx.core.array``; every ATen op reaching it goes through
``__torch_dispatch__`` (below autograd, so backward and optimizers work
unchanged): lowered to MLX where a lowering exists, else decomposed by torch,
else run on the host with torch (a counted, logged fallback). The tensor reports
device ``cpu`` to torch; views keep torch's strides and alias their base; MLX
evaluates lazily, and :func:`evaluate_pending` evaluates every pending tensor.

The implementation, lowest layer first (each module's docstring details its part):

- :mod:`torchdevice_mlx.conversion`: fallback counts, dtype maps, host <-> MLX copies,
  pending-evaluation tracking ("Evaluation");
- :mod:`torchdevice_mlx.views`: view geometry (torch's strides), reading views from their base,
  :func:`write` ("Aliasing and strides");
- :mod:`torchdevice_mlx.mlxtensor`: the :class:`MLXTensor` class ("Device identity");
- :mod:`torchdevice_mlx.dispatch`: :func:`dispatch` (the routing of an op: lowering, host random ops,
  decomposition, host fallback), making views, in-place ops.

This module imports them all (so ``import torchdevice_mlx`` binds the class's dispatcher) and
re-exports their names, private ones included: tests, third parties and older code import them
from here.
"""
from __future__ import annotations

# re-exports (see the module docstring): the names this module defined before the split
from . import dispatch as _dispatch_module
from . import views as _views_module
from .conversion import (  # noqa: F401
    _M2T,
    _MX_ARRAY,
    _T2M,
    _compact_pending,
    _counts,
    _dtype_pairs,
    _init_dtypes,
    _lock,
    _logged,
    _mx_array,
    _note_fallback,
    _pending,
    _pending_limit,
    _report_fallbacks,
    _track,
    array_from_torch,
    evaluate_pending,
    fallback_counts,
    log,
    reset_fallback_counts,
    to_mx_dtype,
    to_torch_dtype,
    torch_from_array,
)
from .dispatch import (  # noqa: F401
    _AS_STRIDED,
    _COPY_TO,
    _FUNCTIONAL,
    _INPLACE,
    _LOWERED,
    _MAKES_TENSORS,
    _METADATA_AS_VIEW,
    _METADATA_INPLACE,
    _MULTI,
    _OTHER,
    _PYTHON_KEYS,
    _QUIET_RUNS,
    _ROUTES,
    _TENSORS,
    _UNSEEN,
    _VIEW,
    _check_in_storage,
    _declined,
    _decomposition,
    _functional_of,
    _gathered_view,
    _has_tensor,
    _host_fallback,
    _inplace,
    _make_view,
    _metadata_inplace,
    _MLXFactories,
    _multi_view,
    _not_lowered,
    _route,
    _run_decomposition,
    _to_host,
    _unwrap,
    _wrap,
    aten,
    dispatch,
)
from .mlxtensor import _CPU, _DATA, MLXTensor, _new_base, _rebuild, _wrapper  # noqa: F401
from .views import (  # noqa: F401
    _ALIASING,
    _GEOMETRY,
    _MULTI_VIEWS,
    _OVERLAP,
    _STRIDED,
    _STRIDES,
    _aliases_its_input,
    _contiguous_strides,
    _geometry,
    _host_write,
    _index_array,
    _init_geometry,
    _init_views,
    _meta_geometry,
    _run_lowered,
    _view_array,
    _view_geometry,
    write,
)

#: names rebound after import (the lowering tables on the first dispatch, torch's decomposition table on
#: first use): read where they live, not copied here
_REBOUND = {"LOWERINGS": _views_module, "TENSOR_LOWERINGS": _views_module, "RANDOM_OPS": _views_module,
            "HOST_OPS": _views_module, "_decomp_table": _dispatch_module}


def __getattr__(name: str):
    module = _REBOUND.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
