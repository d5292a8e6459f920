"""Free what still holds a gloo process group before the interpreter finalizes.

A DDP module is a reference cycle, so it, its reducer and the process group they hold outlive
``destroy_process_group()`` and the program's ``main``; Python's last collection, during finalization,
frees them. The group's destructor then wakes its worker threads, and a worker releasing a finished
collective's tensors (their Python objects kept by C++) must take the GIL. Python 3.11 and 3.12 end a
thread that takes the GIL while the interpreter finalizes with ``pthread_exit``; its forced unwinding
reaches a ``noexcept`` destructor and the process aborts with ``terminate called without an active
exception``, after the program's last line. A collection from an ``atexit`` handler, while Python is
still whole, frees the cycle there instead: the group is destroyed and its threads joined first.
"""
from __future__ import annotations

import atexit
import gc

_registered = False


def collect_before_exit() -> None:
    """Free the unreachable cycles (DDP modules and the gloo groups they hold) while Python is whole."""
    gc.collect()


def register_collect_before_exit() -> None:
    """Register :func:`collect_before_exit` with ``atexit``, once per process."""
    global _registered
    if not _registered:
        atexit.register(collect_before_exit)
        _registered = True
