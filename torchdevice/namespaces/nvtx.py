"""``torch.cuda.nvtx``: ranges and marks, dropped with their depths and ids kept per thread."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

from ..router import Target
from .rules import NOOP, declared
from .table import NVTX_SPECS, fronts

_NVTX_NOTE = ("no NVTX profiler on the {backend} backend: the annotation is dropped; range depths and ids are "
              "tracked per thread so the values returned are the true ones")
_nvtx_state = threading.local()
_nvtx_ids = iter(range(1, 2**63))
_nvtx_lock = threading.Lock()


def _nvtx_depth() -> list:
    try:
        return _nvtx_state.stack
    except AttributeError:
        _nvtx_state.stack = []
        return _nvtx_state.stack


@fronts("range_push", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def build_range_push(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def range_push(msg: str) -> int:
        stack = _nvtx_depth()
        stack.append(msg)
        return len(stack) - 1

    return range_push


@fronts("range_pop", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def build_range_pop(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def range_pop() -> int:
        stack = _nvtx_depth()
        if not stack:
            return -1  # NVTX's answer for a pop without a push
        stack.pop()
        return len(stack)

    return range_pop


@fronts("range_start", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def build_range_start(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def range_start(msg: str) -> int:
        with _nvtx_lock:
            return next(_nvtx_ids)

    return range_start


@fronts(("range_end", "mark"), declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def build_range_end_or_mark(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def impl(arg: Any) -> None:
        return None

    impl.__name__ = impl.__qualname__ = name
    return impl


@fronts("range", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def build_range(target: Target, ns: str, name: str) -> Callable[..., Any]:
    import contextlib

    push, pop = target.state["nvtx.range_push"], target.state["nvtx.range_pop"]

    @contextlib.contextmanager
    def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
        push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            pop()

    return range
