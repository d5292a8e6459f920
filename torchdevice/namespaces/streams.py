"""``torch.<ns>`` stream functions and classes: Stream, Event, current/default stream, StreamContext,
graphs (unsupported), the sync debug mode."""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

from ..backend import DEFAULT_CLOCK_KHZ, Status, status_of
from ..router import Target
from .rules import EMULATED, NOOP, all_of, declared, op_or_host, op_rule, stream_class_rule, when_op
from .table import declare_unsupported, fronts


@fronts("current_stream", op_rule("streams", "current_stream"))
def build_current_or_default_stream(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = getattr(target.streams, name), target.index

    def impl(device: Any = None) -> Any:
        return fn(index(device))

    impl.__name__ = impl.__qualname__ = name
    return impl


fronts("default_stream", op_rule("streams", "default_stream"))(build_current_or_default_stream)


def _set_stream_impl(target: Target) -> Callable[[Any], None]:
    set_stream_op, set_device_op, current = target.streams.set_stream, target.streams.set_device, target.streams.current_device

    def set_stream(stream: Any) -> None:
        if stream is None:
            return  # a no-op, as torch.cuda.set_stream(None)
        index = getattr(stream, "device_index", None)
        if index is not None and index >= 0 and index != current():
            set_device_op(index)  # CUDA's set_stream also makes the stream's device current
        set_stream_op(stream)

    return set_stream


@fronts("set_stream", all_of(("streams", "set_stream"), ("streams", "set_device")))
def build_set_stream(target: Target, ns: str, name: str) -> Callable[..., Any]:
    return _set_stream_impl(target)


@fronts("StreamContext", all_of(("streams", "set_stream"), ("streams", "current_stream"), ("streams", "set_device"),
                               how="selects a stream (and its device) for its block, then restores both"),
       kind="class")
def build_StreamContext(target: Target, ns: str, name: str) -> type:
    set_stream = _set_stream_impl(target)
    current_stream_op, index = target.streams.current_stream, target.index

    class StreamContext:
        """Context manager that selects ``stream`` (None: no-op), as ``torch.cuda.StreamContext``."""

        def __init__(self, stream: Any) -> None:
            self.stream = stream
            self.src_prev_stream: Any = None
            self.dst_prev_stream: Any = None

        def __enter__(self) -> None:
            cur = self.stream
            if cur is None:
                return
            self.src_prev_stream = current_stream_op(index(None))
            if self.src_prev_stream.device_index != cur.device_index:
                self.dst_prev_stream = current_stream_op(index(cur.device_index))
            set_stream(cur)

        def __exit__(self, *exc: object) -> None:
            cur = self.stream
            if cur is None:
                return
            if self.src_prev_stream.device_index != cur.device_index:
                set_stream(self.dst_prev_stream)
            set_stream(self.src_prev_stream)

    StreamContext.__module__ = f"torch.{ns}"
    return StreamContext


@fronts("stream", all_of(("streams", "set_stream"), ("streams", "current_stream"), ("streams", "set_device"),
                        how="returns torch.{ns}.StreamContext(stream)"))
def build_stream(target: Target, ns: str, name: str) -> Callable[..., Any]:
    context = target.state[f"{ns}.StreamContext"]

    def stream(stream: Any) -> Any:
        return context(stream)

    return stream


@fronts("Stream", stream_class_rule("Stream"), kind="class")
def build_Stream(target: Target, ns: str, name: str) -> type | None:
    return target.streams.Stream


@fronts("Event", stream_class_rule("Event"), kind="class")
def build_Event(target: Target, ns: str, name: str) -> type | None:
    return target.streams.Event


@fronts("is_current_stream_capturing", declared(
    EMULATED, "always False: graph capture does not exist on the {backend} backend, so none can be underway",
))
def build_is_current_stream_capturing(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def is_current_stream_capturing() -> bool:
        return False

    return is_current_stream_capturing


@fronts("_sleep", op_or_host(
    "streams", "sleep", "queues cycles / clock_rate ms on the current stream of the current device",
    (EMULATED, "the calling thread sleeps cycles / clock_rate ms: work on the {backend} backend is complete when its "
               "call returns, as a kernel of that length would be"),
    "the {backend} backend cannot queue a wait on a stream (its streams family has no sleep operation); "
    "time.sleep() waits on the host",
))
def build_sleep(target: Target, ns: str, name: str) -> Callable[..., Any]:
    """``torch.<ns>._sleep(cycles)``: the backend's ``streams.sleep(ms, index)``, or a host sleep where it has none."""
    queued = status_of(target.streams, "sleep")[0] is not Status.UNSUPPORTED
    sleep_op = target.streams.sleep if queued else None
    current, properties = target.streams.current_device, target.properties

    def _sleep(cycles: int) -> None:
        index = current()
        ms = int(cycles) / (properties(index).clock_rate or DEFAULT_CLOCK_KHZ)
        if sleep_op is not None:
            sleep_op(ms, index)
        else:
            time.sleep(ms / 1000)

    return _sleep


_SYNC_DEBUG = (
    EMULATED,
    "kept by torchdevice; it never fires because work on the {backend} backend is complete when its call "
    "returns, so no operation synchronizes with a device",
)
_SYNC_DEBUG_NO = "the {backend} backend cannot report which operations synchronize"
_MODES = {"default": 0, "warn": 1, "error": 2}


@fronts("set_sync_debug_mode", when_op("streams", "synchronize", NOOP, _SYNC_DEBUG, _SYNC_DEBUG_NO))
def build_set_sync_debug_mode(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def set_sync_debug_mode(debug_mode: int | str) -> None:
        if isinstance(debug_mode, str):
            if debug_mode not in _MODES:
                raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
            debug_mode = _MODES[debug_mode]
        if not isinstance(debug_mode, int) or debug_mode not in (0, 1, 2):
            raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected 0, 1 or 2")
        target.state["sync_debug_mode"] = int(debug_mode)

    return set_sync_debug_mode


@fronts("get_sync_debug_mode", declared(
    EMULATED, "the mode set_sync_debug_mode kept (0, 'default', where it cannot be set on the {backend} backend): "
    "no operation on it is reported as synchronizing",
))
def build_get_sync_debug_mode(target: Target, ns: str, name: str) -> Callable[..., Any]:
    state = target.state

    def get_sync_debug_mode() -> int:
        return state.get("sync_debug_mode", 0)

    return get_sync_debug_mode


declare_unsupported("get_stream_from_external",
                    "external {ns} streams cannot be wrapped on the {backend} backend; create one with torch.{ns}.Stream()")
declare_unsupported("graph_pool_handle", "graphs do not exist on the {backend} backend; run the work eagerly")
declare_unsupported("cudart", "the CUDA runtime exists only on NVIDIA GPUs; use torch.profiler for profiling ranges and "
                    "torch.cuda.synchronize()/Event for timing")
declare_unsupported("current_blas_handle", "cuBLAS handles exist only on CUDA")
declare_unsupported("compile_shader", "Metal shaders run only on MPS; write the kernel with torch operations")

declare_unsupported(("CUDAGraph", "XPUGraph", "MTIAGraph", "graph"),
                    "graphs do not exist on the {backend} backend; run the captured work eagerly", kind="class")
declare_unsupported(("MemPool", "CUDAPluggableAllocator", "XPUPluggableAllocator"),
                    "memory pools and pluggable allocators belong to the {ns} caching allocator; allocate normally on "
                    "the {backend} backend", kind="class")
declare_unsupported("ExternalStream", "external {ns} streams cannot be wrapped on the {backend} backend; create one "
                    "with torch.{ns}.Stream()", kind="class")


@fronts("make_graphed_callables", declared(
    NOOP, "graphs do not exist on the {backend} backend: the callables are returned as they are and run eagerly, "
    "computing the same results without graph replay",
))
def build_make_graphed_callables(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                               allow_unused_input: bool = False, pool: Any = None) -> Any:
        return callables

    return make_graphed_callables


@fronts("check_error", declared(
    EMULATED, "0 (cudaSuccess) passes; any other CUDA runtime result code raises torch.cuda.CudaError",
))
def build_check_error(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def check_error(res: int) -> None:
        if res != 0:
            error_class = getattr(torch.cuda, "CudaError", RuntimeError)
            error = error_class.__new__(error_class)
            RuntimeError.__init__(error, f"CUDA runtime error ({res})")
            raise error

    return check_error
