"""Call-site tracing of translated APIs: DEBUG logging and ``torchdevice run --report``.

Translation wrappers call :func:`note` only behind ``if trace.active:``, a
module-level bool, so when neither logging nor a report is on the hot path
pays one attribute read and nothing else.

* Logging: ``TORCHDEVICE_LOG=info|debug`` (or :func:`configure_logging`)
  attaches a stderr handler to the ``logging`` logger ``torchdevice``. Each
  translated call site is logged once, at DEBUG, with ``file:line``.
* Report: :func:`start_report` counts every call per API, way it was handled
  (``torch.autocast`` enabled and disabled are two uses) and call site;
  :func:`report_data` returns it.

The call site is the first frame outside torch, torchdevice and the package folders
of the plugins installed as distributions (the mlx plugin's wrappers sit between the
program and the core). Calls torchdevice makes itself through the program's path
(probing dtypes) are made under :func:`muted`; :func:`translation_code` tells a
wrapper whether its caller is translation's own code.

A call torch makes on the program's behalf -- ``torch.manual_seed`` seeding every
device family through ``torch.mps.manual_seed``, ``torch.xpu.manual_seed_all`` ... --
is not the program's call: it is listed under the torch function the program
called (:func:`made_by_torch_uses`: "``torch.mps.manual_seed`` via ``torch.manual_seed``",
with how it was handled and the program's line that called ``torch.manual_seed``), not as
a use of the inner API at the program's line.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import types
from collections import Counter
from types import FrameType
from typing import Callable, Iterator

logger = logging.getLogger("torchdevice")

active = False  # read on hot paths: `if trace.active: trace.note(...)`
_log_on = False
_report_on = False
_lock = threading.Lock()
_logged_sites: set[tuple[str, str, int]] = set()


class APIUse:
    """How the program used one API: how it was handled, how many calls, from which lines.

    (A plain class: a dataclass costs a millisecond of every activation to create.)"""

    __slots__ = ("api", "how", "calls", "sites")

    def __init__(self, api: str, how: str) -> None:
        self.api, self.how = api, how
        self.calls = 0
        self.sites: Counter = Counter()


#: (API, how it was handled) -> its calls: one API handled in two ways (``torch.autocast`` with float16, then
#: disabled) is two uses, each saying what happened
_uses: dict[tuple[str, str], APIUse] = {}
#: (the torch function the program called, the translated API it called in turn, how) -> those calls, with
#: how each was handled and the program's lines that called the torch function
_via: dict[tuple[str, str, str], APIUse] = {}
#: availability probes of the families the program is not written for (``torch.xpu.is_available`` while
#: the source is cuda): they answer as a machine without that family would, torch's own answer here,
#: so they are counted (:func:`other_family_probes`) but not listed as translated APIs
quiet: frozenset[str] = frozenset()
#: the functions of another family that are such probes (``torch.<family>.NAME``): whether it has a
#: device, how many, whether it started, and whether a graph capture is underway on it (transformers
#: asks ``torch.xpu.is_current_stream_capturing()`` on every masked forward, on any machine)
PROBES = ("is_available", "device_count", "is_initialized", "is_current_stream_capturing")
#: the ``torch.backends.<family>.NAME`` functions that are such probes
BACKEND_PROBES = ("is_available", "is_built")
_quiet_calls: Counter = Counter()  # api -> calls, of the APIs in :data:`quiet`
_sections: dict[str, Callable[[], dict]] = {}

def _skip_prefixes() -> tuple[str, ...]:
    import runpy

    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    return (here + os.sep, os.path.dirname(torch.__file__) + os.sep, runpy.__file__, "<frozen ", *_plugin_dirs())


def _package_dir(plugin: object) -> str | None:
    """The folder of the package that defines ``plugin`` (its module, or its class's module), with a trailing
    separator; None for one defined in a lone module or a namespace package (a folder of scripts)."""
    name = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
    package = sys.modules.get(name.partition(".")[0])
    init = getattr(package, "__file__", None)
    if not init or not list(getattr(package, "__path__", None) or ()):
        return None
    return os.path.join(os.path.dirname(os.path.abspath(init)), "")


def _plugin_dirs() -> tuple[str, ...]:
    """The package folders of the plugins installed as distributions (torchdevice_mlx ...): their code is
    translation's own, not the program's (the mlx plugin's ``.to`` wrapper calls the core's), so the call-site
    search skips them too. A plugin the program registers itself (``plugins.register``) is the program's code."""
    from . import plugins

    global _listening
    if not _listening:
        plugins.on_change(_forget_skips)  # plugins loaded later are skipped from then on
        _listening = True
    found = {_package_dir(plugin) for name, plugin in plugins.pm.list_name_plugin()
             if getattr(plugins.plugin_info.get(name), "distribution", None) is not None}
    return tuple(sorted(d for d in found if d is not None))


def _forget_skips() -> None:
    global _SKIP
    _SKIP = ()


_listening = False
_SKIP: tuple[str, ...] = ()
_TORCH = ""
_OURS: tuple[str, ...] = ()  # torchdevice's folder and the plugins': code translation runs, not the program


def _call_site(depth: int = 2) -> tuple[str, int, FrameType | None]:
    """The first frame outside torch, torchdevice and the plugins (the user's line), and the frame of torch's
    code the user's line called on the way, if the call went through torch (else None)."""
    if not _SKIP:
        _compute_skips()
    frame: FrameType | None = sys._getframe(depth)
    through = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_SKIP):
            return filename, frame.f_lineno, through
        if filename.startswith(_TORCH) and (through is None or "<locals>" not in _qualname(frame.f_code)):
            through = frame  # the outermost torch function on the way, not a decorator's inner wrapper
        frame = frame.f_back
    return "<unknown>", 0, through


def _compute_skips() -> None:
    global _SKIP, _TORCH, _OURS
    skip = _skip_prefixes()
    _TORCH, _OURS = skip[1], (skip[0], *skip[4:])
    _SKIP = skip


def translation_code(filename: str) -> bool:
    """Whether ``filename`` is torchdevice's or a plugin's code (a call from there is translation's own use of
    an API, not the program's: a host event recording on its stream)."""
    if not _SKIP:
        _compute_skips()
    return filename.startswith(_OURS)


def warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn`` located at the program's line: the first frame outside torch, torchdevice
    and the import machinery, however deep inside them the warning arises."""
    import warnings

    filename, lineno, _ = _call_site()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename != filename or frame.f_lineno != lineno):
        frame = frame.f_back
    module_globals = frame.f_globals if frame is not None else {}
    registry = module_globals.setdefault("__warningregistry__", {}) if frame is not None else None
    warnings.warn_explicit(message, category, filename, lineno, module=module_globals.get("__name__"),
                           registry=registry, module_globals=module_globals or None)


def _qualname(code: types.CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)


def _torch_name(frame: FrameType) -> str:
    """``torch.manual_seed`` for the frame of ``torch.random.manual_seed`` (the public spelling when
    ``torch`` re-exports the function), else ``module.qualname``."""
    code = frame.f_code
    torch = sys.modules.get("torch")
    public = getattr(torch, code.co_name, None) if torch is not None else None
    while public is not None and getattr(public, "__code__", None) is not code:
        public = getattr(public, "__wrapped__", None)  # torch.manual_seed may be torchdevice's wrapper of it
    if public is not None:
        return f"torch.{code.co_name}"
    module = frame.f_globals.get("__name__", "torch")
    return f"{module}.{_qualname(code)}"


_muting = threading.local()


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Nothing this thread's translated calls do inside is noted: for torchdevice's own calls through the
    program's path (``torch.accelerator.get_device_capability`` probing dtypes), which the program did not make."""
    before = getattr(_muting, "on", False)
    _muting.on = True
    try:
        yield
    finally:
        _muting.on = before


def note(api: str, how: str) -> None:
    """Record one call of translated ``api`` (e.g. ``"torch.cuda.synchronize"``) handled as ``how``."""
    if getattr(_muting, "on", False):
        return
    filename, lineno, through = _call_site()
    via = _torch_name(through) if through is not None else None
    with _lock:
        if _report_on:
            if api in quiet:
                _quiet_calls[api] += 1
            elif via is not None:
                use = _via.get((via, api, how))
                if use is None:
                    use = _via[(via, api, how)] = APIUse(api, how)
                use.calls += 1
                use.sites[f"{filename}:{lineno}"] += 1
            else:
                use = _uses.get((api, how))
                if use is None:
                    use = _uses[(api, how)] = APIUse(api, how)
                use.calls += 1
                use.sites[f"{filename}:{lineno}"] += 1
        if _log_on:
            key = (api, filename, lineno)
            if key in _logged_sites:
                return
            _logged_sites.add(key)
    if _log_on:
        if via is not None:
            logger.debug("%s:%d: %s (via %s) -> %s", filename, lineno, api, via, how)
        else:
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
    """What was counted so far, most-called first: one :class:`APIUse` per API and way it was handled."""
    with _lock:
        return sorted(_uses.values(), key=lambda u: (-u.calls, u.api, u.how))


def made_by_torch() -> dict[str, int]:
    """Translated calls torch made on the program's behalf, per torch function the program called
    (``{"torch.manual_seed": 3}``), most first."""
    counts: Counter = Counter()
    with _lock:
        for (via, _, _), use in _via.items():
            counts[via] += use.calls
    return dict(counts.most_common())


def made_by_torch_uses() -> list[tuple[str, APIUse]]:
    """The calls :func:`made_by_torch` counts, one ``(torch function, use)`` per translated API, each
    with how it was handled and the program's lines that called the torch function."""
    with _lock:
        return sorted(((via, use) for (via, _, _), use in _via.items()),
                      key=lambda vu: (vu[0], -vu[1].calls, vu[1].api))


def add_section(name: str, counts: Callable[[], dict]) -> None:
    """Let a plugin add its own counts to ``torchdevice run --report``: ``counts()`` is called when the
    report is written and returns ``{what: how many}`` (the MLX plugin: ATen ops run on the host instead
    of in MLX). An empty answer leaves the section out."""
    _sections[name] = counts


def sections() -> dict[str, dict]:
    """The plugins' report sections that have something to say (see :func:`add_section`)."""
    found: dict[str, dict] = {}
    for name, counts in list(_sections.items()):
        try:
            data = dict(counts())
        except Exception as exc:  # a plugin's broken counter must not lose the report
            data = {"error": f"{type(exc).__name__}: {exc}"}
        if data:
            found[name] = data
    return found


def other_family_probes() -> int:
    """How many availability probes of families other than the source the program made (see :data:`quiet`)."""
    with _lock:
        return sum(_quiet_calls.values())


def other_family_probe_calls() -> dict[str, int]:
    """The probes :func:`other_family_probes` counts, per API (``{"torch.xpu.is_available": 2}``)."""
    with _lock:
        return dict(_quiet_calls)


def reset() -> None:
    with _lock:
        _quiet_calls.clear()
        _uses.clear()
        _via.clear()
        _logged_sites.clear()
