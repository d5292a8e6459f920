"""``torch.accelerator`` answering as the source family's accelerator while translating.

Code written the device-agnostic way asks ``torch.accelerator`` instead of ``torch.cuda``
(pytorch/examples: ``device = torch.accelerator.current_accelerator() if
torch.accelerator.is_available() else torch.device("cpu")``). On a machine without the source
device torch answers "no accelerator" and the program would take its CPU path; while translating,
``torch.accelerator`` answers as the source family's namespace does (``torch.cuda`` by default):

* ``is_available()`` / ``device_count()`` / ``current_device_index()`` / ``set_device_index()`` /
  ``synchronize()`` / ``current_stream()`` / ``set_stream()`` and the memory functions
  (``memory_allocated`` ... ``empty_cache``, ``get_memory_info`` = ``mem_get_info``) are built by the
  source family's own rows (:data:`SAME_AS`): the same builder, the same status, so
  ``torch.accelerator.memory_allocated()`` is ``torch.cuda.memory_allocated()``'s answer;
* ``current_accelerator()`` is ``torch.device("cuda")`` (the source family's type, no index, as
  torch answers on a CUDA machine) while ``is_available()`` is True, else None; moving to it
  (``.to(acc)``) is translated like any cuda device, and ``acc.type`` names the family the
  program branches on (``torch.autocast(acc.type)``, ``torch.get_device_module(acc)``);
* ``device_index(i)`` is the context manager over the per-thread current device;
* ``get_device_capability()`` gives ``{"supported_dtypes": ...}``: the dtypes a program's tensor on
  the target is created in and converted from, probed once per device through the translated
  factories (unnoted: :func:`torchdevice.trace.muted`);
* ``empty_host_cache()`` is torch's own on a target that is the machine's accelerator, else a
  no-op (host memory is not pinned on a host target: nothing is cached);
* ``Graph`` is unsupported where the source family's graphs are.

``torch.Stream`` / ``torch.Event`` are left as torch has them: they make streams of the machine's
device type (the target's on cpu and sim).

The boundary: every function is split (:func:`torchdevice.boundary.split`) so that *all* of torch's
own code -- including what acts on the program's behalf elsewhere (``torch.nn.parallel``,
``torch.distributed``, ``torch.random.fork_rng``) -- keeps torch's real answers: those callers
compare ``current_accelerator().type`` with the devices of tensors, which live on the target.
Nothing is installed when the source family is the target's own device type (``torch.accelerator``
is then torch's own), and :func:`torchdevice.unpatch` restores every attribute.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Literal

import torch

from .. import boundary
from ..router import Target
from ..vocabulary import RealDevice, optional_index
from .rules import NATIVE, NOOP, TRANSLATED, UNSUPPORTED, Rule, declared
from .table import SPECS, Builder, Spec, fronts
from .wrapping import _raiser, _traced_class, _unsupported_class, _wrap

#: the ``torch.accelerator`` functions answered by the source family's row of the same meaning
SAME_AS = {
    "is_available": "is_available", "device_count": "device_count",
    "current_device_index": "current_device", "current_device_idx": "current_device",
    "set_device_index": "set_device", "set_device_idx": "set_device",
    "synchronize": "synchronize", "current_stream": "current_stream", "set_stream": "set_stream",
    "empty_cache": "empty_cache", "memory_stats": "memory_stats", "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated", "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved", "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats", "get_memory_info": "mem_get_info",
    "Graph": "CUDAGraph",
}
#: torch's deprecated spellings: a FutureWarning, as torch gives, then the new function
DEPRECATED = {"current_device_idx": "current_device_index", "set_device_idx": "set_device_index"}
#: the submodules of ``torch.accelerator`` that hold (re-exported) functions: patched alike
SUBMODULES = ("memory", "graphs")

ACCELERATOR_SPECS: dict[str, Spec] = {}


def _same_as_rule(row: str) -> Rule:
    """The status of the source family's ``row`` (read when asked: the optional ops wrap rows after import)."""

    def rule(target: Target, ns: str) -> tuple[Any, str]:
        status, note = SPECS[row].rule(target, ns)
        return status, f"as torch.{ns}.{row}" + (f": {note}" if note else "")

    return rule


def _same_as_builder(row: str) -> Builder:
    def build(target: Target, ns: str, name: str) -> Any:
        make = SPECS[row].build
        return None if make is None else make(target, ns, row)

    build.__qualname__ = f"same_as({row!r})"
    return build


for _name, _row in SAME_AS.items():
    ACCELERATOR_SPECS[_name] = Spec(_same_as_rule(_row), _same_as_builder(_row),
                                    "class" if _name == "Graph" else "function",
                                    "torchdevice/namespaces/accelerator.py (SAME_AS)")


@fronts("current_accelerator", declared(
    TRANSLATED, "torch.device('{ns}') (the source family, no index) while torch.{ns}.is_available() is True, "
    "else None; torch's own code gets torch's answer", ), table=ACCELERATOR_SPECS)
def build_current_accelerator(target: Target, ns: str, name: str) -> Callable[..., Any]:
    device = RealDevice(ns) if target.available_for(ns) else None

    def current_accelerator(check_available: bool = False) -> torch.device | None:
        return device

    return current_accelerator


@fronts("device_index", declared(
    TRANSLATED, "context manager over the per-thread current device of the {backend} backend (None: no change)"),
    kind="class", table=ACCELERATOR_SPECS)
def build_device_index(target: Target, ns: str, name: str) -> type:
    current, set_device_op, index = target.streams.current_device, target.streams.set_device, target.index

    class device_index:
        """Make device ``device`` current for this thread inside the block, then restore the previous one."""

        def __init__(self, device: int | None, /) -> None:
            self.idx = device
            self.prev_idx = -1

        def __enter__(self) -> None:
            if self.idx is not None and optional_index(self.idx, current) >= 0:
                self.prev_idx = current()
                set_device_op(index(self.idx))

        def __exit__(self, *exc_info: object) -> Literal[False]:
            if self.prev_idx >= 0 and current() != self.prev_idx:
                set_device_op(self.prev_idx)
            return False

    device_index.__module__ = "torch.accelerator"
    return device_index


#: the dtypes ``get_device_capability`` tries (the ones torch names publicly, unsigned and float8 included)
_CANDIDATE_DTYPES = tuple(d for d in (getattr(torch, n, None) for n in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16",
    "float32", "float64", "complex32", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")) if isinstance(d, torch.dtype))


def _probe_dtypes(device: str) -> set[torch.dtype]:
    """The dtypes a program's one-element tensor on ``device`` ("cuda:0") is created in and converted to and
    from float32, through the program's own (translated) path, unnoted."""
    from .. import trace

    found = set()
    with warnings.catch_warnings(), trace.muted():
        warnings.simplefilter("ignore")
        for dtype in _CANDIDATE_DTYPES:
            try:
                torch.ones(1, dtype=dtype, device=device).to(torch.float32).to(dtype)
            except Exception:  # the target's refusal, whatever its class: not supported there
                continue
            found.add(dtype)
    return found


@fronts("get_device_capability", declared(
    TRANSLATED, "{{'supported_dtypes': ...}}: the dtypes a program's tensor on the {backend} backend is created "
    "in and converted across (probed once per device, through the translated factories)"), table=ACCELERATOR_SPECS)
def build_get_device_capability(target: Target, ns: str, name: str) -> Callable[..., Any]:
    index = target.index
    found: dict[int, set[torch.dtype]] = {}

    def get_device_capability(device: Any = None, /) -> dict[str, Any]:
        i = index(device)
        if i not in found:
            found[i] = _probe_dtypes(f"{ns}:{i}")
        return {"supported_dtypes": set(found[i])}

    return get_device_capability


def _empty_host_cache_rule(target: Target, ns: str) -> tuple[Any, str]:
    if target.device_type == "cpu":
        return NOOP, ("the {backend} backend's tensors live in host memory, which translation never pins: "
                      "there is no cached pinned memory to release").format(backend=target.name)
    return NATIVE, f"torch's own torch.accelerator.empty_host_cache: the {target.name} backend's device is the machine's"


@fronts("empty_host_cache", _empty_host_cache_rule, table=ACCELERATOR_SPECS)
def build_empty_host_cache(target: Target, ns: str, name: str) -> Callable[..., Any]:
    real = torch.accelerator.empty_host_cache  # captured at install, before the commit: torch's own
    host = target.device_type == "cpu"

    def empty_host_cache() -> None:
        if not host:
            real()

    return empty_host_cache


def _warning(impl: Callable[..., Any], old: str, new: str) -> Callable[..., Any]:
    """``impl`` giving torch's FutureWarning for the deprecated spelling ``old`` first."""
    from .. import trace

    message = f"Use `{new}` instead."

    def deprecated(*args: Any) -> Any:
        trace.warn(message, FutureWarning)
        return impl(*args)

    deprecated.__name__ = deprecated.__qualname__ = old
    return deprecated


def names() -> list[str]:
    """Every ``torch.accelerator`` name translation gives a behaviour (those this torch has), sorted."""
    return sorted(n for n in ACCELERATOR_SPECS if hasattr(torch.accelerator, n))


def apis() -> list[str]:
    """:func:`names` as API names (``torch.accelerator.is_available`` ...), for ``torchdevice matrix``."""
    return [f"torch.accelerator.{n}" for n in names()]


def status(target: Target, api: str, source: str = "cuda") -> tuple[Any, str] | None:
    """``(Status, note)`` of ``torch.accelerator.<name>`` (or ``torch.accelerator.memory.<name>``) on ``target``
    for a program written for ``source``; None for a name with no row."""
    parts = api.split(".")
    if parts[:2] != ["torch", "accelerator"] or len(parts) not in (3, 4) or (
            len(parts) == 4 and parts[2] not in SUBMODULES):
        return None
    spec = ACCELERATOR_SPECS.get(parts[-1])
    if spec is None:
        return None
    if target.device_type == source:
        return NATIVE, f"torch.accelerator itself: the {target.name} backend's device is the {source} accelerator"
    return spec.rule(target, source)


def _build(target: Target, name: str, spec: Spec) -> Any:
    """The object ``torch.accelerator.<name>`` becomes for this install (None: left as torch has it)."""
    api, ns = f"torch.accelerator.{name}", target.source
    status_, note = spec.rule(target, ns)
    built = None if status_ is UNSUPPORTED or spec.build is None else spec.build(target, ns, name)
    if spec.kind == "class":
        if built is None:
            return _unsupported_class(api, target.name, note, name)
        return _traced_class(built, api, status_, note)
    if built is None:
        return _raiser(api, target.name, note, name)
    if name in DEPRECATED:
        built = _warning(built, name, DEPRECATED[name])
    return _wrap(api, status_, note, built, name)


def install(patcher: Any, target: Target) -> dict[str, Any]:
    """Make ``torch.accelerator`` answer as ``torch.<source>`` does (see the module docstring); return
    what was put in place, by name. Nothing when the source family is the target's own device type."""
    if target.source not in target.sources:
        return {}
    module = torch.accelerator
    submodules = [m for m in (getattr(module, s, None) for s in SUBMODULES) if m is not None]
    objects: dict[str, Any] = {}
    for name in names():
        obj = _build(target, name, ACCELERATOR_SPECS[name])
        if callable(obj) and not isinstance(obj, type):
            # every caller inside torch gets torch's answer (see the module docstring)
            obj = boundary.split(obj, patcher.get(module, name), internal=boundary.in_torch)
        objects[name] = obj
        patcher.set(module, name, obj)
        for sub in submodules:
            if name in vars(sub):
                patcher.set(sub, name, obj)
    return objects
