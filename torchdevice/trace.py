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

def _skip_prefixes() -> tuple[tuple[str, ...], str]:
    """(the prefixes of frames that are no call site, torch's package directory)."""
    import runpy

    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    # "<torchdevice.": code torchdevice generates (torchdevice.boundary's split answers)
    return (here + os.sep, torch_dir, runpy.__file__, "<frozen ", "<torchdevice."), torch_dir


_SKIP: tuple[str, ...] = ()
_OWN: tuple[str, ...] = ()  # torchdevice's own frames: the translation wrappers
_TORCH = ""


def _call_site(depth: int = 2) -> tuple[str, int, bool]:
    """The first frame outside torch and torchdevice (the user's line), and whether the translated
    API was called by torch's own code (``torch.manual_seed`` seeding every family, ``fork_rng``)."""
    global _SKIP, _OWN, _TORCH
    if not _SKIP:
        _SKIP, _TORCH = _skip_prefixes()
        _OWN = tuple(p for p in _SKIP if p != _TORCH)
    frame = sys._getframe(depth)
    by_torch: bool | None = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if by_torch is None and not filename.startswith(_OWN):
            by_torch = filename.startswith(_TORCH)
        if not filename.startswith(_SKIP):
            return filename, frame.f_lineno, bool(by_torch)
        frame = frame.f_back
    return "<unknown>", 0, bool(by_torch)


def note(api: str, how: str) -> None:
    """Record one call of translated ``api`` (e.g. ``"torch.cuda.synchronize"``) handled as ``how``.

    A call torch's own code makes (``torch.manual_seed`` calls every family's ``manual_seed_all``,
    ``torch.random.fork_rng`` their RNG state functions) is not the program's: neither counted nor
    logged. The program's call of the torch function is what it wrote.
    """
    filename, lineno, by_torch = _call_site()
    if by_torch:
        return
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
        handler._torchdevice = True
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
