"""The vendor kit: test a torchdevice backend plugin without its hardware, and check it conforms.

Three parts, all usable from a plugin's own test suite (see ``docs/plugins.md``):

1. **A stand-in torch namespace**, :class:`StandIn`: an object with the
   attributes of ``torch.cuda`` (or ``torch.xpu``, ``torch.mps``,
   ``torch.mtia``, ``torch.backends.mps`` ...) that records every call as a
   :class:`Call` ``(name, args, kwargs)`` and returns typed values, each
   configurable. By default it has exactly the names the real namespace has in
   the installed torch, so a plugin tested against it meets the same holes.
   Tests using it prove which torch function a plugin calls, with which
   arguments, and how it converts the result; they are *stand-in* tests and
   prove nothing about real hardware.

2. **A conformance suite**: :func:`check_backend` runs every check on a plugin
   instance and returns a :class:`ConformanceReport` (or raises
   ``AssertionError`` listing the failures); :class:`BackendConformance` is the
   same checks as a pytest mixin, one test each. The checks: the declaration
   is sane; the hook implementations validate against the hookspecs;
   availability never raises and returns an ``Availability`` with a reason;
   hooks answer ``None`` for other backends' names; every operation of every
   family carries a status tag; unsupported operations raise
   ``UnsupportedError``; through the real router, the backend is selected
   when asked for (or refused with its reason when unavailable) and the
   device-agnostic API works on it; and, for a backend with asynchronous
   queues (``StreamOps.sleep`` implemented), queries, ``synchronize`` and
   events behave against queued work of known length.

3. **Mixins for torch-namespace plugins** (subclasses of
   :class:`torchdevice.torch_backend.TorchNamespaceBackend`):
   :class:`NamespaceContract` (stand-in contract tests driven by a table of
   :class:`Expect`) and :class:`UnavailableHere` (real tests on a machine or
   torch build without the hardware: unavailable, not selected, and
   ``torchdevice info`` says why).

Helpers: :func:`registered` (a plugin registered with the router for the
duration of a ``with`` block, displacing an installed plugin that declares
the same backend), :func:`router_sandbox`, :func:`info_json`.

Where each part lives (every name is importable from ``torchdevice.testing``
itself, the one import path plugins use):

* :mod:`~torchdevice.testing.standin` -- 1, the stand-in namespace;
* :mod:`~torchdevice.testing.conformance` -- 2, the conformance checks;
* :mod:`~torchdevice.testing.contracts` -- 3, the torch-namespace mixins;
* :mod:`~torchdevice.testing.sandbox` -- the router helpers;
* :mod:`~torchdevice.testing.hook_reference` -- not part of the kit: the
  generator of the hook reference in ``docs/plugins.md``
  (``python -m torchdevice.testing --write-docs docs/plugins.md``);
* :mod:`~torchdevice.testing.command` -- ``python -m torchdevice.testing``
  (``--check MODULE:ATTR``, ``--write-docs``, ``--check-docs``); a plugin that
  fails to import is reported as a ``[FAIL] import`` line, not a traceback.

The kit imports pytest only inside the pytest mixins' methods.
"""
from __future__ import annotations

from .command import main
from .conformance import (
    BEHAVIOUR_CHECKS,
    CHECKS,
    QUEUED_MS,
    BackendConformance,
    CheckResult,
    ConformanceReport,
    check_availability,
    check_backend,
    check_behaviour,
    check_families,
    check_hookimpls,
    check_queues,
    check_router,
    check_spec,
    check_tags,
    check_unsupported,
    run_check,
)
from .contracts import RETURNED, Expect, NamespaceContract, UnavailableHere, torch_namespace_contract
from .hook_reference import (
    BEGIN,
    END,
    _render_signature,
    hook_reference_is_current,
    hook_reference_markdown,
    write_hook_reference,
)
from .sandbox import ENV_VARS, info_json, info_text, registered, router_sandbox
from .standin import DEFAULTS, GIB, VALUE_ATTRIBUTES, Call, FloatLike, IntLike, StandIn, StandInProperties

__all__ = [
    "Call",
    "StandIn",
    "IntLike",
    "FloatLike",
    "Expect",
    "RETURNED",
    "torch_namespace_contract",
    "NamespaceContract",
    "UnavailableHere",
    "BackendConformance",
    "ConformanceReport",
    "CheckResult",
    "CHECKS",
    "BEHAVIOUR_CHECKS",
    "QUEUED_MS",
    "check_backend",
    "check_queues",
    "registered",
    "router_sandbox",
    "info_json",
    "info_text",
    "hook_reference_markdown",
    "write_hook_reference",
    "hook_reference_is_current",
]

