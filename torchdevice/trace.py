"""Call-site tracing of translated APIs: DEBUG logging and ``torchdevice run --report``.

Translation wrappers call :func:`note` only behind ``if trace.active:``, a
module-level bool, so when neither logging nor a report is on the hot path
pays one attribute read and nothing else.

* Logging: ``TORCHDEVICE_LOG=info|debug`` (or :func:`configure_logging`)
  attaches a stderr handler to the ``logging`` logger ``torchdevice``. Each
  translated call site is logged once, at DEBUG, with ``file:line``.
* Report: :func:`start_report` counts every call per API and call site with
  how it was handled; :func:`report_data` returns it.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import FrameType

logger = logging.getLogger("torchdevice")

active = False  # read on hot paths: `if trace.active: trace.note(...)`
_log_on = False
_report_on = False
_lock = threading.Lock()
_logged_sites: set[tuple[str, str, int]] = set()


@dataclass
class APIUse:
    api: str
    how: str
    calls: int = 0
    sites: Counter = field(default_factory=Counter)


_uses: dict[str, APIUse] = {}

def _skip_prefixes() -> tuple[str, ...]:
    import runpy

    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    return (here + os.sep, os.path.dirname(torch.__file__) + os.sep, runpy.__file__, "<frozen ")


_SKIP: tuple[str, ...] = ()


def _call_site(depth: int = 2) -> tuple[str, int]:
    """The first frame outside torch and torchdevice: the user's line."""
    global _SKIP
    if not _SKIP:
        _SKIP = _skip_prefixes()
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_SKIP):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def note(api: str, how: str) -> None:
    """Record one call of translated ``api`` (e.g. ``"torch.cuda.synchronize"``) handled as ``how``."""
    filename, lineno = _call_site()
    with _lock:
        if _report_on:
            use = _uses.get(api)
            if use is None:
                use = _uses[api] = APIUse(api, how)
            use.calls += 1
            use.sites[f"{filename}:{lineno}"] += 1
        if _log_on:
            key = (api, filename, lineno)
            if key in _logged_sites:
                return
            _logged_sites.add(key)
    if _log_on:
        logger.debug("%s:%d: %s -> %s", filename, lineno, api, how)


def _refresh() -> None:
    global active
    active = _log_on or _report_on


def configure_logging(level: str | None = None) -> None:
    """Turn logging on at ``level`` (``"info"``/``"debug"``), default from ``TORCHDEVICE_LOG``."""
    global _log_on
    level = (level or os.environ.get("TORCHDEVICE_LOG", "")).strip().lower()
    if not level:
        return
    if level not in ("info", "debug", "warning"):
        raise ValueError(f"TORCHDEVICE_LOG must be one of info, debug, warning; got {level!r}")
    if not any(getattr(h, "_torchdevice", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("torchdevice %(levelname)s: %(message)s"))
        setattr(handler, "_torchdevice", True)  # noqa: B010  (marks our handler, for the check above)
        logger.addHandler(handler)
    logger.setLevel(level.upper())
    _log_on = logger.isEnabledFor(logging.DEBUG)
    _refresh()


def start_report() -> None:
    """Start counting translated calls for :func:`report_data`."""
    global _report_on
    _report_on = True
    _refresh()


def stop_report() -> None:
    global _report_on
    _report_on = False
    _refresh()


def report_data() -> list[APIUse]:
    """What was counted so far, most-called first."""
    with _lock:
        return sorted(_uses.values(), key=lambda u: (-u.calls, u.api))


def reset() -> None:
    with _lock:
        _uses.clear()
        _logged_sites.clear()
