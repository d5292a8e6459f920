"""``torch.compile(model, backend="mlx")``: a captured graph lowered to one MLX function, ``mx.compile``-d.

How a module is compiled (:class:`MLXCompiledModule`)
  On a call, the module's parameters, buffers and the call's tensor arguments are given to
  ``torch.func.functional_call`` traced by ``make_fx`` (pre-dispatch, on fake tensors shaped like the
  real ones: no data is read); AOTAutograd splits that graph into a forward and a backward graph of
  core ATen ops (torch's decompositions, except the ops :mod:`torchdevice_mlx.lowerings` lowers as a
  whole); each graph becomes one Python function over MLX arrays (every node its lowering), compiled
  with ``mx.compile`` -- MLX fuses and schedules the whole step. AOTAutograd's runtime calls it with the
  MLX tensors, so gradients reach the parameters and optimizers run unchanged; buffer updates
  (BatchNorm's running statistics) are written back as AOTAutograd's input mutations.

  Dynamo is not used: it cannot trace a tensor subclass that holds no torch tensor. The capture is
  keyed on what the graph depends on -- each tensor argument's shape, dtype and requires_grad, which
  arguments are None, the other arguments' values, ``module.training``, grad mode and the identity of
  the parameters -- and recaptured when that changes. Like ``torch.compile(fullgraph=True)``, Python
  control flow that depends on anything else is fixed at capture.

Falling back (never other numbers than eager)
  A graph that cannot be captured (data-dependent shapes, ``.item()``, an op without lowering...) or
  lowered runs eagerly, op by op on MLX tensors, as without ``torch.compile``; a graph with random ops
  (dropout) is lowered but not ``mx.compile``-d, so its random draws stay torch's, as in eager. Calls
  under ``torch.autocast`` run eagerly. Each fallback is logged once (``torchdevice.mlx`` logger) and
  counted in :func:`compile_stats`.

``torch.compile`` of an ``nn.Module`` under translation to the mlx backend, with ``backend="mlx"`` or
torch's default (inductor cannot compile MLX tensors), returns an :class:`MLXCompiledModule` (its
state_dict keys carry the ``_orig_mod.`` prefix, as torch's compiled modules do); anything else
(functions, other backends) is left to torch. :func:`dynamo_backend` is also registered with torch as
backend ``"mlx"`` for programs whose tensors are torch's own: their graphs then run in MLX, data copied
in and out at the graph's boundary.
"""
from __future__ import annotations

import logging
import operator
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from .bridge import from_mlx, to_mlx
from .runtime import Array
from .tensor import MLXTensor, new_base, unwrap
from .views import init_views

log = logging.getLogger("torchdevice.mlx")
aten = torch.ops.aten

_stats: Counter = Counter()
_logged: set = set()
_lock = threading.Lock()


def compile_stats() -> dict[str, int]:
    """Counts of compiled graphs and of fallbacks to eager (reason -> count)."""
    with _lock:
        return dict(_stats)


def _count(what: str, detail: str = "") -> None:
    with _lock:
        _stats[what] += 1
        first = (what, detail) not in _logged
        _logged.add((what, detail))
    if first and what.startswith("eager"):
        log.info("torchdevice mlx compile: %s%s", what, f" ({detail})" if detail else "")


class Unsupported(Exception):
    """The graph cannot be lowered to MLX as a whole."""


# -- FX graph -> MLX function ------------------------------------------------------------

def _impure_ops() -> set:
    from .lowerings import RANDOM_OPS

    # lowerings that read data on the host or draw random numbers: their graph cannot be mx.compile-d
    return set(RANDOM_OPS) | {aten.native_dropout.default, aten._local_scalar_dense.default, aten.index.Tensor,
                              aten._unsafe_index.Tensor, aten.index_put.default, aten._unsafe_index_put.default}


def lower_graph(gm: torch.fx.GraphModule, backward: bool = False) -> tuple[Callable, bool]:
    """``gm`` as a function of MLX arrays returning a list of MLX arrays, and whether it is pure (no host reads
    or random draws: it may be ``mx.compile``-d). Raises :class:`Unsupported` if a node has no lowering.

    A random op whose result nothing uses (a partitioner's recomputation copies them along) is dropped: eager
    draws it once, in the forward. One whose result a backward graph uses raises: it would draw again."""
    from . import lowerings  # imports mlx.core: only once a graph is compiled

    init_views()
    impure = _impure_ops()
    random_ops = lowerings.RANDOM_OPS | {aten.native_dropout.default}
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and node.target in random_ops:
            if all(not user.users for user in node.users) and all(user.target is operator.getitem
                                                                  for user in node.users):
                for user in list(node.users):
                    gm.graph.erase_node(user)
                gm.graph.erase_node(node)
            elif backward:
                raise Unsupported(f"{node.target} recomputed in the backward graph")
    pure = True
    plan: list[tuple[torch.fx.Node, Callable, Any, Any]] = []
    placeholders: list[torch.fx.Node] = []
    constants: dict[torch.fx.Node, Any] = {}
    output_args: Any = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            placeholders.append(node)
        elif node.op == "get_attr":
            value = getattr(gm, node.target)
            constants[node] = value.mx_array if isinstance(value, MLXTensor) else (
                to_mlx(value) if isinstance(value, torch.Tensor) else value)
        elif node.op == "call_function":
            target = node.target
            if target is operator.getitem:
                fn: Callable = operator.getitem
            elif isinstance(target, torch._ops.OpOverload) and target in lowerings.LOWERINGS:
                fn = lowerings.LOWERINGS[target]
                pure = pure and target not in impure
            else:
                raise Unsupported(f"no MLX lowering for {target}")
            plan.append((node, fn, node.args, node.kwargs))
        elif node.op == "output":
            output_args = node.args[0]
        else:
            raise Unsupported(f"graph node {node.op}")

    def run(*inputs: Any) -> list[Array]:
        env: dict = dict(constants)
        env.update(zip(placeholders, inputs))
        for node, fn, args, kwargs in plan:
            env[node] = fn(*torch.fx.node.map_arg(args, env.__getitem__),
                           **torch.fx.node.map_arg(kwargs, env.__getitem__))
        return list(torch.fx.node.map_arg(output_args, lambda n: env[n] if n is not None else None))

    return run, pure


class _MLXGraph:
    """A compiled AOT graph: runs in MLX, or eagerly (``gm`` on MLX tensors) if it cannot."""

    def __init__(self, gm: torch.fx.GraphModule, name: str) -> None:
        self.gm, self.name = gm, name
        self.fn: Callable | None = None
        try:
            run, pure = lower_graph(gm, backward=name == "backward")
        except Unsupported as exc:
            _count("eager: graph not lowered", str(exc))
            return
        if pure:
            import mlx.core as mx

            self.fn = mx.compile(run)
            _count(f"{name} graphs mx.compile-d")
        else:
            self.fn = run
            _count(f"{name} graphs lowered (random ops or host reads: not mx.compile-d)")

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list):  # AOTAutograd's boxed calling convention
            args = tuple(args[0])
        if self.fn is not None:
            mlx_inputs = any(isinstance(a, MLXTensor) for a in args)
            try:
                outs = self.fn(*[unwrap(a) for a in args])
            except (NotImplementedError, Unsupported, ValueError, TypeError) as exc:
                _count("eager: lowering declined at run time", f"{type(exc).__name__}: {exc}")
                self.fn = None
            else:
                import mlx.core as mx

                array = mx.array
                if mlx_inputs:
                    return [new_base(o) if isinstance(o, array) else o for o in outs]
                return [from_mlx(o, copy=True) if isinstance(o, array) else o for o in outs]
        return self.gm(*args)

    _boxed_call = True


def _compiler(name: str) -> Callable:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable:
        return _MLXGraph(gm, name)
    return compile_graph


def _decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    from .lowerings import LOWERINGS

    table = dict(core_aten_decompositions())
    for op in list(table):
        if op in LOWERINGS:  # lowered as a whole: kept as one node
            del table[op]
    table.pop(aten.native_dropout.default, None)  # drawn as in eager (torch's CPU kernel): same masks
    return table


def _partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """torch's min-cut partitioner: it never recomputes a random op in the backward (inductor's choice too)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition(joint, joint_inputs, compiler="inductor", **kwargs)


def dynamo_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """torch's ``backend="mlx"`` for graphs dynamo captured (programs whose tensors are torch's own)."""
    from torch._functorch.aot_autograd import aot_module_simplified

    return aot_module_simplified(gm, example_inputs, fw_compiler=_compiler("forward"),
                                 bw_compiler=_compiler("backward"), decompositions=_decompositions(),
                                 partition_fn=_partition)


# -- whole-module capture (no dynamo) ---------------------------------------------------------

def _fake(mode: Any, t: torch.Tensor) -> torch.Tensor:  # mode: a FakeTensorMode
    meta = torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")
    fake = mode.fake_tensor_converter.from_meta_and_device(mode, meta, torch.device("cpu"))
    return fake.requires_grad_(t.requires_grad) if t.requires_grad else fake


class _Capture:
    """One captured call signature of a module: AOTAutograd's compiled function and the output structure."""

    def __init__(self, module: nn.Module, names: list[str], state: list, args: tuple, kwargs: dict) -> None:
        from torch._functorch.aot_autograd import aot_module_simplified
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx

        flat, self.in_spec = tree_flatten((args, kwargs))
        self.tensor_pos = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
        self.template = flat
        n_state = len(state)
        spec_holder: list = []

        def functional(*tensors: Any) -> tuple[torch.Tensor, ...]:
            leaves = list(self.template)
            for pos, t in zip(self.tensor_pos, tensors[n_state:]):
                leaves[pos] = t
            call_args, call_kwargs = tree_unflatten(leaves, self.in_spec)
            out = torch.func.functional_call(module, dict(zip(names, tensors[:n_state])), call_args, call_kwargs)
            out_flat, out_spec = tree_flatten(out)
            if any(not isinstance(o, torch.Tensor) and o is not None for o in out_flat):
                raise Unsupported("the module returns values other than tensors")
            spec_holder[:] = [out_spec, [o is None for o in out_flat]]
            return tuple(o for o in out_flat if o is not None)

        mode = FakeTensorMode()
        inputs = list(state) + [flat[i] for i in self.tensor_pos]
        fakes = [_fake(mode, t) for t in inputs]
        with mode:
            gm = make_fx(functional, pre_dispatch=True)(*fakes)
        self.out_spec, self.none_mask = spec_holder
        self.compiled = aot_module_simplified(gm, fakes, fw_compiler=_compiler("forward"),
                                              bw_compiler=_compiler("backward"), decompositions=_decompositions(),
                                              partition_fn=_partition)

    def __call__(self, state: list, args: tuple, kwargs: dict) -> Any:
        flat, _ = tree_flatten((args, kwargs))
        outs = iter(self.compiled(*state, *[flat[i] for i in self.tensor_pos]))
        leaves = [None if none else next(outs) for none in self.none_mask]
        return tree_unflatten(leaves, self.out_spec)


def _key_of(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), x.dtype, x.requires_grad, isinstance(x, MLXTensor))
    if isinstance(x, (int, float, bool, str, type(None))):
        return x
    raise Unsupported(f"argument of type {type(x).__name__}")


class MLXCompiledModule(nn.Module):
    """``torch.compile(module, backend="mlx")``'s result (see the module docstring)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self._orig_mod = module
        self._captures: dict[tuple, _Capture | bool] = {}  # False: this signature runs eagerly

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        module = self._orig_mod
        if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
            _count("eager: autocast")
            return module(*args, **kwargs)
        named: dict[str, torch.Tensor] = {}
        for name, t in module.named_parameters(remove_duplicate=True):
            named[name] = t
        for name, buffer in module.named_buffers(remove_duplicate=True):
            named[name] = buffer
        names, state = list(named), list(named.values())
        try:
            flat, spec = tree_flatten((args, kwargs))
            key = (tuple(_key_of(x) for x in flat), str(spec), module.training, torch.is_grad_enabled(),
                   tuple(id(t) for t in state), tuple((t.shape, t.dtype, t.requires_grad) for t in state))
        except Unsupported as exc:
            _count("eager: arguments", str(exc))
            return module(*args, **kwargs)
        capture = self._captures.get(key)
        if capture is None:
            try:
                capture = _Capture(module, names, state, args, kwargs)
            except Exception as exc:  # noqa: BLE001 -- any capture failure: this signature runs eagerly, counted
                _count("eager: capture failed", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                capture = False
            self._captures[key] = capture
        if not isinstance(capture, _Capture):
            return module(*args, **kwargs)
        return capture(state, args, kwargs)


def compile_module(model: torch.nn.Module, **_options: Any) -> MLXCompiledModule:
    """``torch.compile(model, backend="mlx")`` for an ``nn.Module``: an :class:`MLXCompiledModule`."""
    return MLXCompiledModule(model)


def register_dynamo_backend() -> None:
    """Make ``backend="mlx"`` known to torch (for programs whose tensors are torch's own)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "mlx" not in _BACKENDS:
        register_backend(name="mlx")(dynamo_backend)


_hidden: list = []


def hide_dispatch_from_dynamo() -> None:
    """Mark MLXTensor's ``__torch_dispatch__`` as not to be traced by dynamo (a program compiling a function that
    meets MLX tensors: dynamo graph-breaks on them and must run torchdevice's dispatch as it is)."""
    if _hidden:
        return
    from torch._dynamo import disable

    dispatch = MLXTensor.__dict__["__torch_dispatch__"].__func__
    # replacing the class's dispatcher at run time is the point here (mypy forbids assigning to a method)
    MLXTensor.__torch_dispatch__ = classmethod(disable(dispatch, recursive=True))  # type: ignore[method-assign, assignment]
    _hidden.append(True)
