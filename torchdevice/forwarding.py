"""Generated functions that take exactly another function's parameters and pass them on.

A wrapper written ``def wrapper(*args, **kwargs)`` packs every call's arguments and shows a
useless signature; the wrappers torchdevice installs (:mod:`torchdevice.namespaces.wrapping`,
:func:`torchdevice.boundary.split`) are generated with the wrapped function's own parameter list
instead, so a call forwards its arguments as they are, and ``inspect.signature`` and a wrong
call's ``TypeError`` read as the original's.

Activation wraps about two hundred functions, most of them of a handful of signature shapes
(``(device=None)``, ``()``, ...): :func:`maker` compiles one maker per pattern, not one
function per wrapped function. The patterns activating the built-in CPU backend uses are not
compiled at all: they are kept as source in :mod:`torchdevice._forwarding_made` (bytecode-cached
like any module), written by ``python scripts/forwarding_made.py`` and checked by the tests.
"""
from __future__ import annotations
import __future__

import inspect
import types
from typing import Any, Callable

from . import _forwarding_made

#: ``(name, kind, has_default)`` per parameter, in order (kinds are :class:`inspect.Parameter`'s)
Shape = tuple[tuple[str, Any, bool], ...]

#: (body, names, shape) -> its maker; (body, names, shape with generic names) -> the compiled one it uses
_makers: dict[tuple[str, tuple[str, ...], Shape], Callable] = {}
_compiled: dict[tuple[str, tuple[str, ...], Shape], Callable] = {}
#: the source of every maker compiled in this process (not found in :mod:`torchdevice._forwarding_made`)
compiled_sources: list[str] = []
#: the makers kept as source, by the source they were written from
_made: dict[str, Callable] = dict(_forwarding_made.MADE)
#: the flag of ``from __future__ import annotations``: a maker's annotations are kept as strings, never evaluated
_ANNOTATIONS = __future__.annotations.compiler_flag


def shape_of(fn: Callable, *, follow_wrapped: bool = True) -> tuple[Shape, list[Any]]:
    """``fn``'s parameters as a :data:`Shape` and its default values, in order.

    ``follow_wrapped``: read the signature ``inspect.signature`` shows (through ``__wrapped__``
    and ``__signature__``); otherwise the parameters of ``fn``'s own code, where it is a plain function.
    """
    if type(fn) is types.FunctionType and not (
            follow_wrapped and (hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"))):
        return code_shape(fn)  # what inspect.signature would say, at a tenth of the cost
    params = inspect.signature(fn, follow_wrapped=follow_wrapped).parameters.values()
    shape = tuple((p.name, p.kind, p.default is not p.empty) for p in params)
    return shape, [p.default for p in params if p.default is not p.empty]


#: (code, number of defaults, keyword-only names with defaults) -> shape: the closures one builder makes share it
_code_shapes: dict[tuple[types.CodeType, int, frozenset[str]], Shape] = {}


def code_shape(fn: types.FunctionType) -> tuple[Shape, list[Any]]:
    """:func:`shape_of` a plain function, read from its code object and defaults."""
    defaults = list(fn.__defaults__ or ())
    kwdefaults = fn.__kwdefaults__ or {}
    key = (fn.__code__, len(defaults), frozenset(kwdefaults))
    shape = _code_shapes.get(key)
    if shape is None:
        shape = _code_shapes[key] = _read_code_shape(fn.__code__, len(defaults), kwdefaults)
    if kwdefaults:  # in the order of the keyword-only parameters, after the positional defaults
        defaults += [kwdefaults[name] for name, kind, _ in shape if kind is inspect.Parameter.KEYWORD_ONLY
                     and name in kwdefaults]
    return shape, defaults


def _read_code_shape(code: types.CodeType, n_defaults: int, kwdefaults: dict[str, Any]) -> Shape:
    P = inspect.Parameter
    n_pos, n_kw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    first_default = n_pos - n_defaults
    shape: list[tuple[str, Any, bool]] = [
        (names[i], P.POSITIONAL_ONLY if i < code.co_posonlyargcount else P.POSITIONAL_OR_KEYWORD, i >= first_default)
        for i in range(n_pos)]
    at = n_pos + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        shape.append((names[at], P.VAR_POSITIONAL, False))
        at += 1
    for name in names[n_pos:n_pos + n_kw]:
        shape.append((name, P.KEYWORD_ONLY, name in kwdefaults))
    if code.co_flags & inspect.CO_VARKEYWORDS:
        shape.append((names[at], P.VAR_KEYWORD, False))
    return tuple(shape)


def maker(body: str, names: tuple[str, ...], shape: Shape, filename: str) -> Callable:
    """A function ``make(*values, *defaults)`` returning a function with the parameters ``shape``
    whose body is ``body``.

    ``body`` (indented by four spaces) sees ``names``, bound to ``values``, and writes ``{args}`` where
    the parameters are passed on as received (``x, *args, key=key, **kwargs``). ``defaults`` are
    the default values of ``shape``, in order (:func:`shape_of`). ``filename`` is the generated
    code's file name (a caller that skips its own package's frames recognises it).

    The compiled code is shared by every shape that differs only in defaults or in the names of
    parameters not passed by keyword (``(device=None)``, ``(value=None)`` and ``(seed)``): the made
    function gets its own names by renaming its code's variables and its own defaults, so only a
    few distinct patterns are compiled.
    """
    key = (body, names, shape)
    found = _makers.get(key)
    if found is None:
        found = _makers[key] = _new_maker(body, names, shape, filename)
    return found


def _new_maker(body: str, names: tuple[str, ...], shape: Shape, filename: str) -> Callable:
    P = inspect.Parameter
    clash = [name for name, kind, _ in shape if kind is P.KEYWORD_ONLY and name in names]
    if clash:  # the parameter would hide the value the body means
        raise ValueError(f"keyword-only parameter(s) {', '.join(clash)} clash with the names of the body: "
                         f"{', '.join(names)}")
    # The compiled code keeps only what a code object holds: the kinds, and the names a call passes by
    # keyword. The other names are renamed in afterwards, and the defaults (a function's, not its
    # code's) are set on each made function.
    generic = tuple((name if kind is P.KEYWORD_ONLY else f"_a{i}", kind, False)
                    for i, (name, kind, _) in enumerate(shape))
    key = (body, names, generic)
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compiled[key] = _compile(body, names, generic, filename)
    renamed = _code_order(shape)
    if renamed == _code_order(generic):
        renamed = ()
    n_values = len(names)
    n_positional = sum(1 for _, kind, has_default in shape if has_default and kind is not P.KEYWORD_ONLY)
    keyword_defaults = [name for name, kind, has_default in shape if has_default and kind is P.KEYWORD_ONLY]

    def make(*values: object) -> types.FunctionType:
        made = compiled(*values[:n_values])
        # its annotations (``object``) are the type checker's: at run time it shows none, like the
        # code before it was annotated (inspect.signature of a made function reads as the original's)
        made.__annotations__ = {}
        if renamed:
            code = made.__code__
            made.__code__ = code.replace(co_varnames=renamed + code.co_varnames[len(renamed):])
        defaults = values[n_values:]
        if n_positional:
            made.__defaults__ = defaults[:n_positional]
        if keyword_defaults:
            made.__kwdefaults__ = dict(zip(keyword_defaults, defaults[n_positional:]))
        return made

    return make


def _code_order(shape: Shape) -> tuple[str, ...]:
    """The parameter names in the order a code object lists them (``co_varnames``): positional,
    keyword-only, then ``*args`` and ``**kwargs``."""
    P = inspect.Parameter
    rank = {P.POSITIONAL_ONLY: 0, P.POSITIONAL_OR_KEYWORD: 0, P.KEYWORD_ONLY: 1, P.VAR_POSITIONAL: 2,
            P.VAR_KEYWORD: 3}
    return tuple(name for name, _, _ in sorted(shape, key=lambda p: rank[p[1]]))


def _compile(body: str, names: tuple[str, ...], shape: Shape, filename: str) -> Callable:
    P = inspect.Parameter
    params: list[str] = []
    args: list[str] = []
    for name, kind, _ in shape:  # no defaults: the made function's own are set by the maker
        if kind is P.VAR_POSITIONAL:
            params.append(f"*{name}: object")
            args.append(f"*{name}")
        elif kind is P.VAR_KEYWORD:
            params.append(f"**{name}: object")
            args.append(f"**{name}")
        elif kind is P.KEYWORD_ONLY:
            if not any(p.startswith("*") for p in params):
                params.append("*")
            params.append(f"{name}: object")
            args.append(f"{name}={name}")
        else:
            params.append(f"{name}: object")
            args.append(name)
    positional_only = [i for i, (_, kind, _) in enumerate(shape) if kind is P.POSITIONAL_ONLY]
    if positional_only:
        params.insert(max(positional_only) + 1, "/")
    # Annotated (the made function takes and returns anything; the values are whatever the body needs),
    # as strings: compiled, like _forwarding_made, under ``from __future__ import annotations``.
    source = (f"def make({', '.join(f'{name}: Any' for name in names)}) -> Callable[..., object]:\n"
              f"    def function({', '.join(params)}) -> object:\n"
              + "".join(f"    {line}\n" for line in body.format(args=", ".join(args)).splitlines())
              + "    return function\n")
    made = _made.get(source)
    if made is not None:
        return made
    compiled_sources.append(source)
    # the names its annotations use are its globals, as they are _forwarding_made's: typing.get_type_hints reads them
    scope: dict[str, Any] = {"Any": Any, "Callable": Callable}
    exec(compile(source, filename, "exec", flags=_ANNOTATIONS), scope)  # noqa: S102
    return scope["make"]


def render_made(sources: list[str]) -> str:
    """The text of ``_forwarding_made.py`` for the maker ``sources`` (each as :func:`maker` writes it)."""
    lines = ['"""Makers of :mod:`torchdevice.forwarding` kept as source: the patterns activating the built-in CPU',
             "backend uses (compiling them cost a millisecond or two of every activation). Written by",
             "``python scripts/forwarding_made.py``; do not edit. Each ``make_N`` is the source that is its key in",
             ":data:`MADE`, renamed.", '"""', "", "from __future__ import annotations", "",
             "from typing import Any, Callable", ""]
    ordered = sorted(set(sources))
    for i, source in enumerate(ordered):
        lines += ["", source.replace("def make(", f"def make_{i}(", 1)]
    lines += ["", "#: the source forwarding.maker builds -> the function written from it",
              "MADE: dict[str, Callable[..., Callable[..., object]]] = {"]
    lines += [f"    {source!r}: make_{i}," for i, source in enumerate(ordered)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def compile_everything() -> None:
    """From now on compile every maker, none taken from :mod:`torchdevice._forwarding_made`, and record
    each source in :data:`compiled_sources` (what ``scripts/forwarding_made.py`` writes that module from)."""
    global _made
    _made = {}
    _makers.clear()
    _compiled.clear()
    del compiled_sources[:]
