"""``torch.cuda`` (and ``torch.mps``, ``torch.xpu``, ``torch.mtia``) fronting the active backend.

Where to look
    Every function of ``torch.<ns>`` that torchdevice replaces has one row in the declaration
    table (:data:`SPECS`; ``torch.cuda.nvtx``: :data:`NVTX_SPECS`), declared in its family's module
    next to the code that builds it:

    ==================  ===========================================================================
    ``discovery.py``    is_available, device_count, current/set_device, device, device_of,
                        synchronize, properties, capability, bf16/tf32, peer access
    ``memory.py``       memory_allocated ... mem_get_info (one loop over ``device_op_builder``),
                        deprecated aliases, empty_cache, memory fraction, summaries, allocator
                        functions (unsupported), telemetry
    ``streams.py``      Stream, Event, current/default/set_stream, StreamContext, stream, graphs and
                        pools (unsupported), sync debug mode, check_error
    ``rng.py``          seeds, get/set_rng_state(_all), default_generators
    ``nvtx.py``         torch.cuda.nvtx ranges and marks
    ``nccl.py``         torch.cuda.nccl: version from the backend's collective engine, the rest unsupported
    ``tunable.py``      torch.cuda.tunable (TunableOp): queries False, settings unsupported
    ``legacy.py``       the legacy typed tensor classes (FloatTensor ...: construction, isinstance),
                        Tensor.type and torch.set_default_tensor_type taking them
    ``accelerator.py``  torch.accelerator, answering as the source family's namespace (its rows reuse
                        that family's builders; own rows: current_accelerator, device_index ...)
    ==================  ===========================================================================

    A row is ``@fronts("name", rule)`` above ``def build_name(target: Target, ns: str, name: str)``, or a
    ``declare_unsupported("name", instead)`` / ``declare_native("name", note)`` line (their helpers:
    ``table.py``). ``where("torch.cuda.memory_allocated")`` answers with the file, line and builder.
    The rule (``rules.py``) gives the status, from the backend's operation tags; the builder returns
    the object ``torch.cuda.<name>`` becomes, closing over the install's :class:`~torchdevice.router.Target` (the
    backend's bound operations); ``install.py`` calls the builders and patches torch, wrapping each
    function with a trace note (``wrapping.py``); ``statuses.py`` answers ``torchdevice matrix``
    from the same rows without installing anything.

While translation is on (:func:`torchdevice.patch`), every namespace in the
target's ``sources`` -- ``torch.cuda`` when the backend is not CUDA, and
likewise for mps, xpu and mtia -- answers from the active backend. The real
modules are patched *in place* through the shared
:class:`~torchdevice._patching.Patcher`, so ``from torch import cuda`` taken
before patching sees the translation too, and :func:`torchdevice.unpatch`
gives every attribute back (identity). Submodules that re-export the same
functions are patched alike: ``torch.cuda.memory``, ``torch.cuda.random``,
``torch.cuda.streams``, ``torch.cuda.graphs``, ``torch.cuda.nvtx``,
``torch.cuda.comm`` (to :mod:`torchdevice.namespaces.comm` where it implements the
function), the functions of ``torch.cuda.memory``, ``torch.cuda.nccl`` and
``torch.cuda.tunable`` that ``torch.cuda`` does not re-export (rows
``"memory._snapshot"`` ...), ``torch.xpu.memory``/``random``/``streams``, ``torch.mtia.memory``
and ``torch.mps.event``. ``torch.cuda.amp`` is left to :mod:`torchdevice.amp`.

Every function gets one defined behaviour (a :class:`~torchdevice.backend.Status`):

* **native** -- passed through untouched (helpers such as ``torch.cuda.cast``,
  build facts such as ``get_arch_list``; and the whole namespace when the
  backend *is* that device type, e.g. ``torch.cuda`` on the cuda backend);
* **translated** / **emulated** / **no-op** -- as the backend's operation is
  tagged (:func:`~torchdevice.backend.status_of` on its Ops objects), or as
  declared below for facade-level functions that map to no operation
  (``is_available``, ``get_device_properties`` ...);
* **unsupported** -- raises :class:`~torchdevice.UnsupportedError` naming the
  function (``torch.cuda.cudart``), the backend, and what to use instead.

The statuses are *derived*: :func:`status` reads the backend's Ops tags
through :data:`SPECS`, the same table :func:`install` builds the functions
from, so ``torchdevice matrix`` cannot disagree with what a call does.

``torch.cuda.is_available()`` while translating
    True when the target has devices of its own type (cuda/xpu/mps...), and
    also on an accelerator-less target (cpu, MLX's host tensors) as long as
    ``report_available`` is on -- the default, so CUDA-only programs take
    their GPU path and run on the target. Turn it off with
    ``TORCHDEVICE_REPORT_AVAILABLE=0`` or ``torchdevice.patch(report_available=False)``:
    then ``is_available()`` is False and ``device_count()`` is 0, so programs
    take their CPU path. ``device_count()`` always agrees with ``is_available()``.

Only the source family claims a device
    No real machine has CUDA, MPS, XPU and MTIA devices at once, and programs
    that probe several families take the first that answers True (transformers'
    Trainer its XPU branch, tutorials "You have mps device"). So only the
    family the program is written for -- the *source family*, ``cuda`` by
    default, ``TORCHDEVICE_SOURCE=mps|xpu|mtia`` / ``torchdevice run --source`` /
    ``torchdevice.patch(source=...)`` otherwise -- answers as above; the other
    fronted namespaces answer ``is_available()`` False and ``device_count()``
    0 (``torch.backends.mps.is_available()`` too unless the source is mps),
    while every other function of theirs still translates when called. The
    target's own namespace is never fronted: on the cuda backend ``torch.cuda``
    is torch's own and answers for the hardware, whatever the source family.

Optional operations: a plugin gives functions that no base family carries a
real answer by defining a tagged method of the same name on its Ops subclass
(see :data:`OPTIONAL_OPS`): ``device_memory_used``, ``memory_usage``,
``utilization``, ``temperature``, ``power_draw``, ``clock_rate``,
``list_gpu_processes`` (``op(index)``), ``host_memory_stats``,
``reset_accumulated_host_memory_stats``, ``reset_peak_host_memory_stats``,
``memory_snapshot``, ``get_allocator_backend`` (``op()``) on its MemoryOps,
``can_device_access_peer`` (``op(index, peer_index)``) on its StreamOps,
``engine_version`` (``op()``: the collective engine's version as a tuple, what
``torch.cuda.nccl.version()`` answers) on its CollectiveOps.
Without one they keep the behaviour declared here (mostly unsupported).

Also fronted while translating: ``torch.get_device_module("cuda")`` returns
the fronted ``torch.cuda`` (torch would resolve the string to the target's
module, e.g. ``torch.cpu``, which lacks the RNG functions
``torch.random.fork_rng`` needs), and ``torch.backends.mps.is_available()``
answers like ``torch.mps.is_available()``.

Costs: the backend's operations are resolved once per :func:`install` (the
target is rebuilt and everything reinstalled when :func:`torchdevice.use`
changes backend); a call is a closure over bound methods, with no pluggy hook
and no lookup. Each call does ``if trace.active: trace.note("torch.cuda.X", how)``.
"""
from __future__ import annotations

# The family modules declare their functions into the table when imported, in this order (the
# table's order); then the optional operations get their rules (table._wrap_optional_ops), once.
# isort: off
from . import discovery, memory, streams, rng, nvtx, nccl, tunable, legacy
# isort: on
from .install import install, installed, uninstall
from .rng import _DeviceGenerators
from .rules import (
    EMULATED,
    NATIVE,
    NOOP,
    TRANSLATED,
    UNSUPPORTED,
    Rule,
    all_of,
    declared,
    op_rule,
    optional_op,
    stream_class_rule,
    when_op,
)
from .statuses import COMM_FUNCTIONS, api_status, comm_status, fronted, record_stream_status, spec_for, status
from .table import (
    NAMESPACES,
    NVTX_SPECS,
    OPTIONAL_OPS,
    SPECS,
    SUBMODULES,
    Builder,
    Spec,
    _wrap_optional_ops,
    declare_native,
    declare_unsupported,
    fronts,
    where,
)

_wrap_optional_ops()

__all__ = ["install", "uninstall", "status", "spec_for", "fronted", "where", "Spec", "SPECS", "NVTX_SPECS",
           "NAMESPACES"]
