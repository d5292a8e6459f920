"""Zero-code activation: a ``torch.backends`` entry point that turns translation on at ``import torch``.

torch loads every entry point of the group ``torch.backends`` at the end of
``import torch`` and calls it with no arguments (``_import_device_backends``
in ``torch/__init__.py``; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` disables all of
them). torchdevice registers :func:`hook` there. It decides from the
environment:

* ``TORCHDEVICE_BACKEND=NAME``: turn translation on, targeting backend NAME;
* ``TORCHDEVICE_AUTO=1``: turn translation on, targeting the backend that
  automatic selection picks;
* ``TORCHDEVICE_AUTO=0``: never, even if ``TORCHDEVICE_BACKEND`` is set (that
  variable then only picks the backend of the :mod:`torchdevice` API);
* neither: nothing at all.

``TORCHDEVICE_LOG=info|debug`` configures the ``torchdevice`` logger (see
:mod:`torchdevice.trace`) whenever the hook runs.

The hook never raises: an exception in a ``torch.backends`` entry point makes
``import torch`` itself fail. Anything that goes wrong (an unknown backend
name, a broken plugin) becomes a ``RuntimeWarning`` naming the cause, and
translation stays off. The hook runs while ``torch`` is still finishing its
own import; everything torchdevice needs from torch is defined by then.

Child processes inherit the environment, so DataLoader workers (fork or
spawn), ``torch.multiprocessing.spawn`` children and ``torchrun`` workers
turn translation on as soon as they import torch. ``torchdevice run`` exports
``TORCHDEVICE_BACKEND`` for exactly this reason, and ``TORCHDEVICE_SOURCE``
(the source family) and, with ``--devices``, ``TORCHDEVICE_DEVICE_COUNT`` so
that children answer ``is_available()`` and ``device_count()`` as the parent.
"""
from __future__ import annotations

import os
from typing import Mapping

ENV_BACKEND = "TORCHDEVICE_BACKEND"
ENV_AUTO = "TORCHDEVICE_AUTO"
ENV_LOG = "TORCHDEVICE_LOG"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

#: Why the last :func:`hook` call did or did not turn translation on (for tests and ``info``).
outcome: str = "not run"


def wanted(environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether the environment asks for translation at ``import torch``, and why."""
    env = os.environ if environ is None else environ
    backend = env.get(ENV_BACKEND, "").strip()
    auto = env.get(ENV_AUTO, "").strip().lower()
    if auto in _FALSE:
        return False, f"{ENV_AUTO}={auto}"
    if backend:
        return True, f"{ENV_BACKEND}={backend}"
    if auto in _TRUE:
        return True, f"{ENV_AUTO}={auto}"
    if auto:
        return False, f"{ENV_AUTO}={auto!r} is not 1 or 0: ignored"
    return False, f"neither {ENV_BACKEND} nor {ENV_AUTO}=1 is set"


def _warn(message: str) -> None:
    """A RuntimeWarning (shown once by default), and a log record if torchdevice logging is on."""
    try:
        import logging
        import warnings

        warnings.warn_explicit(
            f"torchdevice: {message}", RuntimeWarning, "<torchdevice autoload>", 0, module="torchdevice.autoload"
        )
        logger = logging.getLogger("torchdevice")
        if logger.handlers:  # configured by TORCHDEVICE_LOG; otherwise logging's last resort would repeat it
            logger.warning("%s", message)
    except Exception:  # pragma: no cover - never let reporting break import torch
        pass


def hook() -> None:
    """The ``torch.backends`` entry point: turn translation on if the environment asks; never raises."""
    global outcome
    try:
        if os.environ.get(ENV_LOG, "").strip():
            try:
                from . import trace

                trace.configure_logging()
            except Exception as exc:
                _warn(f"{ENV_LOG}: {exc}")
        on, why = wanted()
        if not on:
            outcome = f"off: {why}"
            if why.endswith("ignored"):
                _warn(f"{why} (translation stays off; use {ENV_AUTO}=1 or 0)")
            return
        from . import translate

        target = translate.patch()
        from . import router

        for note in router.passed_over():
            _warn(f"automatic selection chose {target.name!r} after passing over {note}")
        outcome = f"on: {why}: translating {', '.join(sorted(target.sources))} to backend {target.name!r} ({target.device_type})"
        import logging

        logging.getLogger("torchdevice").info("zero-code activation %s", outcome[4:])
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a plugin's SystemExit or worse must not break `import torch`
        outcome = f"failed: {type(exc).__name__}: {exc}"
        _warn(f"zero-code activation failed, translation is off: {type(exc).__name__}: {exc}")
