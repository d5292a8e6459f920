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
  (``torch.utils.cpp_extension.CUDAExtension``). ``api`` is the whole chain as
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
``nccl``, ``xccl``, ``xpu``, ``mtia``, ``mps``, ...) cannot hold a use and is not
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
"""
from __future__ import annotations

import ast
import bisect
import fnmatch
import os
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from .vocabulary import SOURCE_FAMILIES

#: Best to worst; ``--fail-on S`` fails on S and everything after it.
SEVERITY = ("native", "translated", "no-op", "emulated", "unsupported")
UNKNOWN = "unknown"
#: Every status a use can have, in report order.
STATUSES = SEVERITY + (UNKNOWN,)

#: Trees with at least this many files are scanned by a process pool.
PARALLEL_THRESHOLD = 256

SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules"})
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")
SOURCE_SUFFIXES = (".py", ".pyw")

ACCEL_TYPES = SOURCE_FAMILIES
METHODS = frozenset({"cuda", "xpu", "mtia"})
IS_ATTRS = frozenset({"is_cuda", "is_mps", "is_xpu", "is_mtia"})

# A file holding none of these cannot hold a use (every rule needs one literally).
_WORDS = (b"cuda", b"CUDA", b"cudnn", b"nccl", b"NCCL", b"xccl", b"XCCL", b"xpu", b"XPU", b"mtia", b"MTIA")
_MPS_BYTES = re.compile(rb"(?<![A-Za-z])(?:mps|MPS)")

_DEVICE_RE = re.compile(r"(cuda|mps|xpu|mtia)(?::(?:\d+|%[dis]|\{[^{}]*\})?)?")
_DEVICE_PREFIX_RE = re.compile(r"(cuda|mps|xpu|mtia):?")  # f-string head: f"cuda:{i}", f"cuda{suffix}"
_DIST_RE = re.compile(r"(nccl|xccl)|(?:\w+:\w+,)*\w+:\w+")
_DIST_WORD_RE = re.compile(r"(?:^|[,:])(nccl|xccl)(?:$|,)")
_TENSOR_TYPE_RE = re.compile(r"torch\.(?:cuda|xpu|mtia|mps)\.[A-Za-z]*Tensor")
_ENV_RE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_ENV_WORDS = frozenset({"CUDA", "CUDNN", "NCCL", "XCCL", "MPS", "XPU", "MTIA", "CUBLAS", "CUBLASLT", "NVIDIA"})
_ENV_FUNCS = frozenset({"getenv", "putenv", "unsetenv", "setenv", "delenv"})
_ENV_METHODS = frozenset({"get", "setdefault", "pop"})
_COMPONENT_RE = re.compile(r"(?:^|_)(?:cuda|cudnn|nccl|xccl|mps|xpu|mtia)(?:_|$)|^CUDA|(?:^|_)(?:NCCL|XCCL)(?:_|$)")

_DEVICE_KWARGS = frozenset({
    "device", "map_location", "device_type", "output_device", "dst_device", "src_device",
    "storage_device", "compute_device", "offload_device", "device_id",
})
_DIST_KWARGS = frozenset({"backend"})
_AUTOCAST = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler",
                       "torch.get_device_module", "torch.set_default_device"})
_TENSOR_CLASSES = frozenset({"torch.Tensor", "torch.nn.Module"})


# -- families ------------------------------------------------------------------------

#: word of a use's name -> the accelerator family (source device type) it belongs to
_FAMILY_WORDS = {
    "cuda": "cuda", "cudnn": "cuda", "nccl": "cuda", "cublas": "cuda", "cublaslt": "cuda", "cudart": "cuda",
    "nvidia": "cuda", "mps": "mps", "xpu": "xpu", "xccl": "xpu", "mtia": "mtia",
}


def family_of(use: "Use") -> str | None:
    """The accelerator family a use belongs to: ``cuda``, ``mps``, ``xpu``, ``mtia``, or None.

    Read from the words of its name: ``torch.backends.mps.is_available`` and
    ``device:mps`` are mps, ``dist-backend:xccl`` xpu, ``torch.backends.cudnn.benchmark``,
    ``env:NCCL_DEBUG`` and ``torch.utils.cpp_extension.CUDAExtension`` cuda.
    """
    for word in re.split(r"[^a-z0-9]+", use.api.lower()):
        family = _FAMILY_WORDS.get(word)
        if family is None and word.startswith("cuda"):
            family = "cuda"
        if family is not None:
            return family
    return None


def families(uses: Iterable["Use"]) -> set[str]:
    """Every accelerator family the uses belong to (see :func:`family_of`)."""
    found = {family_of(u) for u in uses}
    found.discard(None)
    return found  # type: ignore[return-value]


# -- results --------------------------------------------------------------------


@dataclass
class Use:
    """One accelerator-specific use found in a source file."""

    path: str
    line: int  #: 1-based
    col: int  #: 1-based, in characters
    api: str  #: canonical name (dotted, aliases resolved) or a pseudo-API name, see the module doc
    kind: str  #: namespace, method, attribute, device, dist-backend, tensor-type, env
    context: str = ""  #: where it sits: call, attribute, assign, reference, device=, .to(), torch.device, ...
    detail: str = ""  #: the literal, for string uses
    code: str = ""  #: the source line, stripped and shortened
    status: str = UNKNOWN
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScanError:
    """A file that could not be read or parsed."""

    path: str
    line: int | None
    message: str
    kind: str  #: "syntax" (cannot be parsed), "read" (cannot be read), "internal" (a scanner bug)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScanReport:
    paths: list[str]
    backend: str | None
    uses: list[Use] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)
    files_scanned: int = 0
    elapsed_s: float = 0.0
    backend_note: str = ""

    def by_status(self) -> dict[str, int]:
        counts = Counter(u.status for u in self.uses)
        out = {s: counts.pop(s, 0) for s in STATUSES}
        out.update(sorted(counts.items()))  # any status matrix.py adds later
        return out

    def by_api(self) -> list[dict]:
        counts = Counter(u.api for u in self.uses)
        first: dict[str, Use] = {}
        for u in self.uses:
            first.setdefault(u.api, u)
        return [
            {"api": api, "count": n, "status": first[api].status, "note": first[api].note}
            for api, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    def summary(self) -> dict:
        return {
            "files_scanned": self.files_scanned,
            "files_with_uses": len({u.path for u in self.uses}),
            "files_with_errors": len(self.errors),
            "uses": len(self.uses),
            "by_status": self.by_status(),
            "by_api": self.by_api(),
        }

    def as_dict(self) -> dict:
        from . import __version__

        return {
            "schema": 1,
            "torchdevice": __version__,
            "backend": self.backend,
            "backend_note": self.backend_note,
            "paths": list(self.paths),
            "elapsed_s": round(self.elapsed_s, 3),
            "summary": self.summary(),
            "uses": [u.as_dict() for u in self.uses],
            "errors": [e.as_dict() for e in self.errors],
        }

    def failing(self, fail_on: Iterable[str]) -> list[Use]:
        """The uses whose status matches ``--fail-on`` (see :func:`parse_fail_on`)."""
        wanted = set(fail_on)
        return [u for u in self.uses if u.status in wanted]


def parse_fail_on(spec: str) -> set[str]:
    """Turn ``"emulated"`` or ``"unsupported,unknown"`` into the set of statuses that fail.

    Each status in :data:`SEVERITY` brings every worse one with it;
    ``unknown`` and ``error`` match only themselves. Raises ``ValueError``.
    """
    out: set[str] = set()
    for item in filter(None, (p.strip().lower() for p in spec.split(","))):
        item = {"noop": "no-op", "errors": "error"}.get(item, item)
        if item in SEVERITY:
            out.update(SEVERITY[SEVERITY.index(item):])
        elif item in (UNKNOWN, "error"):
            out.add(item)
        else:
            allowed = ", ".join(SEVERITY + (UNKNOWN, "error"))
            raise ValueError(f"unknown status {item!r} (choose from {allowed})")
    if not out:
        raise ValueError("no status given")
    return out


# -- the AST analysis -------------------------------------------------------------------


def _ignore(node: ast.AST) -> None:
    pass


_ACCEL_CACHE: dict[str, bool] = {}


def _accel_chain(chain: str) -> bool:
    """Whether a resolved dotted name is accelerator-specific (see the module doc)."""
    hit = _ACCEL_CACHE.get(chain)
    if hit is None:
        parts = chain.split(".")
        hit = parts[0] == "torch" and any(_COMPONENT_RE.search(p) for p in parts[1:])
        if len(_ACCEL_CACHE) < 100_000:
            _ACCEL_CACHE[chain] = hit
    return hit


def _pseudo(chain: str) -> str:
    """``torch.Tensor.cuda`` -> ``.cuda()``; other chains unchanged."""
    owner, _, attr = chain.rpartition(".")
    if owner in _TENSOR_CLASSES:
        if attr in METHODS:
            return f".{attr}()"
        if attr in IS_ATTRS:
            return f".{attr}"
    return chain


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_TRY = tuple({ast.Try, getattr(ast, "TryStar", ast.Try)})
_HOT = re.compile(rb"cuda|CUDA|cudnn|nccl|NCCL|xccl|XCCL|xpu|XPU|mtia|MTIA|(?<![A-Za-z])(?:mps|MPS)")
_COMPOUND = tuple(
    getattr(ast, name) for name in ("If", "For", "AsyncFor", "While", "With", "AsyncWith", "Try", "TryStar", "Match")
    if hasattr(ast, name)
)
_HOT_STR = re.compile(_HOT.pattern.decode())
_NEWLINE = re.compile(rb"\r\n|\r|\n")


def _bodies(stmt: ast.AST) -> Iterator[list]:
    """The statement lists nested in a compound statement."""
    for name in ("body", "orelse", "finalbody"):
        value = getattr(stmt, name, None)
        if type(value) is list:
            yield value
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


def _stored_names(target: ast.AST) -> Iterator[str]:
    """Names bound by an assignment target (not the bases of ``x.attr =`` / ``x[i] =``)."""
    stack = [target]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, (ast.Tuple, ast.List)):
            stack.extend(node.elts)
        elif isinstance(node, ast.Starred):
            stack.append(node.value)


def _chain_parts(node: ast.AST) -> tuple[ast.Name, list[str]] | None:
    """``(Name a, ["b", "c"])`` for a Name/Attribute chain ``a.b.c``, else None."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node, attrs[::-1]


#: contexts of a device literal compared with ``==``/``!=``: with what a tensor or torch.device reports
#: (``x.device.type == "cuda"``: the real device type under translation) or with the program's own string
COMPARE_REAL, COMPARE_STRING = "== device.type", "== string"


def _real_device_expr(node: ast.AST, within_str: bool = False) -> bool:
    """Whether ``node`` reads a device's type or a device as torch reports it (``x.device.type``,
    ``device.type``, ``str(x.device)``): under translation the real device, not "cuda"."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return _real_device_expr(node.args[0], within_str=True)
    if not isinstance(node, ast.Attribute):
        return False
    if node.attr == "device":  # only inside str(): a bare `args.device` is as often the program's own string
        return within_str
    if node.attr == "type":
        inner = node.value
        name = inner.attr if isinstance(inner, ast.Attribute) else inner.id if isinstance(inner, ast.Name) else ""
        return "device" in name.lower() or (isinstance(inner, ast.Call) and _callee_is_device(inner))
    return False


def _callee_is_device(call: ast.Call) -> bool:
    return (_chain_text(call.func) or "").endswith("device")


def _chain_text(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = _chain_parts(node)
    return None if parts is None else ".".join([parts[0].id, *parts[1]])


def _local_names(fn: ast.AST) -> dict[str, list[tuple[int, ast.AST | None]]]:
    """What a function binds itself: ``name -> [(line, assigned chain node or None)]``.

    Parameters and names assigned by its statements (not by nested scopes').
    A ``name = a.b.c`` assignment keeps its value so that local aliases such
    as ``amp = torch.cuda.amp`` resolve.
    """
    names: dict[str, list[tuple[int, ast.AST | None]]] = {}

    def bind(name: str, line: int, value: ast.AST | None = None) -> None:
        names.setdefault(name, []).append((line, value))

    a = fn.args
    for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
        if arg is not None:
            bind(arg.arg, 0)
    if isinstance(fn, ast.Lambda):
        return names
    declared: set[str] = set()
    stack = [fn.body]
    while stack:
        for s in stack.pop():
            t = type(s)
            if t in _DEFS:
                bind(s.name, s.lineno)
                continue
            if t is ast.Assign:
                chain = s.value if len(s.targets) == 1 and isinstance(s.value, (ast.Name, ast.Attribute)) else None
                for target in s.targets:
                    for name in _stored_names(target):
                        bind(name, s.lineno, chain if isinstance(target, ast.Name) else None)
            elif t in (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor):
                for name in _stored_names(s.target):
                    bind(name, s.lineno)
            elif t in (ast.With, ast.AsyncWith):
                for item in s.items:
                    if item.optional_vars is not None:
                        for name in _stored_names(item.optional_vars):
                            bind(name, s.lineno)
            elif t in (ast.Global, ast.Nonlocal):
                declared.update(s.names)
            elif t in _TRY:
                for handler in s.handlers:
                    if handler.name:
                        bind(handler.name, handler.lineno)
            if t in _COMPOUND:
                stack.extend(_bodies(s))
    for name in declared:
        names.pop(name, None)
    return names


class _Analyzer:
    """Finds the uses in one parsed module, visiting only statements on "hot" lines.

    A use always sits in a statement whose lines contain an accelerator word
    (``cuda``, ``mps`` ...) or a name bound to an accelerator API (``tc`` after
    ``import torch.cuda as tc``); other statements are skipped unvisited.
    """

    def __init__(self, tree: ast.Module, data: bytes):
        # module-level bindings: name -> [(line, canonical dotted name or None)], in line order
        self.bindings: dict[str, list[tuple[int, str | None]]] = {}
        self.found: list[tuple[int, int, str, str, str, str]] = []
        self.scopes: list[ast.AST] = []
        self._locals: dict[int, dict] = {}
        self.context = ""
        self._alias_words: set[str] = set()
        self._collect_bindings(tree)
        self.hot = self._hot_lines(data)
        self._dispatch = {
            ast.Expr: self.visit_Expr, ast.Name: self.visit_Name, ast.Attribute: self.visit_Attribute,
            ast.Call: self.visit_Call, ast.Constant: self.visit_Constant, ast.JoinedStr: self.visit_JoinedStr,
            ast.FormattedValue: self.visit_FormattedValue, ast.FunctionDef: self._scoped,
            ast.Subscript: self.visit_Subscript, ast.Compare: self.visit_Compare,
            ast.AsyncFunctionDef: self._scoped, ast.Lambda: self._scoped, ast.Import: _ignore,
            ast.ImportFrom: _ignore, ast.Load: _ignore, ast.Store: _ignore, ast.Del: _ignore,
        }

    def _hot_lines(self, data: bytes) -> list[int]:
        if b"\r" in data:  # count lines as the parser does
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        patterns = [_HOT]
        words = [w for w in self._alias_words if not _HOT_STR.search(w)]
        if words:
            patterns.append(re.compile(rb"\b(?:" + b"|".join(re.escape(w.encode()) for w in words) + rb")\b"))
        lines: set[int] = set()
        for pattern in patterns:
            pos = last = 0
            line = 1
            while True:  # one step per hot line, not per match
                m = pattern.search(data, pos)
                if m is None:
                    break
                start = m.start()
                line += data.count(b"\n", last, start)
                lines.add(line)
                end = data.find(b"\n", start)
                if end < 0:
                    break
                pos = last = end + 1
                line += 1
        return sorted(lines)

    # -- bindings ---------------------------------------------------------------
    def _bind(self, name: str, line: int, target: str | None) -> None:
        self.bindings.setdefault(name, []).append((line, target))
        if target is not None and _accel_chain(target):
            self._alias_words.add(name)

    def _collect_bindings(self, tree: ast.Module) -> None:
        raw: list[tuple[int, int, ast.AST]] = []
        simple: list[tuple[str, str]] = []
        # (statements, in a function, in a class body)
        stack: list[tuple[list, bool, bool]] = [(tree.body, False, False)]
        while stack:
            stmts, in_function, in_class = stack.pop()
            module_level = not in_function and not in_class
            for s in stmts:
                t = type(s)
                if t is ast.Import or t is ast.ImportFrom:
                    raw.append((s.lineno, s.col_offset, s))
                    continue
                if t in _DEFS:
                    if module_level:
                        raw.append((s.lineno, s.col_offset, s))
                    stack.append((s.body, in_function or t is not ast.ClassDef, t is ast.ClassDef))
                    continue
                if t is ast.Assign and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                    text = _chain_text(s.value)
                    if text is not None:  # a possible alias, e.g. amp = torch.cuda.amp
                        simple.append((s.targets[0].id, text))
                if module_level and t in (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor,
                                          ast.With, ast.AsyncWith):
                    raw.append((s.lineno, s.col_offset, s))
                if t in _COMPOUND:
                    for body in _bodies(s):
                        stack.append((body, in_function, in_class))
        raw.sort(key=lambda r: (r[0], r[1]))
        for line, _, node in raw:
            t = type(node)
            if t is ast.Import:
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    if alias.asname:
                        self._bind(alias.asname, line, alias.name if top == "torch" else None)
                    else:
                        self._bind(top, line, "torch" if top == "torch" else None)
            elif t is ast.ImportFrom:
                module = node.module or ""
                from_torch = node.level == 0 and (module == "torch" or module.startswith("torch."))
                for alias in node.names:
                    if alias.name == "*":
                        if from_torch and _accel_chain(module):
                            self.found.append((line, node.col_offset, f"{module}.*", "namespace", "star-import", ""))
                        continue
                    self._bind(alias.asname or alias.name, line, f"{module}.{alias.name}" if from_torch else None)
            elif t in _DEFS:
                self._bind(node.name, line, None)
            elif t is ast.Assign:
                value = self._module_chain(node.value, line) if len(node.targets) == 1 else None
                for target in node.targets:
                    for name in _stored_names(target):
                        self._bind(name, line, value if isinstance(target, ast.Name) else None)
            else:
                if t in (ast.With, ast.AsyncWith):
                    targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
                else:
                    targets = [node.target]
                value = None
                if t is ast.AnnAssign and node.value is not None:
                    value = self._module_chain(node.value, line)
                for target in targets:
                    for name in _stored_names(target):
                        self._bind(name, line, value)

        # names assigned from accelerator chains, or from such names, anywhere: hot words too
        changed = True
        while changed:
            changed = False
            for name, text in simple:
                if name not in self._alias_words and (
                    _HOT_STR.search(text) or text.partition(".")[0] in self._alias_words
                ):
                    self._alias_words.add(name)
                    changed = True

    def _module_chain(self, node: ast.AST, line: int) -> str | None:
        """The dotted name of a chain over a torch alias, from the module bindings made before ``line``."""
        text = _chain_text(node)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        base = self._module_binding(head, line - 1)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def _module_binding(self, name: str, line: int) -> str | None:
        found = self.bindings.get(name)
        if not found:
            return "torch" if name == "torch" else None
        target = found[0][1]
        for bline, btarget in found:
            if bline > line:
                break
            target = btarget
        return target

    def _binding(self, name: str, line: int) -> str | None:
        """What ``name`` means at ``line``: a canonical torch name, or None."""
        for depth in range(len(self.scopes) - 1, -1, -1):
            scope = self.scopes[depth]
            names = self._locals.get(id(scope))
            if names is None:
                names = self._locals[id(scope)] = _local_names(scope)
            entries = names.get(name)
            if entries is not None:
                value = None
                for bline, bvalue in entries:
                    if bline >= line:
                        break
                    value = bvalue
                if value is None:
                    return None
                # a local alias: resolve its value where it was assigned (strictly earlier lines)
                saved = self.scopes
                self.scopes = saved[: depth + 1]
                try:
                    return self.resolve(value, before=bline)
                finally:
                    self.scopes = saved
        if name not in self.bindings and name != "torch":
            return None
        return self._module_binding(name, line)

    # -- resolution ---------------------------------------------------------------
    def resolve(self, node: ast.AST, before: int | None = None) -> str | None:
        """Canonical dotted name of a Name/Attribute chain rooted at a torch alias, else None."""
        parts = _chain_parts(node)
        if parts is None:
            return None
        root, attrs = parts
        base = self._binding(root.id, root.lineno if before is None else before)
        if base is None:
            return None
        return ".".join([base, *attrs])

    def report(self, node: ast.AST, api: str, kind: str, context: str = "", detail: str = "") -> None:
        self.found.append((node.lineno, node.col_offset, api, kind, context, detail))

    # -- traversal -------------------------------------------------------------------
    def visit(self, node: ast.AST) -> None:
        method = self._dispatch.get(type(node))
        if method is None:
            self.generic_visit(node)
        else:
            method(node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                if value and isinstance(value[0], ast.stmt):
                    self.visit_stmts(value)
                else:
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def visit_stmts(self, stmts: list) -> None:
        hot = self.hot
        n = len(hot)
        for s in stmts:
            start = s.lineno
            if type(s) in _DEFS and s.decorator_list:
                start = min(start, s.decorator_list[0].lineno)
            i = bisect.bisect_left(hot, start)
            if i < n and hot[i] <= (s.end_lineno or start):
                self.visit(s)

    def visit_module(self, tree: ast.Module) -> None:
        self.visit_stmts(tree.body)

    def _scoped(self, node: ast.AST) -> None:
        # decorators, defaults and annotations belong to the enclosing scope
        if not isinstance(node, ast.Lambda):
            for d in node.decorator_list:
                self.visit(d)
            if node.returns is not None:
                self.visit(node.returns)
        a = node.args
        for d in (*a.defaults, *(d for d in a.kw_defaults if d is not None)):
            self.visit(d)
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)
        self.scopes.append(node)
        try:
            if isinstance(node, ast.Lambda):
                self.visit(node.body)
            else:
                self.visit_stmts(node.body)
        finally:
            self.scopes.pop()

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            return  # docstrings and bare string statements are prose
        self.visit(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load) or node.id == "torch":
            return
        chain = self.resolve(node)
        if chain and _accel_chain(chain):
            self.report(node, _pseudo(chain), "namespace", self.context or "reference")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = self.resolve(node)
        if chain is not None:
            if _accel_chain(chain):
                api = _pseudo(chain)
                kind = "namespace" if api == chain else ("method" if api.endswith("()") else "attribute")
                ctx = self.context or ("assign" if not isinstance(node.ctx, ast.Load) else "attribute")
                self.report(node, api, kind, ctx)
            return
        if node.attr in IS_ATTRS and isinstance(node.ctx, ast.Load):
            self.report(node, f".{node.attr}", "attribute", "attribute")
        self.visit(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        positional_ctx = ""
        chain = self.resolve(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
        if chain is not None:
            if _accel_chain(chain):
                api = _pseudo(chain)
                self.report(func, api, "method" if api.endswith("()") else "namespace", "call")
            elif chain == "torch.device":
                positional_ctx = "torch.device"
            elif chain in _AUTOCAST:
                positional_ctx = "autocast"
            elif chain.startswith("torch.distributed.") and chain.rsplit(".", 1)[1] in (
                "init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration"
            ):
                positional_ctx = "backend="
        else:
            if isinstance(func, ast.Attribute):
                if func.attr in METHODS:
                    self.report(func, f".{func.attr}()", "method", "call")
                elif func.attr == "to":
                    positional_ctx = ".to()"
                elif func.attr in _ENV_FUNCS or (
                    func.attr in _ENV_METHODS and (_chain_text(func.value) or "").endswith("environ")
                ):
                    positional_ctx = "environ"
                self.visit(func.value)
            elif isinstance(func, ast.Name) and func.id in _ENV_FUNCS:
                positional_ctx = "environ"
            elif isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2:
                obj, name = node.args[0], node.args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str):
                    base = self.resolve(obj) if isinstance(obj, (ast.Name, ast.Attribute)) else None
                    if base is not None:
                        full = f"{base}.{name.value}"
                        if _accel_chain(full):
                            self.report(node, _pseudo(full), "namespace", func.id)
                            for arg in node.args[2:]:
                                self.visit(arg)
                            return
            else:
                self.visit(func)
        saved = self.context
        try:
            for arg in node.args:
                self.context = positional_ctx
                self.visit(arg)
            for kw in node.keywords:
                if kw.arg in _DEVICE_KWARGS or kw.arg in _DIST_KWARGS or kw.arg == "env":
                    self.context = f"{kw.arg}="
                else:
                    self.context = ""
                self.visit(kw.value)
        finally:
            self.context = saved

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if type(value) is not str or len(value) > 64 or not value:
            return
        m = _DEVICE_RE.fullmatch(value)
        if m:
            self.report(node, f"device:{m.group(1)}", "device", self._string_context(), value)
            return
        if "ccl" in value:
            m = _DIST_RE.fullmatch(value)
            if m:
                word = m.group(1) or (_DIST_WORD_RE.search(value) or [None, None])[1]
                if word:
                    self.report(node, f"dist-backend:{word}", "dist-backend", self._string_context(), value)
                    return
        if value.startswith("torch.") and _TENSOR_TYPE_RE.fullmatch(value):
            self.report(node, value, "tensor-type", self._string_context(), value)
            return
        if (self.context in ("environ", "env=") and "_" in value and _ENV_RE.fullmatch(value)
                and not _ENV_WORDS.isdisjoint(value.split("_"))):
            self.report(node, f"env:{value}", "env", self._string_context(), value)

    def _with_context(self, context: str, node: ast.AST) -> None:
        saved = self.context
        self.context = context
        try:
            self.visit(node)
        finally:
            self.context = saved

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)
        if (_chain_text(node.value) or "").endswith("environ"):  # os.environ["CUDA_VISIBLE_DEVICES"]
            self._with_context("environ", node.slice)
        else:
            self._with_context("", node.slice)

    def visit_Compare(self, node: ast.Compare) -> None:
        # "CUDA_VISIBLE_DEVICES" in os.environ
        environ = any((_chain_text(c) or "").endswith("environ") for c in node.comparators)
        if environ:
            self._with_context("environ", node.left)
            for c in node.comparators:
                self.visit(c)
            return
        # x.device.type == "cuda" (the real device type) vs device_type == "cuda" (the program's own string)
        operands = [node.left, *node.comparators]
        equality = all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
        for i, operand in enumerate(operands):
            context = self.context
            if equality and isinstance(operand, ast.Constant) and isinstance(operand.value, str):
                others = operands[:i] + operands[i + 1:]
                context = COMPARE_REAL if any(_real_device_expr(o) for o in others) else COMPARE_STRING
            self._with_context(context, operand)

    def _string_context(self) -> str:
        return "" if self.context in ("reference",) else self.context

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        values = node.values
        if values and isinstance(values[0], ast.Constant) and isinstance(values[0].value, str):
            head = values[0].value
            m = _DEVICE_PREFIX_RE.fullmatch(head)
            if m and (len(values) == 1 or isinstance(values[1], ast.FormattedValue)):
                text = "".join(
                    v.value if isinstance(v, ast.Constant) else "{}" for v in values
                )
                self.report(node, f"device:{m.group(1)}", "device", self._string_context(), text)
        for v in values:
            if isinstance(v, ast.FormattedValue):
                self.visit(v)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        saved = self.context
        self.context = ""
        try:
            self.visit(node.value)
            if node.format_spec is not None:
                self.visit(node.format_spec)
        finally:
            self.context = saved


def _needs_parse(data: bytes) -> bool:
    return any(w in data for w in _WORDS) or _MPS_BYTES.search(data) is not None





def _analyze(data: bytes, filename: str) -> tuple[list[tuple], ScanError | None]:
    """Uses as (line, col, api, kind, context, detail, code) tuples, or the parse error."""
    if not _needs_parse(data):
        return [], None
    try:
        tree = ast.parse(data, filename)
    except SyntaxError as exc:
        kind = type(exc).__name__
        return [], ScanError(filename, exc.lineno, f"{kind}: {exc.msg}", "syntax")
    except (ValueError, UnicodeDecodeError, MemoryError, RecursionError) as exc:
        return [], ScanError(filename, None, f"{type(exc).__name__}: {exc}", "syntax")
    try:
        analyzer = _Analyzer(tree, data)
        analyzer.visit_module(tree)
    except RecursionError as exc:
        return [], ScanError(filename, None, f"RecursionError: {exc} (nesting too deep to analyse)", "syntax")
    except Exception as exc:  # a scanner bug must cost one file, visibly, not the whole tree
        return [], ScanError(filename, None, f"internal error: {type(exc).__name__}: {exc}", "internal")
    if not analyzer.found:
        return [], None
    lines = _NEWLINE.split(data)
    out = []
    seen = set()
    for line, col, api, kind, context, detail in sorted(analyzer.found, key=lambda f: (f[0], f[1])):
        key = (line, col, api)
        if key in seen:
            continue
        seen.add(key)
        raw = lines[line - 1] if 0 < line <= len(lines) else b""
        text = raw.decode("utf-8", "replace")
        if not raw.isascii():
            col = len(raw[:col].decode("utf-8", "replace"))
        code = text.strip()
        if len(code) > 120:
            code = code[:117] + "..."
        out.append((line, col + 1, api, kind, context, detail, code))
    return out, None


def scan_source(source: str | bytes, path: str = "<string>") -> list[Use]:
    """Scan one source text; raises ``SyntaxError`` if it cannot be parsed. Statuses are left unknown."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    found, error = _analyze(data, path)
    if error is not None:
        raise SyntaxError(error.message, (path, error.line or 0, 0, ""))
    return [Use(path, *t) for t in found]


def _scan_file(path: str) -> tuple[str, list[tuple], ScanError | None]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return path, [], ScanError(path, None, f"{type(exc).__name__}: {exc.strerror or exc}", "read")
    found, error = _analyze(data, path)
    return path, found, error


def _scan_chunk(paths: Sequence[str]) -> list[tuple[str, list[tuple], ScanError | None]]:
    return [_scan_file(p) for p in paths]


# -- walking --------------------------------------------------------------------


def iter_files(paths: Iterable[str], default_excludes: bool = True, exclude: Sequence[str] = ()) -> Iterator[str]:
    """Yield the Python files under ``paths`` in a stable order (see the module doc)."""
    seen: set[str] = set()

    def excluded(name: str, path: str) -> bool:
        return any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(path, pat) for pat in exclude)

    def walk(top: str) -> Iterator[str]:
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        if default_excludes and any(e.name in ENV_MARKERS for e in entries):
            return
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if default_excludes and (name.startswith(".") or name in SKIP_DIRS):
                    continue
                if exclude and excluded(name, entry.path):
                    continue
                yield from walk(entry.path)
            elif name.endswith(SOURCE_SUFFIXES):
                if exclude and excluded(name, entry.path):
                    continue
                try:
                    if not entry.is_file():
                        continue
                except OSError:
                    continue
                yield entry.path

    for top in paths:
        if os.path.isdir(top):
            files: Iterable[str] = walk(top)
        else:
            files = [top]
        for path in files:
            key = os.path.normpath(path)
            if key not in seen:
                seen.add(key)
                yield path


# -- statuses -------------------------------------------------------------------


def status_lookup(backend: str | None) -> tuple[Callable[[str], tuple[str, str]], str]:
    """Return ``(lookup, note)``: ``lookup(api) -> (status, note)`` on ``backend``.

    Statuses come from ``torchdevice.matrix.status_for``; while that module is
    missing every status is ``"unknown"`` and ``note`` says why.
    """
    try:
        from .matrix import status_for  # type: ignore[attr-defined]
    except ImportError as exc:
        note = f"no statuses: torchdevice.matrix.status_for is not available ({exc})"
        return (lambda api: (UNKNOWN, "")), note
    if backend is None:
        return (lambda api: (UNKNOWN, "")), "no statuses: no backend"

    cache: dict[str, tuple[str, str]] = {}

    def lookup(api: str) -> tuple[str, str]:
        hit = cache.get(api)
        if hit is None:
            try:
                answer = status_for(api, backend)
            except Exception as exc:  # a broken matrix entry must not stop a scan
                hit = (UNKNOWN, f"status lookup failed: {type(exc).__name__}: {exc}")
            else:
                if answer is None:
                    hit = (UNKNOWN, "")
                else:
                    status, note = answer
                    hit = (getattr(status, "value", str(status)), note or "")
            cache[api] = hit
        return hit

    return lookup, ""


def _compare_effect(api: str, context: str, literal: str, status: str) -> tuple[str, str]:
    """What a comparison with a device literal does under translation (see :data:`COMPARE_REAL`)."""
    family = api.partition(":")[2]
    if status == "native":  # the target's own device type (cuda on the cuda backend): compares as natively
        return status, f"{family} is the target's own device type: the comparison behaves as without torchdevice"
    if context == COMPARE_REAL:
        return "native", (
            f"compares with the device torch reports, which is the target's real one under translation: "
            f"{literal!r} never matches (the comparison is False, `!=` True), so the program takes its "
            f"non-{family} branch here; `x.is_{family}` is translated and True for the target's tensors")
    if status == UNKNOWN:
        return status, ""
    return status, (
        f"compares the program's own string: it holds {literal!r} when the program chose {family} "
        f"(torch.{family}.is_available() is True for the source family under translation), so the "
        f"program takes its {family} branch; the string is translated where it reaches torch")


# -- the scan -------------------------------------------------------------------------


def scan_paths(
    paths: Sequence[str],
    backend: str | None = None,
    *,
    jobs: int | None = None,
    default_excludes: bool = True,
    exclude: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
    lookup: Callable[[str], tuple[str, str]] | None = None,
) -> ScanReport:
    """Scan every Python file under ``paths``; statuses are those on ``backend``.

    ``jobs`` is the number of worker processes (default: the CPU count; 1
    scans in this process); a pool is only used for :data:`PARALLEL_THRESHOLD`
    files or more. ``progress(done, total)`` is called as files complete.
    """
    start = time.perf_counter()
    files = list(iter_files(paths, default_excludes, exclude))
    total = len(files)
    report = ScanReport(paths=list(paths), backend=backend, files_scanned=total)
    if jobs is None:
        try:
            jobs = len(os.sched_getaffinity(0))  # the CPUs this process may use (containers, taskset)
        except (AttributeError, OSError):
            jobs = os.cpu_count() or 1
    jobs = max(1, min(jobs, 32, total // 64 or 1))
    results: list[tuple[str, list[tuple], ScanError | None]] = []
    if progress:
        progress(0, total)
    if jobs > 1 and total >= PARALLEL_THRESHOLD:
        results = _scan_parallel(files, jobs, progress)
    else:
        step = max(1, total // 200)
        for i, path in enumerate(files, 1):
            results.append(_scan_file(path))
            if progress and (i % step == 0 or i == total):
                progress(i, total)
    if lookup is None:
        lookup, report.backend_note = status_lookup(backend)
    order = {p: i for i, p in enumerate(files)}
    results.sort(key=lambda r: order[r[0]])
    for path, found, error in results:
        if error is not None:
            report.errors.append(error)
        for line, col, api, kind, context, detail, code in found:
            status, note = lookup(api)
            if kind == "device" and context in (COMPARE_REAL, COMPARE_STRING):
                status, note = _compare_effect(api, context, detail, status)
            report.uses.append(Use(path, line, col, api, kind, context, detail, code, status, note))
    report.elapsed_s = time.perf_counter() - start
    return report


def _scan_parallel(files, jobs, progress):
    import concurrent.futures as cf
    import multiprocessing as mp

    # fork (where it is the safe default, Linux) avoids re-importing torch in every worker
    method = "fork" if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods() else None
    ctx = mp.get_context(method)
    size = max(8, min(256, len(files) // (jobs * 8)))
    chunks = [files[i:i + size] for i in range(0, len(files), size)]
    results = []
    done = 0
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(_scan_chunk, chunk) for chunk in chunks]
        for fut in cf.as_completed(futures):
            part = fut.result()
            results.extend(part)
            done += len(part)
            if progress:
                progress(done, len(files))
    return results


# -- terminal output --------------------------------------------------------------------


_COLOURS = {
    "native": "32",  # green
    "translated": "36",  # cyan
    "no-op": "34",  # blue
    "emulated": "33",  # yellow
    "unsupported": "1;31",  # bold red
    UNKNOWN: "35",  # magenta
    "error": "31",
}


class _Paint:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled and code else text

    def status(self, status: str, width: int = 0) -> str:
        return self(status.ljust(width), _COLOURS.get(status, ""))


def use_colour(stream, mode: str = "auto") -> bool:
    """Colour when ``mode`` is always, or auto and ``stream`` is a TTY and NO_COLOR is unset/empty."""
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def render_text(report: ScanReport, colour: bool = False, api_limit: int = 25, note_width: int = 100,
                uses: bool = True) -> str:
    """The terminal report: uses grouped by file (unless ``uses`` is false), unscannable files, the summary."""
    paint = _Paint(colour)
    out: list[str] = []
    by_file: dict[str, list[Use]] = {}
    for u in report.uses if uses else ():
        by_file.setdefault(u.path, []).append(u)
    status_w = max((len(u.status) for u in report.uses), default=7)
    for path, uses in by_file.items():
        out.append(paint(path, "1"))
        api_w = min(48, max(len(u.api) for u in uses))
        loc_w = max(len(f"{path}:{u.line}:{u.col}") for u in uses)
        for u in uses:
            where = f"{path}:{u.line}:{u.col}"
            extra = []
            if u.context and u.context not in ("call", "attribute", "reference"):
                extra.append(u.context)
            if u.note:
                extra.append(u.note if len(u.note) <= note_width else u.note[: note_width - 3] + "...")
            tail = f"  {paint('  '.join(extra), '2')}" if extra else ""
            out.append(f"  {paint(where.ljust(loc_w), '2')}  {u.api.ljust(api_w)}  "
                       f"{paint.status(u.status, status_w)}{tail}")
        out.append("")
    if report.errors:
        out.append(paint(f"{len(report.errors)} file(s) could not be scanned:", "1"))
        for e in report.errors:
            loc = f"{e.path}:{e.line}" if e.line else e.path
            out.append(f"  {loc}: {paint(e.message, _COLOURS['error'])}")
        out.append("")
    summary = report.summary()
    backend = report.backend or "none"
    out.append(paint(
        f"{summary['uses']} use(s) of {len(summary['by_api'])} API(s) in {summary['files_with_uses']} of "
        f"{summary['files_scanned']} file(s), statuses on backend '{backend}' ({report.elapsed_s:.2f}s)", "1"))
    if report.backend_note:
        out.append(f"  {paint(report.backend_note, '2')}")
    for status, n in summary["by_status"].items():
        if n or status in SEVERITY:
            out.append(f"  {paint.status(status, 12)} {n:>6}")
    if summary["by_api"]:
        out.append(paint("By API:", "1"))
        rows = summary["by_api"]
        api_w = min(56, max(len(r["api"]) for r in rows[:api_limit]))
        for r in rows[:api_limit]:
            out.append(f"  {r['api'].ljust(api_w)} {r['count']:>6}  {paint.status(r['status'])}")
        if len(rows) > api_limit:
            out.append(f"  ... {len(rows) - api_limit} more (--format json lists all)")
    return "\n".join(out)


def render_plain(report: ScanReport) -> str:
    """One line per use, ``path:line:col: api [status] note``, for editors and logs."""
    lines = [
        f"{u.path}:{u.line}:{u.col}: {u.api} [{u.status}]" + (f" {u.note}" if u.note else "")
        for u in report.uses
    ]
    lines += [f"{e.path}:{e.line or 0}: error: {e.message}" for e in report.errors]
    return "\n".join(lines)


class ProgressBar:
    """A one-line bar on ``stream`` (stderr), redrawn at most every 0.1 s; cleared by :meth:`close`."""

    def __init__(self, stream=None, min_total: int = 200):
        self.stream = stream or sys.stderr
        self.min_total = min_total
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = int(width * done / total) if total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r\033[Kscanning [{bar}] {done}/{total} files")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False


# -- command line -----------------------------------------------------------------


def add_arguments(parser) -> None:
    """Add the ``scan`` options to an argparse (sub)parser."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to scan")
    parser.add_argument("--backend", metavar="NAME",
                        help="report statuses on this backend (default: the one torchdevice would select)")
    parser.add_argument("--format", choices=("text", "json", "plain"), default="text",
                        help="text (grouped by file), json (uses + summary) or plain (path:line:col: api [status])")
    parser.add_argument("--fail-on", metavar="STATUS[,STATUS]",
                        help="exit 1 if any use has one of these statuses or a worse one "
                             f"({' < '.join(SEVERITY)}; 'unknown' and 'error' match only themselves)")
    parser.add_argument("--summary", action="store_true",
                        help="text format: print only the files that could not be scanned and the summary")
    parser.add_argument("--color", "--colour", dest="color", choices=("auto", "always", "never"), default="auto",
                        help="colour the text output (auto: when stdout is a TTY and NO_COLOR is unset)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: CPU count)")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="skip files and directories whose name or path matches (repeatable)")
    parser.add_argument("--no-default-excludes", action="store_true",
                        help="also scan hidden directories, __pycache__, site-packages and environments")


def _resolve_backend(requested: str | None) -> tuple[str | None, str, str | None]:
    """(backend, note, error) for ``--backend``; the default is the backend torchdevice selects."""
    import torchdevice

    from .errors import TorchDeviceError

    if requested is None:
        try:
            return torchdevice.current_backend(), "", None
        except TorchDeviceError as exc:
            return None, f"no backend is selected here ({exc})", None
    known = [r.name for r in torchdevice.backends()]
    if requested not in known:
        return None, "", f"unknown backend {requested!r} (known: {', '.join(known) or 'none'})"
    return requested, "", None


def run(args) -> int:
    """The ``torchdevice scan`` command; returns the exit status."""
    fail_on: set[str] = set()
    if args.fail_on:
        try:
            fail_on = parse_fail_on(args.fail_on)
        except ValueError as exc:
            print(f"torchdevice scan: error: --fail-on: {exc}", file=sys.stderr)
            return 2
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"torchdevice scan: error: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.jobs is not None and args.jobs < 1:
        print("torchdevice scan: error: --jobs must be at least 1", file=sys.stderr)
        return 2
    backend, note, error = _resolve_backend(args.backend)
    if error:
        print(f"torchdevice scan: error: {error}", file=sys.stderr)
        return 2
    bar = None
    if not args.no_progress and sys.stderr.isatty():
        bar = ProgressBar(sys.stderr)
    try:
        report = scan_paths(args.paths, backend, jobs=args.jobs, exclude=args.exclude,
                            default_excludes=not args.no_default_excludes, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if note:
        report.backend_note = "; ".join(filter(None, (note, report.backend_note)))
    if args.format == "json":
        import json

        text = json.dumps(report.as_dict(), indent=2)
    elif args.format == "plain":
        text = render_plain(report)
    else:
        text = render_text(report, colour=use_colour(sys.stdout, args.color), uses=not args.summary)
    try:
        if text:
            print(text, flush=True)
    except BrokenPipeError:  # `torchdevice scan . | head`: the reader left; the exit status still counts
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    failing = report.failing(fail_on)
    if "error" in fail_on and report.errors:
        return 1
    if failing:
        if args.format == "text":
            print(f"torchdevice scan: {len(failing)} use(s) with status {', '.join(sorted(fail_on))}",
                  file=sys.stderr)
        return 1
    return 0
