"""sim's stream race checker: a kernel on one stream using memory another stream used, unordered.

On a GPU, streams run at once: a kernel on stream S reading a tensor that a kernel on stream T
wrote is correct only if the program ordered the two (``S.wait_stream(T)``, an event recorded on T
after the write and waited on by S, or the host synchronizing T, the event or the device before
launching on S). sim runs streams concurrently too, so such a race gives wrong numbers there only
when the timing happens to expose it; the checker reports it every time, at the launching call, as
torch's CUDA stream sanitizer (``TORCH_CUDA_SANITIZER=1``) does for CUDA.

Turned on by ``TORCHDEVICE_SIM_RACECHECK=1`` when sim loads, or by :func:`set_racecheck`. The
bookkeeping is in the C++ half (``sim.cpp``, "race checking"): a vector clock per stream, captured by
event records, merged by event waits, learned by the host when it synchronizes; per device memory
block, the last write and the reads since. The fallback (``_kernels.py``) tells it, before each
kernel is queued, which device tensors the kernel reads and which it writes (from the op's schema).
Off, the fallback tests one module attribute and the C++ hooks one flag.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["SimRaceError", "set_racecheck", "racecheck_enabled"]

#: whether the fallback reports accesses to the checker (read on every op: keep it a plain attribute)
enabled = False
_C: Any = None  # the extension module, set by torchdevice_sim.load()


class SimRaceError(RuntimeError):
    """A kernel on one sim stream uses memory that another stream used without being ordered after it."""


def _bind(extension: Any) -> None:
    global _C
    _C = extension


def set_racecheck(on: bool) -> bool:
    """Turn the race checker on or off for the whole process; returns whether it was on.

    Work queued before it is turned on counts as finished: the checker starts as if the host had
    synchronized every device. sim must be loaded (:func:`torchdevice_sim.load`).
    """
    global enabled
    if _C is None:
        raise RuntimeError("sim is not loaded: call torchdevice_sim.load() before set_racecheck()")
    was = enabled
    _C.race_enable(bool(on))
    enabled = bool(on)
    return was


def racecheck_enabled() -> bool:
    return enabled


def check(device: int, op: str, accesses: Sequence[tuple[Any, bool, str]]) -> None:
    """Before a kernel of ``op`` is queued on ``device``'s current stream: ``accesses`` are its device
    tensors as (tensor, written, argument name). Raises :class:`SimRaceError` for the first race."""
    if not accesses:
        return
    found = _C.race_access(device, op, [a[0] for a in accesses], [a[1] for a in accesses])
    if found is not None:
        raise SimRaceError(_message(device, op, accesses, *found))


def learn(device: int, stream: int) -> None:
    """The host has synchronized ``stream`` of ``device`` (a blocking copy to the host, ``item()``)."""
    _C.race_learn(device, stream)


def _stream(device: int, stream: int) -> str:
    return f"stream {stream}{' (the default stream)' if stream == 0 else ''} of sim:{device}"


_VERBS = {"read-after-write": ("reads", "write"), "write-after-write": ("writes", "write"),
          "write-after-read": ("writes", "read")}


def _message(device: int, op: str, accesses: Sequence[tuple[Any, bool, str]], index: int, kind: str, other_op: str,
             other_device: int, other_stream: int, this_stream: int) -> str:
    tensor, _, argument = accesses[index]
    verb, earlier = _VERBS[kind]
    what = "its result" if argument == "result" else f"argument '{argument}'"
    here, there = _stream(device, this_stream), _stream(other_device, other_stream)
    return (f"sim race check: {kind} race: {op} on {here} {verb} {what} (a {str(tensor.dtype).replace('torch.', '')} "
            f"tensor of shape {list(tensor.shape)}), whose memory was last {'written' if earlier == 'write' else 'read'} "
            f"by {other_op} on {there}, and nothing orders that {earlier} before this kernel. Order them before this "
            f"call: make stream {this_stream} wait for stream {other_stream} (`s.wait_stream(other)`, or record an "
            f"event on stream {other_stream} after the {earlier} and `s.wait_event(event)`), or synchronize the host "
            f"with stream {other_stream} (`other.synchronize()`, `event.synchronize()`, `torch.sim.synchronize()`). "
            f"`record_stream` is not an ordering: it only keeps memory from being reused. "
            f"(sim's race checker: TORCHDEVICE_SIM_RACECHECK)")
