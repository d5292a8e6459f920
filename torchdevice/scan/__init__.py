"""Static porting scan: find accelerator-specific PyTorch uses in Python sources.

``torchdevice scan PATH...`` parses every ``.py`` file under the given paths
with :mod:`ast` (nothing is imported or run) and reports each use of an
accelerator-specific API: where it is, the API under its canonical name, and
the status that API has on a backend, read from :mod:`torchdevice.matrix`
(``"unknown"`` while no status is known). The library entry points are
:func:`scan_source` (one source string) and :func:`scan_paths` (a tree).

What is reported (``kind`` in parentheses; ``api`` is the name reported)
-----------------------------------------------------------------------------

* (``namespace``) every name or attribute chain rooted at ``torch`` whose
  resolved dotted name has a component naming an accelerator: ``cuda``,
  ``cudnn``, ``nccl``, ``xccl``, ``mps``, ``xpu``, ``mtia`` as a whole
  ``_``-separated word (``torch.cuda.synchronize``, ``torch.backends.cudnn.benchmark``,
  ``torch.backends.cuda.matmul.allow_tf32``, ``torch.cuda.amp.autocast``,
  ``torch.mps.empty_cache``, ``torch.xpu.device_count``, ``torch.mtia.is_available``,
  ``torch.version.cuda``, ``torch.distributed.is_nccl_available``,
  ``torch.distributed.Backend.NCCL``) or starting with ``CUDA``
  (``torch.utils.cpp_extension.CUDAExtension``), and the ``torch.accelerator`` functions
  (``torch.accelerator.is_available``: device-agnostic code's accelerator, which translation
  answers as the source family's namespace). ``api`` is the whole chain as
  written, aliases resolved; attributes of a call's result are not part of it
  (``torch.cuda.get_device_properties(0).total_memory`` reports
  ``torch.cuda.get_device_properties``). Aliases are resolved from imports
  (``import torch as th``, ``import torch.cuda as tc``, ``from torch import cuda``,
  ``from torch.cuda import synchronize``, ``from torch.cuda.amp import autocast``;
  an import itself is not a use, the names it binds are),
  from plain assignments of such chains (``amp = torch.cuda.amp``) and from
  ``getattr``/``hasattr``/``setattr`` with a literal name (``getattr(torch, "mps")``).
  The name ``torch`` means torch unless something else is bound to it; a name
  that is a parameter or local variable of an enclosing function, or that is
  rebound at module level to something else, is not an alias there.
  ``from torch.cuda import *`` is reported as ``torch.cuda.*`` at the import.
* (``method``) ``.cuda()``, ``.xpu()``, ``.mtia()`` called on any expression;
  ``api`` is ``".cuda()"`` (also for ``torch.Tensor.cuda`` / ``torch.nn.Module.cuda``).
* (``attribute``) ``.is_cuda``, ``.is_mps``, ``.is_xpu``, ``.is_mtia`` read on any
  expression; ``api`` is ``".is_cuda"`` etc. An attribute that is not called
  (``args.cuda``, ``opt.cuda``) is not a use.
* (``device``) a device string: a string literal that *as a whole* is a device
  of an accelerator type -- ``"cuda"``, ``"cuda:1"``, ``"mps"``, ``"xpu:0"``,
  ``"mtia"`` -- or a template for one: ``"cuda:"`` (``"cuda:" + str(i)``),
  ``"cuda:%d"``, ``"cuda:{}"``, ``f"cuda:{rank}"``. ``api`` is
  ``"device:<type>"`` (``device:cuda``); ``detail`` is the literal. The rule is
  *whole-literal match, in any position except a docstring or a bare string
  statement*, so ``"cudart docs"``, ``"use cuda here"`` or a variable named
  ``cuda_count`` never match, while ``x.device.type == "cuda"`` and
  ``DEVICE = "cuda"`` do. Where the string sits is recorded in ``context``:
  ``device=``, ``map_location=``, ``device_type=`` ... (keyword arguments),
  ``torch.device`` (its positional arguments, so ``torch.device("cuda", 1)``
  is a ``device:cuda`` use in context ``torch.device``), ``.to()``,
  ``autocast`` (positional arguments of ``torch.autocast``/``torch.amp.autocast``/
  ``torch.amp.GradScaler``), or ``""`` anywhere else.
* (``dist-backend``) a string literal ``"nccl"`` or ``"xccl"``, or a per-device
  backend string containing one (``"cpu:gloo,cuda:nccl"``): ``api`` is
  ``"dist-backend:nccl"`` / ``"dist-backend:xccl"``.
* (``tensor-type``) a string literal that is a legacy accelerator tensor type,
  ``"torch.cuda.FloatTensor"`` (as passed to ``.type()``): ``api`` is that name.
* (``env``) an accelerator environment variable read or set: an upper-case
  string literal with an accelerator word (``"CUDA_VISIBLE_DEVICES"``,
  ``"PYTORCH_CUDA_ALLOC_CONF"``, ``"NCCL_DEBUG"``, ``"PYTORCH_ENABLE_MPS_FALLBACK"``)
  in an environment position: ``os.environ[...]``, ``os.environ.get/setdefault/pop(...)``,
  ``os.getenv/putenv/unsetenv(...)``, ``monkeypatch.setenv/delenv(...)``,
  ``... in os.environ``, or inside an ``env=`` argument (``subprocess.run(env={...})``).
  ``api`` is ``"env:<NAME>"``; the same literal elsewhere (a table of CUDA error
  names) is not a use.

So the pseudo-API names emitted besides dotted ``torch.*`` names -- the
names :func:`torchdevice.matrix.status_for` documents, plus ``env:`` and the
star import, which it does not rate -- are
``.cuda()`` ``.xpu()`` ``.mtia()``, ``.is_cuda`` ``.is_mps`` ``.is_xpu`` ``.is_mtia``,
``device:cuda`` ``device:mps`` ``device:xpu`` ``device:mtia``,
``dist-backend:nccl`` ``dist-backend:xccl``, ``torch.cuda.*`` (star import)
and ``env:NAME``.

Which files
-----------

Files ending in ``.py``/``.pyw`` under each directory; a file named on the
command line is scanned whatever its name. Skipped by default: hidden
directories, ``__pycache__``, ``site-packages``, ``dist-packages``,
``node_modules``, and virtual or conda environments (a directory holding
``pyvenv.cfg`` or ``conda-meta``); a path given explicitly is always scanned.
A file containing none of the words a use needs (``cuda``, ``CUDA``, ``cudnn``,
``nccl``, ``xccl``, ``xpu``, ``mtia``, ``mps``, ``accelerator``, ...) cannot hold a use and is not
parsed. In a parsed file only statements spanning a line with such a word, or
with a name bound to an accelerator API (``tc`` after ``import torch.cuda as tc``,
``amp`` after ``amp = torch.cuda.amp``), are visited. Files that cannot be
read or parsed (syntax errors, Python 2 code, null bytes) are reported in
``errors``, never fatal. Trees of :data:`PARALLEL_THRESHOLD` files or more are
scanned by a process pool.

Statuses
--------

A use's status is ``torchdevice.matrix.status_for(api, backend)`` when that
module is importable and knows the API, else ``"unknown"`` (never guessed).
Severity, for ``--fail-on``, best to worst: :data:`SEVERITY`. ``unknown`` and
``error`` (a file that could not be parsed) are outside that order: they
only match when named.

Layout
------

:mod:`.results` (what a scan finds: :class:`Use`, :class:`ScanReport`, statuses),
:mod:`.syntax` (the words and patterns above, helpers over :mod:`ast`), :mod:`.analysis`
(the analysis of one file), :mod:`.tree` (files, statuses, the report of a tree) and
:mod:`.render` (terminal output and the command line). Every name is importable from
``torchdevice.scan`` itself. The analysis uses the standard library only; statuses are read from
:mod:`torchdevice.matrix` only when a backend is asked for.
"""
from __future__ import annotations

from .analysis import _analyze, _Analyzer, _scan_chunk, _scan_file, scan_source
from .render import ProgressBar, add_arguments, render_plain, render_text, run, use_colour
from .results import SEVERITY, STATUSES, UNKNOWN, ScanError, ScanReport, Use, families, family_of, parse_fail_on
from .syntax import ACCEL_TYPES, COMPARE_REAL, COMPARE_STRING, IS_ATTRS, METHODS, _real_device_expr
from .tree import (
    ENV_MARKERS,
    PARALLEL_THRESHOLD,
    SKIP_DIRS,
    SOURCE_SUFFIXES,
    _compare_effect,
    iter_files,
    scan_paths,
    status_lookup,
)

__all__ = [
    "ACCEL_TYPES", "COMPARE_REAL", "COMPARE_STRING", "ENV_MARKERS", "IS_ATTRS", "METHODS", "PARALLEL_THRESHOLD",
    "SEVERITY", "SKIP_DIRS", "SOURCE_SUFFIXES", "STATUSES", "UNKNOWN", "ProgressBar", "ScanError", "ScanReport",
    "Use", "add_arguments", "families", "family_of", "iter_files", "parse_fail_on", "render_plain", "render_text",
    "run", "scan_paths", "scan_source", "status_lookup", "use_colour",
    "_Analyzer", "_analyze", "_compare_effect", "_real_device_expr", "_scan_chunk", "_scan_file",
]
