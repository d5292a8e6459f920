"""The operation families as a reference: documented signatures, implementations that match
them, and the generated hook reference of docs/plugins.md that shows them."""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch

from torchdevice.backend import (
    FAMILIES,
    CollectiveOps,
    EventInterface,
    MemoryOps,
    RNGOps,
    Status,
    StreamInterface,
    StreamOps,
    status_of,
)
from torchdevice.errors import UnsupportedError
from torchdevice.testing import _render_signature, hook_reference_is_current, hook_reference_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"

#: The modules holding every family implementation this repository ships, first-party plugins and the sample.
IMPLEMENTATIONS = ("torchdevice.cpu", "torchdevice.collectives", "torchdevice.streams", "torchdevice.torch_backend",
                   "torchdevice_cuda", "torchdevice_mps", "torchdevice_mtia", "torchdevice_xpu",
                   "torchdevice_mlx.backend", "torchdevice_simchip")

#: One valid argument list per operation, for calling the base's unsupported default as the router does.
ARGS = {
    "set_per_process_memory_fraction": (0.5, 0), "set_rng_state": (torch.zeros(4, dtype=torch.uint8), 0),
    "manual_seed": (1,), "manual_seed_all": (1,), "set_stream": (None,), "sleep": (10.0, 0),
    "broadcast": (torch.ones(1), [0]), "broadcast_coalesced": ([torch.ones(1)], [0]),
    "reduce_add": ([torch.ones(1)], 0), "reduce_add_coalesced": ([[torch.ones(1)]], 0),
    "scatter": (torch.ones(2), [0]), "gather": ([torch.ones(1)],),
}


def _all_ops():
    return [(family, cls, op) for family, cls in FAMILIES.items() for op in cls.operations()]


def _args_for(op: str, fn) -> tuple:
    if op in ARGS:
        return ARGS[op]
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    assert [p.name for p in params] in ([], ["index"]), f"add {op} to ARGS"
    return (0,) * len(params)


def _loaded(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(f"{module} is not installed: {exc}")


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _defined(cls, name):
    """The attribute ``name`` as the first class in ``cls``'s MRO defines it, and that class."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass, vars(klass)[name]
    raise AttributeError(name)


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


def _explicit(fn) -> bool:
    """Whether ``fn`` spells its parameters out (not a ``calls()``/``unsupported()`` operation taking ``*args``)."""
    kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
    return inspect.isfunction(fn) and not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}


# -- the declarations ----------------------------------------------------------------------------


@pytest.mark.parametrize("family,cls,op", _all_ops(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_operation_is_declared_with_types_and_a_one_line_summary(family, cls, op):
    fn = getattr(cls, op)
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != "self"]
    assert _explicit(inspect.unwrap(fn)), f"{family}.{op} declares *args/**kwargs: {sig}"
    assert all(p.annotation is not p.empty for p in params), f"{family}.{op}: unannotated parameter in {sig}"
    assert sig.return_annotation is not sig.empty, f"{family}.{op}: no return annotation"
    summary = (fn.__doc__ or "").strip().splitlines()
    assert summary and summary[0].endswith(".") and len(summary[0]) > 30, f"{family}.{op}: {summary!r}"
    assert summary[0].split()[0] in {"Return", "Reset", "Release", "Cap", "Make", "Block", "Seed", "Restore",
                                     "Queue"}


@pytest.mark.parametrize("family,cls,op", _all_ops(), ids=lambda v: v if isinstance(v, str) else "")
def test_an_operation_not_overridden_is_unsupported_however_it_is_called(family, cls, op):
    ops = cls("fakechip")
    assert status_of(ops, op) == (Status.UNSUPPORTED, "")
    fn = getattr(ops, op)
    for args in (_args_for(op, getattr(cls, op)), ()):  # as the router calls it, and as the kit probes it
        with pytest.raises(UnsupportedError) as caught:
            fn(*args)
        assert (caught.value.function, caught.value.backend) == (op, "fakechip")


def test_the_documented_signatures():
    expected = {
        (MemoryOps, "empty_cache"): "empty_cache() -> None",
        (MemoryOps, "set_per_process_memory_fraction"):
            "set_per_process_memory_fraction(fraction: float, index: int) -> None",
        (MemoryOps, "mem_get_info"): "mem_get_info(index: int) -> tuple[int, int]",
        (StreamOps, "current_device"): "current_device() -> int",
        (RNGOps, "manual_seed"): "manual_seed(seed: int) -> None",
        (RNGOps, "set_rng_state"): "set_rng_state(state: torch.Tensor, index: int) -> None",
        (RNGOps, "get_rng_state"): "get_rng_state(index: int) -> torch.Tensor",
        (CollectiveOps, "gather"): "gather(tensors: list[torch.Tensor], dim: int = 0, destination: int | None = None, "
                                   "out: torch.Tensor | None = None) -> torch.Tensor",
        (EventInterface, "elapsed_time"): "elapsed_time(end_event: EventInterface) -> float",
        (StreamInterface, "record_event"): "record_event(event: EventInterface | None = None) -> EventInterface",
    }
    for (cls, op), text in expected.items():
        assert _render_signature(getattr(cls, op), op) == text
    assert "milliseconds" in EventInterface.elapsed_time.__doc__.splitlines()[0]


# -- the implementations match them -----------------------------------------------------------------


@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_implementations_take_the_documented_parameters(module, monkeypatch):
    if module == "torchdevice_simchip":  # the sample is not installed by the test environments: import its source
        monkeypatch.syspath_prepend(str(DOCS.parents[1] / "examples" / "vendor-plugin"))
    _loaded(module)
    checked = 0
    for base in FAMILIES.values():
        for cls in _subclasses(base):
            if not cls.__module__.startswith(module):
                continue
            for op in base.operations():
                owner, fn = _defined(cls, op)
                if owner is base or not _explicit(fn):
                    continue
                assert _params(fn) == _params(getattr(base, op)), (
                    f"{cls.__module__}.{cls.__qualname__}.{op}{inspect.signature(fn)} differs from the documented "
                    f"{base.__name__}.{op}{inspect.signature(getattr(base, op))}")
                checked += 1
    for iface, attr in ((StreamInterface, "Stream"), (EventInterface, "Event")):
        for ops_cls in _subclasses(StreamOps):
            cls = getattr(ops_cls, attr, None)
            if not ops_cls.__module__.startswith(module) or not isinstance(cls, type):
                continue
            assert issubclass(cls, iface), f"{ops_cls.__qualname__}.{attr} = {cls} does not implement {iface.__name__}"
            for name, member in vars(iface).items():
                if name.startswith("_") or isinstance(member, property):
                    continue
                _, fn = _defined(cls, name)
                assert _params(fn) == _params(member), f"{cls.__qualname__}.{name}{inspect.signature(fn)}"
                checked += 1
    if module not in ("torchdevice.torch_backend", "torchdevice_cuda", "torchdevice_xpu"):
        assert checked, f"nothing of {module} was checked"  # those override only through calls()/torch's classes


def test_torch_streams_and_events_have_the_interfaces():
    assert issubclass(torch.Stream, StreamInterface) and issubclass(torch.Event, EventInterface)
    with pytest.raises(TypeError, match="abstract"):
        type("Incomplete", (EventInterface,), {"record": lambda self, stream=None: None})()


# -- the generated reference -------------------------------------------------------------------------


def test_the_reference_lists_every_operation_with_its_signature_and_summary():
    text = DOCS.read_text()
    generated = hook_reference_markdown()
    assert generated in text
    for family, cls, op in _all_ops():
        fn = getattr(cls, op)
        line = f"* `{_render_signature(fn, op)}`: {fn.__doc__.strip().splitlines()[0]}"
        line = line.replace("``", "`")
        assert line in generated, f"{family}.{op} is not listed as\n{line}"
    for iface in (StreamInterface, EventInterface):
        for name, member in vars(iface).items():
            if not name.startswith("_") and not isinstance(member, property):
                assert f"* `{_render_signature(member, name)}`" in generated
    for needle in ("`set_rng_state(state: torch.Tensor, index: int) -> None`",
                   "`set_per_process_memory_fraction(fraction: float, index: int) -> None`",
                   "`elapsed_time(end_event: EventInterface) -> float`: Return the milliseconds",
                   "`mem_get_info(index: int) -> tuple[int, int]`", "`empty_cache() -> None`"):
        assert needle in text
    assert re.search(r"manual_seed.*current\* device only", text.replace("\n", " "))


def test_the_reference_goes_stale_when_an_operation_changes(tmp_path, monkeypatch):
    copy = tmp_path / "plugins.md"
    copy.write_text(DOCS.read_text())
    assert hook_reference_is_current(str(copy))
    monkeypatch.setattr(MemoryOps.mem_get_info, "__doc__", "Return something else.")
    assert not hook_reference_is_current(str(copy))
    monkeypatch.undo()

    def mem_get_info(self, index: int, extra: int = 0) -> tuple[int, int]:
        """Return ``(free, total)`` bytes of device ``index``'s memory, as ``torch.cuda.mem_get_info``."""

    monkeypatch.setattr(MemoryOps.mem_get_info, "__wrapped__", mem_get_info)
    assert not hook_reference_is_current(str(copy))
