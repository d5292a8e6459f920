"""The codemod: the scan's uses of one source, turned into libcst edits (comments and layout kept).

Each use the scan reports (line, column, name) is matched with the syntax node at that position and
rewritten by its :mod:`.rules` entry; a use no node took, or whose rule is ``unportable``, is reported.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..scan.analysis import _analyze
from ..scan.results import Use, family_of
from . import rules
from .rules import Rule

NAME = "ACCELERATOR"
FALLBACK_NAME = "TORCH_ACCELERATOR"
RESOLVE = "torch.accelerator.current_accelerator(check_available=True) or torch.device(\"cpu\")"
DEFAULT_BACKEND = "torch.distributed.get_default_backend_for_device({name})"


class PortError(Exception):
    """A source that cannot be ported: it does not parse (line and column in the message)."""


@dataclass
class Unported:
    line: int
    col: int
    api: str
    why: str


@dataclass
class PortResult:
    code: str
    ported: int = 0
    unported: list[Unported] = field(default_factory=list)


@dataclass
class _Site:
    use: Use
    rule: Rule
    done: bool = False


def _last(api: str) -> str:
    return api.rstrip("()").rpartition(".")[2]


def _pure_chain(node: cst.BaseExpression) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def _rule_for(use: Use) -> Rule:
    if use.kind == "namespace":
        return rules.namespace_rule(use.api)
    if use.kind in ("method", "attribute"):
        if use.api.startswith("."):
            return Rule(rules.ACCEL)
        return rules.namespace_rule(use.api)
    return rules.string_rule(use.kind)


_Expr = Union[cst.BaseExpression, cst.FlattenSentinel, cst.RemovalSentinel]


class _Porter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, sites: Sequence[_Site], name: str):
        super().__init__()
        self.at: dict[tuple[int, int], list[_Site]] = {}
        for site in sites:
            self.at.setdefault((site.use.line, site.use.col), []).append(site)
        self.name = name
        self.used = False  # whether a rewrite refers to the accelerator
        self.kept_lines: set[int] = set()
        self.calls: dict[int, _Site] = {}  # id(original func node) -> its site, for call rewrites

    # -- matching ---------------------------------------------------------------------------------
    def _site(self, node: cst.CSTNode, kinds: tuple[str, ...], last: str | None = None) -> _Site | None:
        pos = self.get_metadata(PositionProvider, node).start
        for site in self.at.get((pos.line, pos.column + 1), ()):
            if site.use.kind in kinds and (last is None or _last(site.use.api) == last):
                return site
        return None

    def _acc(self, suffix: str = "") -> str:
        self.used = True
        return self.name + suffix

    # -- names and attributes -------------------------------------------------------------------
    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        site = self._site(original, ("namespace",), original.value)
        return updated if site is None else self._reference(site, original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        site = self._site(original, ("namespace", "method", "attribute"), original.attr.value)
        if site is None:
            return updated
        if not site.use.api.startswith("."):  # a dotted torch name, aliases resolved by the scan
            return self._reference(site, original, updated) if _pure_chain(original) else updated
        if site.use.kind == "method":
            self.calls[id(original)] = site  # `.cuda(...)`: the call is rewritten in leave_Call
            return updated
        site.done = True  # x.is_cuda -> (x.device.type == ACCELERATOR.type)
        compare = _expr(f"_.device.type == {self._acc('.type')}")
        assert isinstance(compare, cst.Comparison)
        left: cst.BaseExpression = updated.value
        for attr_name in ("device", "type"):
            left = cst.Attribute(value=left, attr=cst.Name(attr_name))
        return compare.with_changes(left=left, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

    def _reference(self, site: _Site, original: cst.BaseExpression, updated: cst.BaseExpression
                   ) -> cst.BaseExpression:
        rule = site.rule
        if rule.action in (rules.UNPORTABLE, rules.AGNOSTIC):
            return updated
        site.done = True
        self.calls[id(original)] = site
        if rule.action == rules.KEPT:
            self.kept_lines.add(site.use.line)
            return updated
        if rule.action == rules.ACCEL:
            return _expr(f"torch.accelerator.{rule.target}")
        if rule.action == rules.TORCH:
            return _expr(f"torch.{rule.target}")
        if rule.action == rules.AMP:
            return _expr(f"torch.amp.{rule.target}")
        if rule.action == rules.BUILT:
            return updated  # the call is rewritten in leave_Call
        rest = rules._family_split(site.use.api)
        member = f".{rest[2]}" if rest and rest[2] else ""
        return _expr(f"torch.get_device_module({self._acc()}){member}")

    # -- calls -------------------------------------------------------------------------------------
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        site = self.calls.get(id(original.func))
        if site is None:
            return updated
        if site.use.kind == "method":
            site.done = True
            return self._to_call(updated)
        if site.rule.action == rules.BUILT:
            return _expr("(torch.accelerator.current_accelerator() is not None)")
        if site.rule.action != rules.AMP:
            return updated
        args = list(updated.args)
        if site.rule.target == "autocast" and _family_namespace(site.use.api).endswith(".amp"):
            args = [a.with_changes(keyword=cst.Name(k), equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
                    if a.keyword is None and not a.star else a
                    for a, k in zip(args, (*rules.AUTOCAST_POSITIONAL, *[""] * len(args)))]
        device = cst.Arg(_expr(self._acc(".type")))
        if args:
            device = device.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(args=[device, *args])

    def _to_call(self, call: cst.Call) -> cst.Call:
        """``x.cuda()`` -> ``x.to(ACCELERATOR)``; ``x.cuda(1)`` -> ``x.to(torch.device(ACCELERATOR.type, 1))``.

        The arguments keep their layout and comments: the index is replaced in place, or the device put first.
        """
        assert isinstance(call.func, cst.Attribute)
        args = list(call.args)
        at = next((i for i, a in enumerate(args) if a.keyword is None and not a.star or
                   a.keyword is not None and a.keyword.value == "device"), None)
        if at is None:
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if args else cst.MaybeSentinel.DEFAULT
            args.insert(0, cst.Arg(_expr(self._acc()), comma=comma))
        else:
            target = _expr(f"torch.device({self._acc('.type')}, _)")
            assert isinstance(target, cst.Call)
            index = target.args[1].with_changes(value=args[at].value)
            args[at] = args[at].with_changes(value=target.with_changes(args=[target.args[0], index]))
        return call.with_changes(func=call.func.with_changes(attr=cst.Name("to")), args=args)

    # -- strings ---------------------------------------------------------------------------------
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        site = self._site(original, ("device", "dist-backend"))
        if site is None:
            return updated
        value = ast.literal_eval(original.value)
        if not isinstance(value, str):
            return updated
        site.done = True
        if site.use.kind == "dist-backend":
            return self._dist_backend(value, original.quote)
        family = site.use.api.partition(":")[2]
        rest = value[len(family):]
        if not rest:
            return _expr(self._acc(".type"))
        text = rest.replace("{", "{{").replace("}", "}}").replace("\\", "\\\\").replace(original.quote, "\\" +
                                                                                         original.quote)
        return _expr(f"f{original.quote}{{{self._acc('.type')}}}{text}{original.quote}")

    def _dist_backend(self, value: str, quote: str) -> cst.BaseExpression:
        engine = DEFAULT_BACKEND.format(name=self._acc())
        if value in ("nccl", "xccl"):
            return _expr(engine)
        parts = []  # "cpu:gloo,cuda:nccl" -> f"cpu:gloo,{ACCELERATOR.type}:{engine}"
        for part in value.split(","):
            device, _, backend = part.partition(":")
            if backend in ("nccl", "xccl"):
                part = f"{{{self._acc('.type')}}}:{{{engine}}}"
            parts.append(part)
        other = "'" if quote == '"' else '"'
        return _expr(f"f{quote}{','.join(parts).replace(quote, other)}{quote}")

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString
                              ) -> cst.BaseExpression:
        site = self._site(original, ("device",))
        head = updated.parts[0] if updated.parts else None
        if site is None or not isinstance(head, cst.FormattedStringText):
            return updated
        site.done = True
        family = site.use.api.partition(":")[2]
        accel = cst.FormattedStringExpression(_expr(self._acc(".type")))
        rest = head.value[len(family):]
        new_head = [accel, cst.FormattedStringText(rest)] if rest else [accel]
        return updated.with_changes(parts=[*new_head, *updated.parts[1:]])

    # -- statements ----------------------------------------------------------------------------------
    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if not updated.body:
            return cst.RemoveFromParent()
        line = self.get_metadata(PositionProvider, original).start.line
        if line in self.kept_lines and updated.trailing_whitespace.comment is None:
            comment = cst.Comment(rules.KEPT_COMMENT)
            return updated.with_changes(trailing_whitespace=updated.trailing_whitespace.with_changes(
                whitespace=cst.SimpleWhitespace("  "), comment=comment))
        return updated

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom
                         ) -> cst.ImportFrom | cst.RemovalSentinel:
        module = _dotted(original.module) if original.module is not None and not original.relative else ""
        if _droppable(module):
            return cst.RemoveFromParent()
        return updated

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import | cst.RemovalSentinel:
        names = [a for a in updated.names if not (_droppable(_dotted(a.name)) and a.asname is not None)]
        if len(names) == len(updated.names):
            return updated
        if not names:
            return cst.RemoveFromParent()
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=names)


def _family_namespace(api: str) -> str:
    return api.rpartition(".")[0]


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _droppable(module: str) -> bool:
    """An import from a family namespace whose every use the port rewrites to ``torch.*`` names."""
    return module in ("torch.cuda", "torch.cuda.amp", "torch.mps", "torch.xpu", "torch.mtia", "torch.xpu.amp")


# -- the module ------------------------------------------------------------------------------------


def _header_name(source: str) -> str:
    for name in (NAME, FALLBACK_NAME):
        if f"{name} = {RESOLVE}" in source or not re.search(rf"\b{name}\b", source):
            return name
    raise PortError(f"both {NAME} and {FALLBACK_NAME} are names in this file: rename one to port it")


def _is_import_line(stmt: cst.BaseStatement, first: bool) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    body = stmt.body
    if first and len(body) == 1 and isinstance(body[0], cst.Expr) and isinstance(
            body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        return True  # the docstring
    return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in body)


def _binds_torch(stmt: cst.BaseStatement) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    return any(isinstance(s, cst.Import) and any(a.asname is None and _dotted(a.name).split(".")[0] == "torch"
                                                 for a in s.names) for s in stmt.body)


def _add_header(module: cst.Module, name: str) -> cst.Module:
    body = list(module.body)
    line = f"{name} = {RESOLVE}"
    if any(isinstance(s, cst.SimpleStatementLine) and module.code_for_node(s).strip() == line for s in body):
        return module
    at = 0
    while at < len(body) and _is_import_line(body[at], at == 0):
        at += 1
    new: list[cst.BaseStatement] = [cst.parse_statement(line + "\n")]
    if not any(_binds_torch(s) for s in body[:at]):
        new.insert(0, cst.parse_statement("import torch\n"))
    return module.with_changes(body=[*body[:at], *new, *body[at:]])


def _parse(source: str, path: str) -> cst.Module:
    try:
        ast.parse(source, path)
    except SyntaxError as exc:
        raise PortError(f"{path}:{exc.lineno}:{exc.offset}: cannot parse: {exc.msg}") from None
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise PortError(f"{path}:{exc.raw_line}:{exc.raw_column + 1}: cannot parse: {exc.message}") from None


def port_source(source: str, path: str = "<string>", families: Sequence[str] | None = None) -> PortResult:
    """Port one source text; ``families`` limits the port to those source families (default: all).

    Raises :class:`PortError` for a source that does not parse.
    """
    module = _parse(source, path)
    found, error = _analyze(source.encode("utf-8"), path)
    if error is not None:
        raise PortError(f"{path}:{error.line}: cannot parse: {error.message}")
    uses = [Use(path, *t) for t in found]
    sites = [_Site(u, _rule_for(u)) for u in uses if families is None or family_of(u) in (*families, None)]
    name = _header_name(source)
    porter = _Porter(sites, name)
    ported = MetadataWrapper(module).visit(porter)
    if porter.used:
        ported = _add_header(ported, name)
    result = PortResult(ported.code, ported=sum(s.done for s in sites))
    for site in sites:
        if not site.done and site.rule.action != rules.AGNOSTIC:
            why = site.rule.why or "no rewrite applies where it is used here"
            result.unported.append(Unported(site.use.line, site.use.col, site.use.api, why))
    return result
