"""``torch.cuda.nvtx``: ranges and marks, dropped with their depths and ids kept per thread."""
from __future__ import annotations

import threading

from .rules import NOOP, declared
from .table import NVTX_SPECS, _spec

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


@_spec("range_push", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range_push(fx, ns, name):
    def range_push(msg) -> int:
        stack = _nvtx_depth()
        stack.append(msg)
        return len(stack) - 1

    return range_push


@_spec("range_pop", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range_pop(fx, ns, name):
    def range_pop() -> int:
        stack = _nvtx_depth()
        if not stack:
            return -1  # NVTX's answer for a pop without a push
        stack.pop()
        return len(stack)

    return range_pop


@_spec("range_start", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range_start(fx, ns, name):
    def range_start(msg) -> int:
        with _nvtx_lock:
            return next(_nvtx_ids)

    return range_start


@_spec(("range_end", "mark"), declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_nvtx_none(fx, ns, name):
    def impl(arg) -> None:
        return None

    impl.__name__ = impl.__qualname__ = name
    return impl


@_spec("range", declared(NOOP, _NVTX_NOTE), table=NVTX_SPECS)
def _b_range(fx, ns, name):
    import contextlib

    push, pop = fx.state["nvtx.range_push"], fx.state["nvtx.range_pop"]

    @contextlib.contextmanager
    def range(msg, *args, **kwargs):
        push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            pop()

    return range
