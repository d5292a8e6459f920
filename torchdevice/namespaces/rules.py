"""How a fronted function's status is derived: the rules (:func:`op_rule`, :func:`all_of`, :func:`declared`,
:func:`when_op`, :func:`stream_class_rule`, :func:`optional_op`), each a function ``(target, ns) -> (Status, note)``
reading a backend's :class:`~torchdevice.router.Target` (its name, device type and tagged operations)."""
from __future__ import annotations

from typing import Callable

from ..backend import STATUS_ATTR, Status
from ..router import Target
from ..streams import HostEvent, HostStream

NATIVE, TRANSLATED, EMULATED, NOOP, UNSUPPORTED = (
    Status.NATIVE, Status.TRANSLATED, Status.EMULATED, Status.NOOP, Status.UNSUPPORTED,
)

Rule = Callable[[Target, str], "tuple[Status, str]"]


def _reading(rule: Rule, uses: tuple[tuple[str, str], ...], optional: tuple[str, str] | None = None) -> Rule:
    """``rule``, marked with the backend operations it reads (``rule.uses``; an optional op: ``rule.optional``)."""
    rule.uses = uses  # type: ignore[attr-defined]
    if optional is not None:
        rule.optional = optional  # type: ignore[attr-defined]
    return rule


def _fmt(text: str, target: Target, ns: str) -> str:
    return text.format(ns=ns, backend=target.name, device_type=target.device_type)


def op_rule(family: str, op: str, how: str = "") -> Rule:
    """The status of one backend operation, as tagged (``how`` prefixes the note)."""

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        status, note = target.op(family, op)
        if status is UNSUPPORTED or not how:
            return status, note
        return status, f"{_fmt(how, target, ns)}; {family}.{op}: {note}" if note else _fmt(how, target, ns)

    return _reading(rule, ((family, op),))


def all_of(*pairs: tuple[str, str], how: str = "") -> Rule:
    """Unsupported if any of the operations is; otherwise the status of the first."""

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        for family, op in pairs:
            status, note = target.op(family, op)
            if status is UNSUPPORTED:
                return status, note
        status, note = target.op(*pairs[0])
        text = _fmt(how, target, ns) if how else ""
        return status, f"{text}; {pairs[0][0]}.{pairs[0][1]}: {note}" if text and note else (text or note)

    return _reading(rule, pairs)


def declared(status: Status, note: str) -> Rule:
    """A facade-level function that maps to no backend operation: its kind is declared."""

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        return status, _fmt(note, target, ns)

    return _reading(rule, ())


def when_op(family: str, op: str, expect: Status, then: tuple[Status, str], otherwise: str) -> Rule:
    """``then`` if the backend tags ``family.op`` as ``expect``, else unsupported (``otherwise``)."""

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        status, _ = target.op(family, op)
        if status is expect:
            return then[0], _fmt(then[1], target, ns)
        return UNSUPPORTED, _fmt(otherwise, target, ns)

    return _reading(rule, ((family, op),))


def stream_class_rule(attr: str) -> Rule:
    """Status of the backend's ``Stream``/``Event`` class."""

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        # the instance's: TorchStreams sets the namespace's classes per object, host backends per class
        cls = getattr(target.streams, attr, None) if target.streams is not None else None
        if cls is None:
            return UNSUPPORTED, f"the backend has no {attr} class"
        tag = getattr(cls, STATUS_ATTR, None)
        if tag is not None:
            return tag
        base = HostStream if attr == "Stream" else HostEvent
        if isinstance(cls, type) and issubclass(cls, base):
            return EMULATED, (
                f"{cls.__qualname__}: host-synchronous {attr.lower()} built on torchdevice.streams.{base.__name__} "
                "(work is complete when its call returns; timing by the host clock)"
            )
        return TRANSLATED, f"the backend's own {attr} class ({cls.__module__}.{cls.__qualname__})"

    return _reading(rule, ())


def _has_op(target: Target, family: str, op: str) -> bool:
    ops = getattr(target, family)
    return ops is not None and callable(getattr(type(ops), op, None))


def optional_op(family: str, op: str, fallback: Rule) -> Rule:
    """The backend's own ``family.op`` when its Ops define one (tagged); else ``fallback``.

    These are the *optional operations*: not part of the base families, a
    plugin adds them to its Ops subclass to give the function a real answer
    (see :data:`OPTIONAL_OPS`).
    """

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        if _has_op(target, family, op):
            return target.op(family, op)
        return fallback(target, ns)

    return _reading(rule, ((family, op),), optional=(family, op))


def host_synchronous(target: Target) -> bool:
    """Whether the backend's streams are host-synchronous (its ``Stream`` class is a :class:`HostStream`)."""
    cls = getattr(target.streams, "Stream", None) if target.streams is not None else None
    return isinstance(cls, type) and issubclass(cls, HostStream)


def op_or_host(family: str, op: str, how: str, host: tuple[Status, str], otherwise: str) -> Rule:
    """The backend's ``family.op`` as tagged (``how`` prefixes the note); where it is unsupported, ``host`` on a
    host-synchronous backend (:func:`host_synchronous`), else unsupported (``otherwise``)."""
    tagged = op_rule(family, op, how)

    def rule(target: Target, ns: str) -> tuple[Status, str]:
        status, note = tagged(target, ns)
        if status is not UNSUPPORTED:
            return status, note
        if host_synchronous(target):
            return host[0], _fmt(host[1], target, ns)
        return UNSUPPORTED, _fmt(otherwise, target, ns)

    return _reading(rule, ((family, op),))
