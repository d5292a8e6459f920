"""The AST analysis of one source file: :class:`_Analyzer` finds the uses (the rules are the
docstring of :mod:`torchdevice.scan`); :func:`scan_source` and the per-file entry points of a tree scan."""
from __future__ import annotations

import ast
import bisect
import re
from typing import Any, Sequence

from .results import ScanError, Use
from .syntax import (
    _AUTOCAST,
    _COMPOUND,
    _DEFS,
    _DEVICE_KWARGS,
    _DEVICE_PREFIX_RE,
    _DEVICE_RE,
    _DIST_KWARGS,
    _DIST_RE,
    _DIST_WORD_RE,
    _ENV_FUNCS,
    _ENV_METHODS,
    _ENV_RE,
    _ENV_WORDS,
    _HOT,
    _HOT_STR,
    _MPS_BYTES,
    _NEWLINE,
    _TENSOR_TYPE_RE,
    _WORDS,
    COMPARE_REAL,
    COMPARE_STRING,
    IS_ATTRS,
    METHODS,
    _accel_chain,
    _bodies,
    _chain_parts,
    _chain_text,
    _ignore,
    _local_names,
    _pseudo,
    _real_device_expr,
    _stored_names,
)


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
        raw: list[tuple[int, int, Any]] = []  # nodes dispatched on their exact type below
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

    def report(self, node: Any, api: str, kind: str, context: str = "", detail: str = "") -> None:
        self.found.append((node.lineno, node.col_offset, api, kind, context, detail))

    # -- traversal -------------------------------------------------------------------
    def visit(self, node: ast.AST) -> None:
        method: Any = self._dispatch.get(type(node))
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

    def _scoped(self, node: Any) -> None:  # a FunctionDef, AsyncFunctionDef or Lambda
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
                    str(v.value) if isinstance(v, ast.Constant) else "{}" for v in values
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
