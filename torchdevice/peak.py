"""A running peak of a counter that offers no hook at the moments it changes.

torch's CPU allocator counts live bytes (c10's counter, :mod:`torchdevice.cpu`) but keeps no peak and
calls nobody when it allocates, so ``max_memory_allocated`` can only be the highest value *seen*. A
:class:`SampledPeak` sees the counter at every read made through it and, from the first read on,
every :data:`INTERVAL` seconds from a daemon thread: a peak that lasts longer than that (a forward
pass's activations, the gradients of a backward) is caught even when the program asks nothing in
between; a shorter one may still be missed, so the figure stays a lower bound of the true peak and is
never above it. Example::

    peak = SampledPeak(counter.read)
    peak.read()        # the current value (and the sampler starts)
    peak.peak()        # the highest value seen since creation or the last reset()
    peak.reset()       # the peak becomes the current value

One sample costs one read of the counter under a lock (c10's counter: a memory load). The thread
holds only a weak reference to its owner and ends when the owner is gone; in a forked child the
lock is renewed and the thread restarted by the child's first read.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Callable

#: Seconds between two samples (a peak lasting longer than this is seen).
INTERVAL = 0.005

_live: weakref.WeakSet[SampledPeak] = weakref.WeakSet()


class SampledPeak:
    """The highest value of ``read()`` seen through :meth:`read` and by a sampling thread."""

    def __init__(self, read: Callable[[], int], interval: float | None = INTERVAL) -> None:
        """``interval``: seconds between samples; ``None``: no thread (for a counter too costly to poll)."""
        self._read = read
        self._interval = interval
        self._lock = threading.Lock()
        self._peak = 0
        self._pid = 0  # the process the sampler runs in (0: not started)
        self.samples = 0  #: samples the thread has taken (tests wait on it)
        _live.add(self)

    def read_with_peak(self) -> tuple[int, int]:
        """The counter's current value and the highest value seen since creation or the last
        :meth:`reset` (which includes it), from one read; starts the sampler the first time."""
        if self._pid != os.getpid() and self._interval is not None:
            self._start()
        return self._fold()

    def read(self) -> int:
        """The counter's current value, folded into the peak."""
        return self.read_with_peak()[0]

    def peak(self) -> int:
        """The highest value seen since creation or the last :meth:`reset` (reads the counter too)."""
        return self.read_with_peak()[1]

    def reset(self) -> None:
        """Make the current value the peak."""
        with self._lock:
            self._peak = self._read()

    def _fold(self) -> tuple[int, int]:
        # read inside the lock: a reset() cannot be overtaken by a sample taken before it
        with self._lock:
            value = self._read()
            if value > self._peak:
                self._peak = value
            return value, self._peak

    def _start(self) -> None:
        with _start_lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            thread = threading.Thread(target=_sample, args=(weakref.ref(self), self._interval),
                                      name="torchdevice-peak-sampler", daemon=True)
            thread.start()


_start_lock = threading.Lock()


def _sample(ref: weakref.ref, interval: float) -> None:
    pid = os.getpid()
    while True:
        time.sleep(interval)
        owner = ref()
        if owner is None or owner._pid != pid:  # owner gone, or restarted in a forked child
            return
        owner._fold()
        owner.samples += 1
        del owner


def _after_fork_in_child() -> None:
    # a lock held by the parent's sampler at fork time would stay held forever in the child
    global _start_lock
    _start_lock = threading.Lock()
    for peak in list(_live):
        peak._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
