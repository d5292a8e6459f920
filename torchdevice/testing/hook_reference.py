"""The generator of the hook reference in ``docs/plugins.md`` (not part of the vendor kit: the kit's
command runs it, ``python -m torchdevice.testing --write-docs docs/plugins.md``). It renders the hookspecs
(:mod:`torchdevice.hookspecs`) and the backend API (:mod:`torchdevice.backend`) with their annotations."""
from __future__ import annotations

import inspect
import re
from typing import Any, Callable, cast

from .. import hookspecs
from ..backend import (
    FAMILIES,
)

BEGIN = "<!-- BEGIN hook-reference: generated from torchdevice/hookspecs.py and torchdevice/backend.py " \
        "by `python -m torchdevice.testing --write-docs docs/plugins.md`; do not edit by hand -->"
END = "<!-- END hook-reference -->"


def _markdown(doc: str | None) -> str:
    """A reST docstring as Markdown: roles and double backquotes become code spans."""
    text = inspect.cleandoc(doc or "")
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"::$", ":", text, flags=re.MULTILINE)  # the indented block after it is Markdown code too
    return text.replace("``", "`")


def _render_signature(fn: Callable[..., Any], name: str | None = None) -> str:
    """``name(param: annotation = default, ...) -> return`` without ``self``, annotations as written in the source."""
    sig = inspect.signature(fn)
    params, star_done = [], False
    for param in sig.parameters.values():
        if param.name == "self":
            continue
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, star_done = "*" + text, True
        elif param.kind is param.VAR_KEYWORD:
            text = "**" + text
        elif param.kind is param.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        if param.annotation is not param.empty:
            text += f": {_annotation(param.annotation)}"
        if param.default is not param.empty:
            text += f" = {param.default!r}"
        params.append(text)
    returns = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"{name or fn.__name__}({', '.join(params)}){returns}"


def _annotation(annotation: object) -> str:
    if isinstance(annotation, str):
        return annotation
    return inspect.formatannotation(annotation)


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties ``cls`` declares itself, in source order."""
    return [(name, value) for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))]


def _member_lines(name: str, value: Callable[..., Any] | property) -> list[str]:
    if isinstance(value, property):
        fn = cast(Callable[..., Any], value.fget)
        returns = inspect.signature(fn).return_annotation
        head = name + ("" if returns is inspect.Signature.empty else f" -> {_annotation(returns)}") + "` (property)"
        head = "`" + head
    else:
        fn = value
        head = f"`{_render_signature(fn, name)}`"
    doc = " ".join(p.replace("\n", " ") for p in _markdown(fn.__doc__).split("\n\n") if p)
    return [f"* {head}: {doc}" if doc else f"* {head}"]


def hook_reference_markdown() -> str:
    """The hook reference as Markdown: hookspec signatures and docstrings, the ``Backend`` base, and
    every family's operations with their signatures and docstrings, read from the code."""
    from ..backend import Backend, EventInterface, Ops, StreamInterface

    lines = []
    hooks = [
        (name, fn) for name, fn in vars(hookspecs).items()
        if name.startswith("torchdevice_") and callable(fn)
    ]
    hooks.sort(key=lambda item: inspect.getsourcelines(item[1])[1])
    for name, fn in hooks:
        opts = getattr(fn, f"{hookspecs.PROJECT}_spec", {}) or {}
        kind = "first result wins" if opts.get("firstresult") else "all results collected"
        lines += [f"### `{_render_signature(fn, name)}`", "", f"*{kind}*", "", _markdown(fn.__doc__), ""]

    lines += ["### `Backend`: the base class of a plugin", "", _markdown(Backend.__doc__), ""]
    for name, value in _members(Backend):
        if not hasattr(value, f"{hookspecs.PROJECT}_impl"):  # the hooks themselves are listed above
            lines += _member_lines(name, value)
    lines.append("")

    lines += ["### The families: what every operation has in common", "", _markdown(Ops.__doc__), ""]
    for family, cls in FAMILIES.items():
        lines += [f"### The {family} family: `{cls.__module__}.{cls.__name__}`", "", _markdown(cls.__doc__), ""]
        for op in cls.operations():
            lines += _member_lines(op, getattr(cls, op))
        lines.append("")
        if family == "streams":
            for iface in (StreamInterface, EventInterface):
                lines += [f"#### `{iface.__name__}`: the backend's `{iface.__name__[:-len('Interface')]}` class", "",
                          _markdown(iface.__doc__), ""]
                for name, value in _members(iface):
                    lines += _member_lines(name, value)
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _replace_block(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"markers not found; the file needs the lines\n{BEGIN}\n{END}")
    return text[: start + len(BEGIN)] + "\n\n" + hook_reference_markdown() + "\n" + text[end:]


def hook_reference_is_current(path: str) -> bool:
    """Whether the generated block of ``path`` matches the hookspecs as they are now."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return _replace_block(text) == text


def write_hook_reference(path: str) -> bool:
    """Regenerate the block of ``path``; return whether it changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = _replace_block(text)
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text
