"""What the analysis looks for (accelerator words, device-string patterns, keyword names) and
small helpers over :mod:`ast` nodes: dotted chains, bound names, local bindings of a function."""
from __future__ import annotations

import ast
import re
from typing import Any, Iterator

from ..vocabulary import SOURCE_FAMILIES

ACCEL_TYPES = SOURCE_FAMILIES
METHODS = frozenset({"cuda", "xpu", "mtia"})
IS_ATTRS = frozenset({"is_cuda", "is_mps", "is_xpu", "is_mtia"})

# A file holding none of these cannot hold a use (every rule needs one literally).
_WORDS = (b"cuda", b"CUDA", b"cudnn", b"nccl", b"NCCL", b"xccl", b"XCCL", b"xpu", b"XPU", b"mtia", b"MTIA",
          b"accelerator")
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
_COMPONENT_RE = re.compile(
    r"(?:^|_)(?:cuda|cudnn|nccl|xccl|mps|xpu|mtia)(?:_|$)|^CUDA|(?:^|_)(?:NCCL|XCCL)(?:_|$)|^accelerator$")

_DEVICE_KWARGS = frozenset({
    "device", "map_location", "device_type", "output_device", "dst_device", "src_device",
    "storage_device", "compute_device", "offload_device", "device_id",
})
_DIST_KWARGS = frozenset({"backend"})
_AUTOCAST = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler",
                       "torch.get_device_module", "torch.set_default_device"})
_TENSOR_CLASSES = frozenset({"torch.Tensor", "torch.nn.Module"})


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
_HOT = re.compile(rb"cuda|CUDA|cudnn|nccl|NCCL|xccl|XCCL|xpu|XPU|mtia|MTIA|accelerator|(?<![A-Za-z])(?:mps|MPS)")
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


def _local_names(fn: Any) -> dict[str, list[tuple[int, ast.AST | None]]]:
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
