"""Every aten op on sim tensors that sim.cpp's fast path leaves: one boxed Python fallback.

The C++ half registers the few kernels the dispatcher needs natively (``empty``, views,
``resize_``) and PrivateUse1's fallback, which runs the common ops itself (its fast path: the
asynchronous path below, in C++) and redispatches the rest to this fallback, registered on
``PrivateUse2``. What arrives here is run the way a GPU runs it:

1. **Device discipline.** All tensors must be on one sim device; a CPU tensor is accepted only
   as a 0-dim scalar (and as an index, as CUDA accepts), else torch's same-device error.
2. **Metadata on the host.** The op runs on ``meta`` copies of its inputs to learn its outputs'
   shapes, strides and dtypes; outputs are allocated on the device (its allocator, its capacity).
3. **Compute on the queue.** The CPU kernel is launched onto the current stream with host views
   of the device memory (``_C.launch``); the host returns at once, as from a CUDA launch.

Ops that cannot be run that way run *synchronously* after waiting for the current stream,
as a GPU runtime does for them: ops whose output shape depends on data (``nonzero``, ``unique``
...), ops returning host values (``item``, ``equal``), ops without a meta kernel, and random ops
(which draw from the device's own generator, whose state must advance in program order).
Copies between host and device are queued too; a copy that is not ``non_blocking`` from or into
pinned memory waits for the stream, as CUDA's does.

With the race checker on (:mod:`.racecheck`), every kernel reports the device tensors it reads and
writes before it is queued, and the waits a program would see on a GPU (a blocking copy to the host,
``item()``, data-dependent shapes) tell the checker the host has synchronized the stream.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator

import torch

from . import _rnn, racecheck

Tensor = torch.Tensor
aten = torch.ops.aten

# ops that take host tensors as indices beside device tensors, as CUDA's do
_HOST_INDEX_OPS = frozenset({"aten::index", "aten::index_put_", "aten::_index_put_impl_", "aten::index_put"})
_ATTENTION = frozenset({"aten::_scaled_dot_product_fused_attention_overrideable",
                        "aten::_scaled_dot_product_fused_attention_overrideable_backward"})
_CONVOLUTION = frozenset({"aten::convolution_overrideable", "aten::convolution_backward_overrideable"})
_RNG_LOCK = threading.RLock()  # one random op at a time may lend torch's CPU generator its state
_COPIES = frozenset({"aten::_copy_from", "aten::_copy_from_and_resize", "aten::copy_"})


def _leaves(value: Any, out: list) -> list:
    """Tensors and Nones of ``value`` in order, lists and tuples flattened (as the C++ side does)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            _leaves(item, out)
    elif value is None or isinstance(value, Tensor):
        out.append(value)
    return out


def _view_like(source: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """A view of ``source`` with the metadata the meta kernel gave ``meta``."""
    return torch.ops.aten.as_strided(source, meta.size(), meta.stride(), meta.storage_offset())


def _map(fn: Callable[[Any], Any], value: Any) -> Any:
    if isinstance(value, list):
        return [_map(fn, v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map(fn, v) for v in value)
    return fn(value)


class Fallback:
    """The fallback kernel, bound to the extension module ``C`` and the device type name."""

    def __init__(self, C: Any, device_type: str):
        self.C = C
        self.device_type = device_type
        self.plans: dict[tuple, Any] = {}

    # -- entry ----------------------------------------------------------------------------------
    def __call__(self, op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
        name = op._schema.name
        with torch._C._AutoDispatchBelowADInplaceOrView():
            if name in _COPIES:
                return self.copy(name, *args, **kwargs)
            device = self.device_of(name, args, kwargs)
            if name == "aten::_local_scalar_dense":
                if racecheck.enabled:
                    racecheck.check(device, _op_name(op), self.accesses(op, args, kwargs))
                self.C.stream_synchronize(device, self.C.current_stream(device))
                if racecheck.enabled:
                    racecheck.learn(device, self.C.current_stream(device))
                return self.C.host_view(args[0]).item()
            if name in _ATTENTION:
                if not racecheck.enabled:
                    return self.attention(name, device, *args, **kwargs)
                checked = self.accesses(op, args, kwargs)
                racecheck.check(device, _op_name(op), checked)
                result = self.attention(name, device, *args, **kwargs)
                self.made(device, _op_name(op), result, checked)
                return result
            if name in _CONVOLUTION:
                return self.convolution(name, device, *args)
            if name == "aten::record_stream":
                return None  # a freed block waits for every queue of its device anyway (sim.cpp, free_block)
            if self.runs_on_host(op):
                return self.run_on_host(op, device, args, kwargs)
            return self.launch(op, device, args, kwargs)

    def device_of(self, name: str, args: tuple, kwargs: dict) -> int:
        """The index of the one sim device the op's tensors are on; torch's error for a mix."""
        found: torch.device | None = None
        host: Tensor | None = None
        allow_host = name in _HOST_INDEX_OPS
        for leaf in _leaves((args, list(kwargs.values())), []):
            if leaf is None:
                continue
            where = leaf.device
            if where.type == self.device_type:
                if found is None:
                    found = where
                elif where != found:
                    raise RuntimeError(
                        f"Expected all tensors to be on the same device, but found at least two devices, {found} and {where}!"
                    )
            elif where.type == "cpu" and leaf.dim() > 0 and not allow_host:
                host = leaf
            elif where.type not in ("cpu", self.device_type):
                raise RuntimeError(f"Expected all tensors to be on the same device, but found {where} in {name}")
        if found is None:
            found = self.factory_device(kwargs)
        if host is not None:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {found} and cpu!")
        return found.index if found.index is not None else self.C.current_device()

    def factory_device(self, kwargs: dict) -> torch.device:
        device = kwargs.get("device")
        if device is None:
            return torch.device(self.device_type, self.C.current_device())
        return torch.device(device)

    @staticmethod
    def runs_on_host(op: torch._ops.OpOverload) -> bool:
        """Ops run synchronously: data-dependent shapes, host results, random draws (module docstring)."""
        tags = op.tags
        if torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags:
            return True
        if torch.Tag.nondeterministic_seeded in tags:
            return True
        for ret in op._schema.returns:
            kind = ret.type.kind()
            if kind not in ("TensorType", "OptionalType", "ListType"):
                return True
        return False

    # -- the asynchronous path -------------------------------------------------------------------
    def launch(self, op: torch._ops.OpOverload, device: int, args: tuple, kwargs: dict) -> Any:
        try:
            meta_out = self.meta(op, args, kwargs)
        except (NotImplementedError, RuntimeError) as exc:
            if "meta" not in str(exc).lower() and not isinstance(exc, NotImplementedError):
                raise  # a real error (shapes, dtypes): the program gets it now, as from a CUDA launch
            return self.run_on_host(op, device, args, kwargs)
        schema = op._schema
        outgrown = _outgrown(op, args, kwargs)
        returns = [meta_out] if len(schema.returns) == 1 else list(meta_out or ())
        results: list[Any] = []
        fresh: list[Tensor | None] = []
        for ret, value in zip(schema.returns, returns):
            alias = ret.alias_info
            if alias is None:
                made = _map(functools.partial(self.allocate, device=device), value)
                results.append(made)
                fresh.extend(_leaves(made, []))
                continue
            source = self.aliased_argument(op, alias, args, kwargs)
            if alias.is_write:
                self.resize_like(source, value)
                results.append(source)
                fresh.extend([source] if any(source is t for t in outgrown.values()) else [None] * len(_leaves(value, [])))
            else:  # a view: same memory, new metadata
                results.append(_map(functools.partial(_view_like, source), value))
                fresh.extend([None] * len(_leaves(value, [])))
        writes = schema.is_mutable or any(t is not None for t in fresh)
        if writes:
            if racecheck.enabled:
                made = [(t, True, "result") for t in fresh if t is not None]
                racecheck.check(device, _op_name(op), self.accesses(op, args, kwargs) + made)
            outputs = [None if t is None else self.C.host_view(t) for t in fresh] if any(t is not None for t in fresh) else []
            h_args, h_kwargs = _numbers_as_tensors(op, _map(self.host, args), {k: _map(self.host, v) for k, v in kwargs.items()})
            h_kwargs.update({k: torch.ops.aten.empty.memory_format([0], dtype=t.dtype, device="cpu")
                             for k, t in outgrown.items()})
            self.C.launch(device, schema.name, schema.overload_name, tuple(h_args), h_kwargs, outputs)
        if not schema.returns:
            return None
        return results[0] if len(schema.returns) == 1 else tuple(results)

    def meta(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        """The op's outputs on ``meta``: shapes, strides, dtypes. Cached per op and input metadata
        (a training step repeats the same calls), since a meta kernel costs far more than the launch."""
        key = _signature((op, args, kwargs))
        if key is not None:
            found = self.plans.get(key)
            if found is not None:
                return found
        meta_out = op(*_map(self.to_meta, args), **{k: _map(self.to_meta, v) for k, v in kwargs.items()})
        if key is not None:
            if len(self.plans) >= _PLANS:
                self.plans.clear()
            self.plans[key] = meta_out
        return meta_out

    def accesses(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[tuple[Tensor, bool, str]]:
        """The race checker's view of a call: each device tensor argument as (tensor, written, name),
        written where the schema marks the argument as mutated (in-place and out= arguments)."""
        found: list[tuple[Tensor, bool, str]] = []
        for index, argument in enumerate(op._schema.arguments):
            if not argument.kwarg_only and index < len(args):
                value = args[index]
            elif argument.name in kwargs:
                value = kwargs[argument.name]
            else:
                continue
            written = argument.alias_info is not None and argument.alias_info.is_write
            for leaf in _leaves(value, []):
                if leaf is not None and leaf.device.type == self.device_type:
                    found.append((leaf, written, argument.name))
        return found

    def made(self, device: int, op: str, result: Any, inputs: list) -> None:
        """For the race checker: the device tensors a synchronous op made (its results that are not inputs)
        are written on the current stream."""
        taken = {id(t) for t, _, _ in inputs}
        fresh = [(t, True, "result") for t in _leaves(result, []) if t is not None and id(t) not in taken
                 and isinstance(t, Tensor) and t.device.type == self.device_type]
        racecheck.check(device, op, fresh)

    def aliased_argument(self, op: torch._ops.OpOverload, alias: Any, args: tuple, kwargs: dict) -> Any:
        sets = alias.before_set
        for index, argument in enumerate(op._schema.arguments):
            if argument.alias_info is not None and argument.alias_info.before_set == sets:
                if argument.kwarg_only or index >= len(args):
                    return kwargs[argument.name]
                return args[index]
        raise RuntimeError(f"sim: cannot find the argument {op} returns")

    @staticmethod
    def resize_like(source: Any, meta: Any) -> None:
        for real, shape in zip(_leaves(source, []), _leaves(meta, [])):
            if real is not None and shape is not None and real.shape != shape.shape:
                real.resize_(shape.shape)

    def to_meta(self, value: Any) -> Any:
        if isinstance(value, Tensor) and value.device.type == self.device_type:
            storage = value.untyped_storage().nbytes() // max(value.element_size(), 1)
            # aten's op, not torch.empty: under translation torch.empty is the device-mapping wrapper, and sim's
            # own bookkeeping must not re-enter the translation layer
            base = torch.ops.aten.empty.memory_format([max(storage, 1)], dtype=value.dtype, device="meta")
            return base.as_strided(value.size(), value.stride(), value.storage_offset())
        if isinstance(value, torch.device) and value.type == self.device_type:
            return torch.device("meta")
        return value

    def allocate(self, meta: Any, device: int) -> Any:
        """A device tensor shaped as ``meta``, on the op's device (not the calling thread's current one)."""
        if not isinstance(meta, Tensor):
            return meta
        return torch.ops.aten.empty_strided(meta.size(), meta.stride(), dtype=meta.dtype,
                                            device=torch.device(self.device_type, device))

    def host(self, value: Any) -> Any:
        if isinstance(value, Tensor) and value.device.type == self.device_type:
            return self.C.host_view(value)
        if isinstance(value, torch.device) and value.type == self.device_type:
            return torch.device("cpu")
        return value

    # -- the synchronous path --------------------------------------------------------------------
    def run_on_host(self, op: torch._ops.OpOverload, device: int, args: tuple, kwargs: dict) -> Any:
        checked = self.accesses(op, args, kwargs) if racecheck.enabled else []
        if checked:
            racecheck.check(device, _op_name(op), checked)
        self.C.stream_synchronize(device, self.C.current_stream(device))
        views: dict[int, Tensor] = {}

        def host(value: Any) -> Any:
            view = self.host(value)
            if view is not value and isinstance(value, Tensor):
                views[id(view)] = value
            return view

        h_args = _map(host, args)
        h_kwargs = {k: _map(host, v) for k, v in kwargs.items()}
        if "pin_memory" in h_kwargs:
            h_kwargs["pin_memory"] = False
        outs = [(h_kwargs[name], kwargs[name]) for name in _out_names(op)
                if isinstance(kwargs.get(name), Tensor) and h_kwargs[name] is not kwargs[name]]
        before = [_layout(view) for view, _ in outs]
        seeded = torch.Tag.nondeterministic_seeded in op.tags
        drawn: list[int] = []  # a random op's elements drawn, for the generator's offset
        drawing = (self.drawing_from_device(op, device, h_args, h_kwargs, drawn) if seeded
                   else contextlib.nullcontext((h_args, h_kwargs)))
        with drawing as (h_args, h_kwargs):
            result = op(*h_args, **h_kwargs)
            drawn.append(_largest((result, h_args, list(h_kwargs.values()))))
        for (view, original), layout in zip(outs, before):
            if _layout(view) != layout:
                self.regrow(original, view, device)
        result = _map(lambda v: self.to_device(v, views, device), result)
        if racecheck.enabled:
            self.made(device, _op_name(op), result, checked)
            if self.runs_on_host(op) and not seeded:  # a GPU waits for these too (shapes or values for the host)
                racecheck.learn(device, self.C.current_stream(device))
        return result

    def regrow(self, original: Tensor, result: Tensor, device: int) -> None:
        """An out= tensor the CPU kernel resized (linalg_lstsq.out grows its empty outs): its host view now holds
        the result, in host memory. The device tensor takes the result's sizes and strides, in new device memory,
        as a device kernel resizing its out would give it (else it kept its old size: an empty result)."""
        fresh = torch.ops.aten.empty_strided(result.size(), result.stride(), dtype=result.dtype,
                                             device=torch.device(self.device_type, device))
        self.C.host_view(fresh).copy_(result)  # the stream is idle: this host write is in order
        torch.ops.aten.set_.source_Tensor(original, fresh)

    def to_device(self, value: Any, views: dict, device: int, like: Tensor | None = None) -> Any:
        if not isinstance(value, Tensor):
            return value
        original = views.get(id(value))
        if original is not None:
            return original
        where = torch.device(self.device_type, device)
        shaped = like if like is not None else value if _dense(value) else None  # whose strides the copy takes
        out = (torch.ops.aten.empty_strided(shaped.size(), shaped.stride(), dtype=value.dtype, device=where)
               if shaped is not None else torch.ops.aten.empty.memory_format(value.size(), dtype=value.dtype, device=where))
        self.C.host_view(out).copy_(value)  # the stream is idle: this host write is in order
        return out

    @contextlib.contextmanager
    def drawing_from_device(self, op: torch._ops.OpOverload, device: int, args: Any, kwargs: dict,
                            drawn: list[int]) -> Iterator[tuple]:
        """Around a random op's CPU kernel: the arguments to run it with, drawing from the device's generator.

        The CPU kernel draws from a CPU generator seeded from the device generator's (seed, offset)
        (:func:`_drawing`): in an op's ``generator`` argument (of the generator given, or the device's), or,
        for an op without one (``native_dropout``, ``randperm``), as torch's default CPU generator, lent for
        the call. Afterwards the generator's offset advances by the ``drawn`` elements, as CUDA's does.
        """
        for index, argument in enumerate(op._schema.arguments):
            if argument.name != "generator":
                continue
            positional = not argument.kwarg_only and index < len(args)
            given = args[index] if positional else kwargs.get("generator")
            with _drawing(given if given is not None else self.C.default_generator(device), drawn) as scratch:
                if positional:
                    args = (*args[:index], scratch, *args[index + 1:])
                else:
                    kwargs["generator"] = scratch
                yield args, kwargs
            return
        with _lent(self.C.default_generator(device), drawn):
            yield args, kwargs

    # -- attention -------------------------------------------------------------------------------
    def attention(self, name: str, device: int, *args: Any, **kwargs: Any) -> Any:
        """The fused attention ops, run with the CPU's flash kernel (the C++ half chose it as the
        CPU would), synchronously: the same numbers as the CPU, forward and backward."""
        self.C.stream_synchronize(device, self.C.current_stream(device))
        host = [self.host(a) for a in args]
        scale = kwargs.get("scale")
        if name.endswith("_backward"):
            grad_out, q, k, v, bias, mask, out, lse = host[:8]
            dropout_p, is_causal = host[12], host[13]
            with self.lent_cpu_generator(device, dropout_p, q, k):
                grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
                    grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask=bias, scale=scale)
            # the strides the op's meta kernel gives (what torch.compile's fake tensors promised)
            metas = self.meta(aten._scaled_dot_product_fused_attention_overrideable_backward.default, args, kwargs)
            moved = [self.to_device(g, {}, device, like=m) if want else None for g, want, m in zip(grads, mask, metas)]
            return (*moved, None)
        q, k, v = host[:3]
        bias = host[3] if len(host) > 3 else kwargs.get("attn_bias")
        dropout_p = host[4] if len(host) > 4 else kwargs.get("dropout_p", 0.0)
        is_causal = host[5] if len(host) > 5 else kwargs.get("is_causal", False)
        with self.lent_cpu_generator(device, dropout_p, q, k):
            out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, attn_mask=bias, scale=scale)
        # every output as the op's meta kernel shapes it (what torch.compile's fake tensors promised);
        # those the CPU kernel does not make (sequence offsets, philox state, debug mask) stay uninitialised
        metas = self.meta(aten._scaled_dot_product_fused_attention_overrideable.default, args, kwargs)
        computed = {0: out, 1: lse}
        results: list[Any] = []
        for index, meta in enumerate(metas):
            if not isinstance(meta, Tensor):
                results.append({4: q.shape[2], 5: k.shape[2]}.get(index, meta))  # max_q, max_k; None as is
            elif index in computed:
                results.append(self.to_device(computed[index], {}, device, like=meta))
            else:
                results.append(self.allocate(meta, device))
        return tuple(results)

    def convolution(self, name: str, device: int, *args: Any) -> Any:
        """The convolution ops a non-CPU device type must provide, queued as the CPU's convolutions."""
        if name.endswith("backward_overrideable"):
            grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, mask = args
            bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
            return self.launch(aten.convolution_backward.default, device,
                               (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                                output_padding, groups, mask), {})
        return self.launch(aten.convolution.default, device, args, {})

    def lent_cpu_generator(self, device: int, dropout_p: float, q: Tensor, k: Tensor) -> Any:
        """Dropout inside the CPU kernel draws from torch's CPU generator: lend it the device's state;
        the offset advances by the attention matrix's elements."""
        if not dropout_p:
            return contextlib.nullcontext()
        return _lent(self.C.default_generator(device), [q.shape[:-1].numel() * k.shape[-2]])

    # -- copies ----------------------------------------------------------------------------------
    def copy(self, name: str, *args: Any, **kwargs: Any) -> Tensor:
        dst, src = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])
        non_blocking = bool(args[2]) if len(args) > 2 else bool(kwargs.get("non_blocking", False))
        if name == "aten::_copy_from_and_resize":  # (it takes no non_blocking: a blocking copy)
            dst.resize_(src.shape)
        on_device = dst if dst.device.type == self.device_type else src
        device = on_device.device.index
        self.C.check_copy_overlap(dst, src)
        between = src.device.type == self.device_type and dst.device.type == self.device_type and src.device != dst.device
        if between:  # the copy runs after the work queued on both devices' current streams, as CUDA's peer copy
            self.C.wait_stream(device, self.C.current_stream(device), src.device.index, self.C.current_stream(src.device.index))
        if racecheck.enabled:
            racecheck.check(device, name, [(t, t is dst, "self" if t is dst else "src") for t in (dst, src)
                                           if t.device.type == self.device_type])
        h_dst, h_src = self.host(dst), self.host(src)
        self.C.launch(device, "aten::copy_", "", (h_dst, h_src), {}, [])
        if between:  # and the source device's later work runs after it
            self.C.wait_stream(src.device.index, self.C.current_stream(src.device.index), device, self.C.current_stream(device))
        host_side = dst if dst.device.type == "cpu" else src if src.device.type == "cpu" else None
        if host_side is not None and not (non_blocking and self.C.is_pinned(host_side)):
            self.C.stream_synchronize(device, self.C.current_stream(device))
            if racecheck.enabled:
                racecheck.learn(device, self.C.current_stream(device))
        return dst


# CUDA's random kernels run a grid-stride loop of 256-thread blocks, as many as the device holds
# (8 SMs x 2048 threads on sim: 64 blocks), each thread drawing 4 values per Philox call; the
# offset advances by 4 per pass over the grid: 4 * ceil(numel / (256 * 64 * 4)).
_ELEMENTS_PER_PASS = 256 * 64 * 4


def offset_advance(numel: int) -> int:
    """How far a random op drawing ``numel`` elements advances the generator's offset (CUDA's rule)."""
    return 4 * max(1, -(-numel // _ELEMENTS_PER_PASS))


def _seed_at(seed: int, offset: int) -> int:
    """The CPU generator's seed for draws at (seed, offset): splitmix64 of the pair, so neighbouring
    offsets and seeds give unrelated streams."""
    z = (seed * 0x9E3779B97F4A7C15 + offset + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


@contextlib.contextmanager
def _drawing(device_generator: torch.Generator, drawn: list[int]) -> Iterator[torch.Generator]:
    """A CPU generator for draws at the device generator's (seed, offset); afterwards the offset
    advances by what the kernel drew (``drawn``: the elements, appended by the caller)."""
    with _RNG_LOCK:
        offset = device_generator.get_offset()
        scratch = torch.Generator("cpu").manual_seed(_seed_at(device_generator.initial_seed(), offset))
        yield scratch
        device_generator.set_offset(offset + offset_advance(max(drawn, default=1)))


@contextlib.contextmanager
def _lent(device_generator: torch.Generator, drawn: list[int]) -> Iterator[None]:
    """torch's default CPU generator seeded for the device generator's (seed, offset) (:func:`_drawing`);
    afterwards the CPU generator gets its own state back."""
    with _RNG_LOCK, _drawing(device_generator, drawn) as scratch:
        cpu = torch.default_generator
        saved = cpu.get_state()
        cpu.set_state(scratch.get_state())
        try:
            yield
        finally:
            cpu.set_state(saved)


def _largest(value: Any) -> int:
    """The most elements of any tensor in ``value``: what a random op drew."""
    return max((t.numel() for t in _leaves(value, []) if isinstance(t, Tensor)), default=1)


_PLANS = 8192  # meta results kept; the cache is emptied when full
_PLAIN = (int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _signature(value: Any) -> Any:
    """A hashable description of everything a meta kernel reads, or None where there is none:
    tensors by device type, dtype, shape, strides and offset (never by value), the rest as is."""
    if isinstance(value, Tensor):
        return (value.device.type, value.dtype, tuple(value.shape), value.stride(), value.storage_offset())
    if isinstance(value, _PLAIN) or isinstance(value, torch._ops.OpOverload):
        return value
    if isinstance(value, (list, tuple)):
        items = tuple(_signature(v) for v in value)
        return None if any(i is None and v is not None for i, v in zip(items, value)) else (type(value).__name__, items)
    if isinstance(value, dict):
        items = tuple((k, _signature(v)) for k, v in value.items())
        return None if any(i is None and value[k] is not None for k, i in items) else ("dict", items)
    return None


def _numbers_as_tensors(op: torch._ops.OpOverload, args: list, kwargs: dict) -> tuple[tuple, dict]:
    """Python numbers where the schema wants a Tensor (torch hands wrapped scalars to Python kernels as
    numbers) as 0-dim host tensors, which the C++ stack builder takes."""
    args = list(args)
    for index, argument in enumerate(op._schema.arguments):
        if argument.type.kind() != "TensorType":
            continue
        if index < len(args) and not argument.kwarg_only:
            if isinstance(args[index], (bool, int, float, complex)):
                args[index] = torch.tensor(args[index])
        elif isinstance(kwargs.get(argument.name), (bool, int, float, complex)):
            kwargs[argument.name] = torch.tensor(kwargs[argument.name])
    return tuple(args), kwargs


def _outgrown(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Tensor]:
    """The out= tensors smaller than an input (reductions): CPU kernels may resize those while they work
    (mse_loss.out grows its 0-dim out to the elementwise shape, then reduces), and host views cannot grow.
    They get a scratch CPU out whose result is copied into device memory: a copy smaller than an input."""
    largest = max((t.numel() for t in _leaves((args, list(kwargs.values())), []) if t is not None), default=0)
    outs = set(_out_names(op))
    return {name: value for name, value in kwargs.items()
            if name in outs and isinstance(value, Tensor) and value.numel() < largest}


def _out_names(op: torch._ops.OpOverload) -> list[str]:
    """The op's out= arguments: keyword-only, written."""
    return [a.name for a in op._schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def _layout(t: Tensor) -> tuple:
    return t.data_ptr(), t.size(), t.stride(), t.storage_offset()


def _op_name(op: torch._ops.OpOverload) -> str:
    """``aten::mul.Tensor``: how the race checker names a kernel."""
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _dense(t: Tensor) -> bool:
    return t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)


_PYTHON_FALLBACK_KEY = "PrivateUse2"  # where sim.cpp's fallback (fallback(), kPythonFallbackKey) redispatches


def register(C: Any, device_type: str) -> list[torch.library.Library]:
    """Register the fallback for PrivateUse1, and the "overrideable" ops (fused attention, convolution:
    torch gives them a kernel for every key that raises until a PrivateUse1 one is registered); the
    libraries must be kept alive."""
    fallback = Fallback(C, device_type)
    everything = torch.library.Library("_", "IMPL")
    # sim.cpp's C++ fallback is PrivateUse1's: it runs the common ops itself and hands the rest on to
    # this one, registered on a backend key nothing else uses (_PYTHON_FALLBACK_KEY)
    everything.fallback(fallback, dispatch_key=_PYTHON_FALLBACK_KEY)
    C.install_fallback()
    overrideable = torch.library.Library("aten", "IMPL")
    for qualified in sorted(_ATTENTION | _CONVOLUTION):  # the fallback's own entry, given the op
        name = qualified.split("::")[1]
        overrideable.impl(name, functools.partial(fallback, getattr(aten, name).default), "PrivateUse1")
    for qualified in cpu_kernels_shadowed():
        name, _, overload = qualified.partition("::")[2].partition(".")
        op = getattr(getattr(aten, name), overload or "default")
        overrideable.impl(qualified.partition("::")[2], functools.partial(fallback, op), "PrivateUse1")
    # A copy to or from a device tensor with a lazy conjugate or negative bit: torch's Conjugate/Negative fallback
    # for _copy_from clones the tensor, and the clone copies with the bit still set, again and again until the
    # stack overflows (SIGSEGV: the backward of a rotary embedding does this). Resolve the bits on the host.
    lazy_bits = torch.library.Library("aten", "IMPL")
    for key in ("Conjugate", "Negative"):
        lazy_bits.impl("_copy_from", _copy_from_with_lazy_bits, key)
    for name in ("_embedding_bag", "_embedding_bag_forward_only"):
        overrideable.impl(name, functools.partial(_embedding_bag, fallback, getattr(aten, name).default), "PrivateUse1")
    for name, kernel in _rnn.KERNELS.items():  # nn.LSTM / nn.GRU's fused cells: CUDA kernels, none for the CPU
        overrideable.impl(name, kernel, "PrivateUse1")
    return [everything, overrideable, lazy_bits]


def _embedding_bag(fallback: Fallback, op: torch._ops.OpOverload, weight: Tensor, indices: Tensor, offsets: Tensor,
                   scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                   per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                   padding_idx: int = -1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The CPU kernel through the fallback, its auxiliary outputs shaped and filled as CUDA's kernel (and the meta
    kernel, what compiled code expects) makes them:

    * ``offset2bag``, the bag of each index, always: the CPU kernel leaves it empty where the weight needs no
      gradient, which on sim's host views (no autograd) is always, and the backward indexes with it;
    * ``bag_size`` one entry per offset, so one more than the bags with ``include_last_offset`` (the CPU kernel's
      has one per bag). That case runs as the bags' start offsets without the last, its documented equivalent
      (the last offset is the number of indices)."""
    starts = aten.slice.Tensor(offsets, 0, 0, offsets.numel() - 1) if include_last_offset else offsets
    output, offset2bag, bag_size, max_indices = fallback(
        op, weight, indices, starts, scale_grad_by_freq, mode, sparse, per_sample_weights, False, padding_idx)
    count = indices.numel()
    if count and offset2bag.numel() == count:
        positions = aten.arange.start(0, count, dtype=starts.dtype, device=indices.device)
        aten.copy_.default(offset2bag, aten.sub.Scalar(aten.searchsorted.Tensor(starts, positions, right=True), 1))
    if include_last_offset:
        per_offset = aten.new_zeros.default(bag_size, [offsets.numel()])
        aten.copy_.default(aten.slice.Tensor(per_offset, 0, 0, starts.numel()), bag_size)
        bag_size = per_offset
    return output, offset2bag, bag_size, max_indices


def _raw(t: Tensor) -> Tensor:
    """A view of ``t``'s memory as it is stored: its lazy conjugate and negative bits dropped."""
    t = t.conj() if t.is_conj() else t
    return torch._neg_view(t) if t.is_neg() else t


def _copy_from_with_lazy_bits(src: Tensor, dst: Tensor, non_blocking: bool = False) -> Tensor:
    """``dst.copy_(src)`` where either has a lazy bit: src's values made on the host from its stored memory, then
    stored into dst's memory as its own bits read them back (both bits are their own inverses)."""
    values = _raw(src).cpu()
    values = values.conj() if src.is_conj() else values
    values = torch._neg_view(values) if src.is_neg() else values
    stored = values.conj() if dst.is_conj() else values
    stored = torch._neg_view(stored) if dst.is_neg() else stored
    _raw(dst).copy_(stored.resolve_conj().resolve_neg(), non_blocking=non_blocking)
    return dst


_COMPOSITES = ("CompositeExplicitAutograd", "CompositeImplicitAutograd")


def cpu_kernels_shadowed() -> list[str]:
    """The aten ops with a CPU kernel of their own beside a composite one (explicit or implicit autograd),
    and no PrivateUse1 kernel (``native_group_norm``, ``native_layer_norm``, ``addr``, ``all.dims``,
    ``silu_backward``, ``mish_backward`` ...).

    The dispatcher prefers a composite kernel to a backend fallback, so without a kernel of sim's
    these would run their generic decomposition, not the CPU's kernel: other numbers, and layouts the
    decomposition refuses (``math_group_norm`` views a channels_last input, which fails;
    ``math_silu_backward`` rounds each of its steps to the dtype, where the CPU's and CUDA's
    kernels compute in float and round once: in bfloat16 gradients up to 0.03 apart). A GPU has its
    own kernel there; sim's is the CPU's, through the fallback."""
    found = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        qualified = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        has = functools.partial(torch._C._dispatch_has_kernel_for_dispatch_key, qualified)
        try:
            shadowed = has("CPU") and any(map(has, _COMPOSITES)) and not has("PrivateUse1")
        except RuntimeError:  # a JIT-only builtin schema (aten::has_torch_function ...): no dispatcher entry
            continue
        if shadowed:
            found.append(qualified)
    return sorted(found)
