"""Lockstep shadow execution: every ATen op the program runs on backend B also runs on reference backend A.

:class:`ShadowMode` is a ``TorchDispatchMode``, entered only by ``torchdevice compare`` around the program's
run. For each ATen op it (1) copies the op's tensor inputs to the reference backend's device type
(``Tensor.to(device)`` under translation, so a backend's own tensors become the reference's: an MLX tensor's
``.to("cpu")`` is a plain host tensor), (2) runs the op on B as usual, (3) runs it on the copies, (4) compares
every tensor output (and ``.item()``'s number) with :func:`torchdevice.compare.metrics.errors`. Each op's
error is therefore its own: the reference starts from B's inputs, never from its own earlier results.
The reference runs each op on one intra-op thread (fast on a small machine); an op over tolerance that
mutates nothing is run again with the program's thread count, and that comparison stands: CPU kernels
that split a reduction per thread sum in another order on one (``reference_threads`` in its entry).

Not re-run on the reference: random ops (tagged ``nondeterministic_seeded``: re-running them would draw from
the reference's generator and change the program's random stream; they are recorded with status
``random`` and the device they drew on, for the report's ``random_ops``; a random-tagged op that left its
generator's state as it was drew nothing and is compared), ops whose output is uninitialized
(``empty*``), ops outside the ``aten`` namespace. An op the reference cannot run is recorded as
``reference failed: <error>`` and the program goes on. Higher-order ops (``flex_attention``, ``cond``) run as
without the mode, not compared: the ATen ops inside them run with the mode off. torch.compile compiles
nothing under this mode (dynamo falls back to eager, so a compiled region's ops are compared one by one);
eager ``flex_attention``, which compiles its op itself, takes torch's uncompiled path meanwhile.

The dispatch mode sits below autograd, so it sees the ops autograd runs (``aten.addmm``, ``aten.gelu``) and,
during ``backward()``, the backward ops (``aten.gelu_backward``): the autograd engine runs a host device's
backward in the thread that called ``backward()``, where the mode is active. (A device whose backward runs
on an engine worker thread would not show its backward ops: the mode stack is thread-local.)

:class:`ModuleTracker` names the module an op ran in (global forward pre/post hooks; names from the
outermost module's ``named_modules()``, prefixed with the program's variable name for it), and
:func:`program_location` the program's ``file:line``.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Callable, cast

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from . import fallbacks, metrics

if TYPE_CHECKING:
    from torch.autograd.graph import Node

#: the module path of ops run outside every module
TOP_LEVEL = "(top level)"
_EMPTY = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
_NONDET = getattr(torch.Tag, "nondeterministic_seeded", None)

#: op -> (when, outputs): outputs whose content torch leaves to each device when ``when(args)`` holds, so they are
#: not compared. ``native_batch_norm`` in eval: the saved statistics are empty on the CPU and CUDA's kernel leaves
#: them uninitialised, shaped (C,) (torch._decomp's native_batch_norm_helper: "annoying inconsistency").
_UNSPECIFIED: dict[str, tuple[Callable[[tuple[Any, ...]], bool], frozenset[int]]] = {
    "aten.native_batch_norm.default": (lambda args: len(args) > 5 and not args[5], frozenset({1, 2})),
}
_UNRUN = object()


# -- where an op was called from ----------------------------------------------------------------------------

def _excluded_dirs() -> tuple[str, ...]:
    import torchdevice

    dirs = {os.path.dirname(torch.__file__), os.path.dirname(torchdevice.__file__)}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(path)
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


_EXCLUDED: tuple[str, ...] | None = None
_OURS: dict[types.CodeType, bool] = {}  # code object -> whether its file is torch's, torchdevice's (or a plugin's), the stdlib's


def _is_ours(code: types.CodeType) -> bool:
    global _EXCLUDED
    found = _OURS.get(code)
    if found is None:
        if _EXCLUDED is None:
            _EXCLUDED = _excluded_dirs()
        filename = code.co_filename
        real = os.path.realpath(filename) if not filename.startswith("<") else filename
        parts = real.split(os.sep)
        found = (filename.startswith("<") or real.startswith(_EXCLUDED)
                 or any(p.startswith("torchdevice_") or p in ("pluggy", "site-packages/torch") for p in parts[-4:-1]))
        _OURS[code] = found
    return found


def program_frame(skip: int = 1) -> types.FrameType | None:
    """The innermost frame of the program (not torch's, torchdevice's, a plugin's or the stdlib's), or None."""
    frame: types.FrameType | None = sys._getframe(skip)
    while frame is not None and _is_ours(frame.f_code):
        frame = frame.f_back
    return frame


def program_location(skip: int = 2) -> str:
    frame = program_frame(skip)
    if frame is None:
        return "?"
    filename = frame.f_code.co_filename
    try:
        rel = os.path.relpath(filename)
        if not rel.startswith(".."):
            filename = rel
    except ValueError:  # another drive
        pass
    return f"{filename}:{frame.f_lineno}"


# -- which module an op ran in -------------------------------------------------------------------------------

class _Running(threading.local):
    """The modules running on one thread. ``nn.DataParallel`` runs its replicas' forwards on threads of its
    own, at once: on one shared stack their calls interleaved, ended each other's entries and the calling
    thread's, and named modules by the wrong parents."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.modules: list[torch.nn.Module] = []
        self.inputs: list[set[int]] = []


class ModuleTracker:
    """Global forward pre/post hooks keeping the stack of modules running on each thread; :meth:`path` names
    the calling thread's innermost.

    The outermost module seen (a *root*) is named by the program's variable holding it (``model``), else
    by its class in lower case; its submodules by ``named_modules()`` below it (``model.h.3.mlp.act``).
    """

    def __init__(self) -> None:
        self._running = _Running()
        self._names: dict[int, tuple[weakref.ref, str]] = {}
        self._handles: list = []
        self.tag_graph = True  # name backward ops after the module whose forward made their node

    @property
    def stack(self) -> list[str]:
        return self._running.stack

    def __enter__(self) -> ModuleTracker:
        from torch.nn.modules import module as nn_module

        self._handles = [nn_module.register_module_forward_pre_hook(self._pre),
                         nn_module.register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def path(self) -> str:
        return self.stack[-1] if self.stack else ""

    def _name_of(self, module: torch.nn.Module) -> str:
        entry = self._names.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        if self._running.modules:  # a submodule: named below the innermost running module that holds it
            for parent, parent_path in zip(reversed(self._running.modules), reversed(self.stack)):
                self._index(parent, parent_path)
                entry = self._names.get(id(module))
                if entry is not None and entry[0]() is module:
                    return entry[1]
            return f"{self.stack[-1]}.{type(module).__name__.lower()}"
        name = self._root_name(module)
        self._index(module, name)
        return name

    def _index(self, root: torch.nn.Module, root_name: str) -> None:
        for sub_name, sub in root.named_modules():
            if id(sub) not in self._names or self._names[id(sub)][0]() is not sub:
                self._names[id(sub)] = (weakref.ref(sub), f"{root_name}.{sub_name}" if sub_name else root_name)

    @staticmethod
    def _root_name(module: torch.nn.Module) -> str:
        frame = program_frame(3)
        while frame is not None:
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in scope.items():
                    if value is module and not name.startswith("_") and name != "self":
                        return name
            frame = frame.f_back
        return type(module).__name__.lower()

    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        running = self._running
        running.stack.append(self._name_of(module))
        running.modules.append(module)
        if self.tag_graph:
            leaves, _ = tree_flatten(args)
            running.inputs.append({id(t.grad_fn) for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None})

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: object) -> None:
        running = self._running
        while running.modules:
            top = running.modules.pop()
            path = running.stack.pop()
            inputs = running.inputs.pop() if self.tag_graph and running.inputs else set()
            if top is module:
                if self.tag_graph and torch.is_grad_enabled():
                    _tag_graph(output, inputs, path)
                break


def _metadata(node: Node) -> dict[str, Any]:
    """A node's metadata dict: a property of every node at run time, which torch's ``Node`` declares as a method."""
    return cast("dict[str, Any]", node.metadata)


def _tag_graph(output: object, stop: set[int], path: str) -> None:
    """Mark the autograd nodes a module call made (from its outputs back to its inputs) with its path, so that
    the backward ops they run are named after the module (inner modules, finishing first, keep their own)."""
    leaves, _ = tree_flatten(output)
    todo: list[Node | None] = [t.grad_fn for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen or id(node) in stop:
            continue
        seen.add(id(node))
        meta = _metadata(node)
        if _MODULE_KEY not in meta:
            meta[_MODULE_KEY] = path
        todo.extend(next_node for next_node, _ in node.next_functions)


_MODULE_KEY = "torchdevice_compare_module"


# -- the mode ----------------------------------------------------------------------------------------------

class ShadowMode(TorchDispatchMode):
    """Run every ATen op on the reference device too and hand the comparison to ``record(entry)``."""

    # a higher-order op (flex_attention run eagerly, cond, ...) comes here too and runs as it would without the
    # mode, not compared; torch would otherwise refuse it under any mode that has no rule for it
    supports_higher_order_operators = True

    def __init__(self, ref_device: torch.device, record: Callable[[dict], None], tracker: ModuleTracker | None = None,
                 rtol: float | None = None, atol: float | None = None, device_type: str | None = None) -> None:
        super().__init__()
        self.ref_device = ref_device
        self.record = record
        self.tracker = tracker
        self.rtol, self.atol = rtol, atol
        self.index = 0
        self.paused = False  # the autocast probe's own work on the reference: not the program's
        self.device_type = device_type  # backend B's: its Python fallback is covered (.fallbacks)
        self._seen: set[str] = set()
        self.trace: list[tuple[str, torch.dtype | None]] | None = None  # (op, output dtype), for .autocast
        self._covered = device_type is None

    def __enter__(self) -> ShadowMode:
        # torch.compile runs nothing compiled under a mode like this one (dynamo falls back to eager: each op is
        # compared), but eager flex_attention compiles its higher-order op with fullgraph=True, which then finds
        # no frame to compile and raises; its uncompiled path (torch's debug switch) runs the op eagerly instead
        import torch.nn.attention.flex_attention as flex

        self._flex_uncompiled = flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        import torch.nn.attention.flex_attention as flex

        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = self._flex_uncompiled
        super().__exit__(*exc)

    def cover(self) -> None:
        """Enter B's Python fallback for every op (:mod:`.fallbacks`), once B's plugin has registered it."""
        if not self._covered and self.device_type is not None and fallbacks.cover(self.device_type):
            self._covered = True

    def _to_ref(self, x: object) -> object:
        if not isinstance(x, torch.Tensor):
            return x
        src = x.detach()
        ref = src.to(self.ref_device)
        if type(ref) is type(src) and ref.device == src.device:  # same device: a copy, never an alias
            ref = ref.clone()
        return ref

    def __torch_dispatch__(self, func: OpOverload, types: Collection[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        if self.trace is None:
            return self._dispatch(func, args, kwargs)
        out = self._dispatch(func, args, kwargs)
        self.trace.append((str(func), _float_dtype(out)))
        return out

    def _dispatch(self, func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.paused:
            return func(*args, **kwargs)
        self.cover()
        name = func.name()
        if name not in self._seen:  # an op defined after the ops were covered
            self._seen.add(name)
            if self._covered and self.device_type is not None:
                fallbacks.cover(self.device_type, [name])
        skip = self._skip_reason(func)
        if skip == "random":
            before = _draw_state(args, kwargs)
            if before is None:  # a generator it cannot read: taken to draw
                return self._random(func, args, kwargs)
        elif skip is not None:
            return func(*args, **kwargs)
        # the reference's work runs on one torch thread: on a small machine, torch's intra-op threads woken for
        # each small op between the backend's own cost tens of times the arithmetic (measured 7x the whole run)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            ref_args, ref_kwargs = tree_map(self._to_ref, (args, kwargs))
            if "device" in ref_kwargs and ref_kwargs["device"] is not None:
                ref_kwargs["device"] = self.ref_device
            copy_error = None
        except Exception as exc:  # noqa: BLE001 - a tensor the reference cannot hold: reported, never fatal
            copy_error = exc
        finally:
            torch.set_num_threads(threads)
        out = func(*args, **kwargs)
        if skip == "random" and not _same_state(before, _draw_state(args, kwargs)):
            return self._random(func, args, kwargs, out)
        self.index += 1
        entry = {"index": self.index, "op": str(func), "module": self._module(),
                 "location": program_location(2), "phase": self._phase()}
        if copy_error is not None:
            self.record({**entry, "status": f"reference failed: copying the inputs: "
                                            f"{type(copy_error).__name__}: {copy_error}"})
            return out
        torch.set_num_threads(1)
        try:
            try:
                with torch.random.fork_rng(devices=[], enabled=skip == "random"):  # it did not draw on B either
                    ref_out = func(*ref_args, **ref_kwargs)
            except Exception as exc:  # noqa: BLE001
                self.record({**entry, "status": f"reference failed: {type(exc).__name__}: {first_line(exc)}"})
                return out
            found = self._compare(entry, func, args, out, ref_out)
            if found["status"] == "diverged" and threads > 1 and skip is None and not func._schema.is_mutable:
                found = self._on_the_programs_threads(entry, found, func, args, out, ref_args, ref_kwargs, threads)
            self.record(found)
        finally:
            torch.set_num_threads(threads)
        return out

    def _on_the_programs_threads(self, entry: dict, found: dict, func: OpOverload, args: tuple[Any, ...], out: object,
                                 ref_args: tuple[Any, ...], ref_kwargs: dict[str, Any], threads: int) -> dict:
        """An op over tolerance, re-run on the reference with the program's intra-op threads: a reduction a CPU
        kernel splits per thread (layer_norm's backward: dgamma, dbeta) sums in another order on one thread.
        The comparison with the reference as the program runs it stands (the op's inputs are untouched: it
        mutates none)."""
        torch.set_num_threads(threads)
        try:
            ref_out = func(*ref_args, **ref_kwargs)
        except Exception:  # noqa: BLE001 - it ran on one thread: keep that comparison
            return found
        return {**self._compare(entry, func, args, out, ref_out), "reference_threads": threads}

    def _random(self, func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], out: object = _UNRUN) -> object:
        """Record a random op that drew from B's generator (run it first where it has not run)."""
        if out is _UNRUN:
            out = func(*args, **kwargs)
        self.index += 1
        self.record({"index": self.index, "op": str(func), "module": self._module(),
                     "location": program_location(3), "phase": self._phase(), "status": "random",
                     "device": _device_of(out, kwargs)})
        return out

    @staticmethod
    def _skip_reason(func: OpOverload) -> str | None:
        if func.namespace != "aten":
            return "not aten"
        if _NONDET is not None and _NONDET in func.tags:
            return "random"
        if func.overloadpacket.__name__ in _EMPTY:
            return "uninitialized"
        return None

    def _module(self) -> str:
        if self.tracker is None:
            return ""
        node = torch._C._current_autograd_node()
        if node is not None:
            try:
                owner = _metadata(node).get(_MODULE_KEY)
            except Exception:  # noqa: BLE001 - a node without Python metadata
                owner = None
            return f"{owner or TOP_LEVEL} (backward {node.name().rsplit('::', 1)[-1]})"
        return self.tracker.path or TOP_LEVEL

    @staticmethod
    def _phase() -> str:
        return "backward" if torch._C._current_autograd_node() is not None else "forward"

    def _compare(self, entry: dict, func: OpOverload, args: tuple[Any, ...], out: object, ref_out: object) -> dict:
        outs, _ = tree_flatten(out)
        refs, _ = tree_flatten(ref_out)
        found: dict | None = None
        compared = 0
        when, unspecified = _UNSPECIFIED.get(str(func), (None, frozenset()))
        skipped = unspecified if when is not None and when(args) else frozenset()
        for n, (o, r) in enumerate(zip(outs, refs)):
            if n in skipped:
                continue
            if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor):
                err = metrics.errors(o, r, self.rtol, self.atol)
            elif isinstance(o, (int, float, bool)) and isinstance(r, (int, float, bool)) and func.__name__.startswith(
                    "_local_scalar_dense"):
                dtype = args[0].dtype if args and isinstance(args[0], torch.Tensor) else torch.float64
                err = metrics.scalar_errors(o, r, dtype, self.rtol, self.atol)
            else:
                continue
            compared += 1
            found = metrics.worst(found, err)
        if found is None:
            return {**entry, "status": "no output to compare"}
        return {**entry, **found, "outputs": compared, "status": "ok" if found["within"] else "diverged"}


def _draw_state(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The state of the generator a random op would draw from (its ``generator=``, else its device's
    default one), or None where it cannot be read: a random-tagged op that left it as it was drew nothing
    (``scaled_dot_product_attention`` with ``dropout_p=0``) and is compared like any other op."""
    generator = kwargs.get("generator")
    if generator is not None:
        return generator.get_state()
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    device = tensors[0].device if tensors else kwargs.get("device")
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cpu":
        return torch.get_rng_state()
    try:
        module = torch.get_device_module(device.type)
        return module.get_rng_state(device.index if device.index is not None else module.current_device())
    except Exception:  # noqa: BLE001 - a device module without one: the op is taken to draw
        return None


def _same_state(before: torch.Tensor | None, after: torch.Tensor | None) -> bool:
    return before is not None and after is not None and torch.equal(before, after)


def _float_dtype(value: object) -> torch.dtype | None:
    """The dtype of the first floating-point tensor in ``value``, or None."""
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf.dtype
    return None


def _device_of(out: object, kwargs: dict[str, Any]) -> str:
    """The device type a random op drew on: its first tensor output's (whose generator it used)."""
    for leaf in tree_flatten(out)[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device.type
    device = kwargs.get("device")
    return torch.device(device).type if device is not None else "?"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
