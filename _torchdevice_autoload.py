"""torchdevice's ``torch.backends`` entry point, kept outside the package on purpose.

torch calls every ``torch.backends`` entry point at the end of each
``import torch``. This module uses the standard library only, so when none of
``TORCHDEVICE_BACKEND``, ``TORCHDEVICE_AUTO`` or ``TORCHDEVICE_LOG`` is set it
costs next to nothing and imports nothing; otherwise it hands over to
:func:`torchdevice.autoload.hook`, which decides and never raises.

If ``import torchdevice`` is what triggered ``import torch``, torchdevice is
only partly initialised here: the hook is then marked ``pending`` and
torchdevice runs it at the end of its own import.
"""
import os
import sys

pending = False


def hook() -> None:
    global pending
    try:
        if not any(os.environ.get(v, "").strip() for v in ("TORCHDEVICE_BACKEND", "TORCHDEVICE_AUTO", "TORCHDEVICE_LOG")):
            return
        package = sys.modules.get("torchdevice")
        if package is not None and not getattr(package, "_ready", False):
            pending = True
            return
        import gc

        # the collector is held while torchdevice loads and installs (see translate._gc_paused): the full
        # pass over the objects `import torch` just made is left to the program's own first collection
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            from torchdevice import autoload

            autoload.hook()
        finally:
            if was_enabled:
                gc.enable()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # an exception here would break `import torch` itself (SystemExit too)
        import warnings

        warnings.warn(f"torchdevice: zero-code activation failed: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
