"""torchdevice.forwarding: generated functions with another function's parameters."""
from __future__ import annotations

import functools
import inspect
import json
import sys
from pathlib import Path

import pytest
from helpers import run_command, run_python

from torchdevice import forwarding


def _every_kind(a, b=1, /, c=2, *args, d, e=3, **kw):
    return a, b, c, args, d, e, kw


def _keyword_only(*, x=None, y):
    return x, y


def _inspected(fn, follow_wrapped=True):
    params = inspect.signature(fn, follow_wrapped=follow_wrapped).parameters.values()
    return (tuple((p.name, p.kind, p.default is not p.empty) for p in params),
            [p.default for p in params if p.default is not p.empty])


@pytest.mark.parametrize("fn", [_every_kind, _keyword_only, lambda: None, lambda device=None, *a: None,
                                lambda a, *, b: None])
def test_code_shape_reads_what_inspect_reads(fn):
    assert forwarding.code_shape(fn) == _inspected(fn)


def test_shape_of_follows_wrapped_only_when_asked():
    @functools.wraps(_keyword_only)
    def packing(*args, **kwargs):
        return _keyword_only(*args, **kwargs)

    assert forwarding.shape_of(packing) == _inspected(_keyword_only)
    assert forwarding.shape_of(packing, follow_wrapped=False) == _inspected(packing, follow_wrapped=False)
    assert forwarding.shape_of(len) == _inspected(len)  # a builtin: through inspect


def _forwarder(fn, filename="<test>"):
    shape, defaults = forwarding.shape_of(fn)
    make = forwarding.maker("    return target({args})\n", ("target",), shape, filename)
    return make(fn, *defaults)


@pytest.mark.parametrize("call", [
    lambda f: f(1, d=4), lambda f: f(1, 2, 3, 4, 5, d=6, e=7, z=8), lambda f: f(0, c=9, d=1),
])
def test_a_generated_function_passes_every_kind_of_argument_on_as_received(call):
    assert call(_forwarder(_every_kind)) == call(_every_kind)


def test_a_generated_function_has_the_signature_and_the_call_errors_of_the_original():
    forward = _forwarder(_every_kind)
    forward.__qualname__ = "_every_kind"  # as the users do (functools.update_wrapper)
    assert str(inspect.signature(forward)) == str(inspect.signature(_every_kind))
    for bad in (lambda f: f(), lambda f: f(1), lambda f: f(1, 2, 3, c=4, d=5)):
        with pytest.raises(TypeError) as native:
            bad(_every_kind)
        with pytest.raises(TypeError) as generated:
            bad(forward)
        assert str(generated.value) == str(native.value)


def test_defaults_are_the_original_objects():
    marker = object()

    def fn(x=marker, *, y=[]):  # noqa: B006 - the identity of a mutable default is what is checked
        return x, y

    x, y = _forwarder(fn)()
    assert x is marker and y is fn.__kwdefaults__["y"]


def test_shapes_differing_only_in_names_passed_by_position_share_one_compiled_maker(monkeypatch):
    import builtins

    compiled = []
    real = builtins.compile
    monkeypatch.setattr(builtins, "compile", lambda *a, **k: compiled.append(a[0]) or real(*a, **k))
    body = "    return target({args})\n"
    functions = [lambda device=None: ("device", device), lambda value=None: ("value", value),
                 lambda device=None: ("again", device), lambda a, b: ("two", a, b),
                 lambda *, key=None: ("kw", key), lambda *, other=None: ("kw2", other)]
    # a body not used anywhere else in the process, so that the cache starts empty for it
    made = []
    for fn in functions:
        shape, defaults = forwarding.shape_of(fn)
        made.append(forwarding.maker(body + "    # shared-maker test\n", ("target",), shape, "<test>")(fn, *defaults))
    # (device=None), (value=None) and (a, b) need one compile each shape pattern; keyword-only names are compiled in
    assert len(compiled) == 4
    for fn, generated in zip(functions, made):
        assert str(inspect.signature(generated)) == str(inspect.signature(fn))
    assert made[0](device="cuda") == ("device", "cuda") and made[1](value=3) == ("value", 3)
    assert made[2]() == ("again", None) and made[3](1, b=2) == ("two", 1, 2)
    assert made[4](key=1) == ("kw", 1) and made[5](other=2) == ("kw2", 2)
    for wrong in ("value", "_a0"):  # another shape's name, the compiled code's own
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{wrong}'"):
            made[0](**{wrong: 1})


def test_a_keyword_only_parameter_named_like_a_value_of_the_body_is_refused():
    shape, _ = forwarding.shape_of(lambda *, target=None: target)
    with pytest.raises(ValueError, match="keyword-only parameter.*target.*clash"):
        forwarding.maker("    return target({args})\n", ("target",), shape, "<test>")


def test_a_positional_parameter_named_like_a_value_of_the_body_does_not_hide_it():
    def fn(target):
        return ("fn got", target)

    shape, defaults = forwarding.shape_of(fn)
    generated = forwarding.maker("    return target({args})\n", ("target",), shape, "<test>")(fn, *defaults)
    assert generated("x") == ("fn got", "x") and generated(target="y") == ("fn got", "y")


ROOT = Path(__file__).resolve().parents[1]


def test_the_kept_makers_are_the_ones_activating_the_cpu_backend_builds():
    done = run_command([sys.executable, str(ROOT / "scripts" / "forwarding_made.py"), "--check"])
    assert done.returncode == 0, done.stderr


def test_activating_the_cpu_backend_compiles_no_maker():
    done = run_python("import torch, json\nfrom torchdevice import forwarding\n"
                      "assert torch.cuda.is_available()\nprint(json.dumps(forwarding.compiled_sources))",
                      env={"TORCHDEVICE_BACKEND": "cpu"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [], "regenerate: python scripts/forwarding_made.py"


def test_a_kept_maker_is_the_code_its_source_compiles_to():
    from torchdevice._forwarding_made import MADE

    assert MADE
    for source, kept in MADE.items():
        scope: dict = {}
        exec(compile(source, "<test>", "exec"), scope)  # noqa: S102
        compiled = scope["make"]
        inner = [c for c in compiled.__code__.co_consts if inspect.iscode(c)]
        kept_inner = [c for c in kept.__code__.co_consts if inspect.iscode(c)]
        assert [c.co_code for c in inner] == [c.co_code for c in kept_inner]
        assert [c.co_varnames for c in inner] == [c.co_varnames for c in kept_inner]
        assert compiled.__code__.co_varnames == kept.__code__.co_varnames


def test_type_hints_of_makers_and_what_they_make_resolve():
    """A maker's annotations are strings (``Any``, ``Callable[..., object]``): the names must be its globals, as
    they are in _forwarding_made, or ``typing.get_type_hints`` raises NameError."""
    import typing

    from torchdevice._forwarding_made import MADE

    body = "    return target({args})\n    # type-hints test\n"  # a body nothing else uses: compiled here
    shape, defaults = forwarding.shape_of(_every_kind)
    make = forwarding.maker(body, ("target",), shape, "<test>")
    (compiled,) = [fn for (source, _, _), fn in forwarding._compiled.items() if source == body]
    for kept_or_compiled in [compiled, *MADE.values()]:
        hints = typing.get_type_hints(kept_or_compiled)
        assert hints["return"] == typing.Callable[..., object]
        assert set(hints) - {"return"} == set(inspect.signature(kept_or_compiled).parameters)
    assert typing.get_type_hints(compiled(_every_kind))["return"] is object  # the function a compiled maker returns
    assert typing.get_type_hints(make)["return"] is forwarding.types.FunctionType
    assert typing.get_type_hints(make(_every_kind, *defaults)) == {}  # a made function shows none (the maker clears them)
