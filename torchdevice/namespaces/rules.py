"""How a fronted function's status is derived: :class:`View` (a backend as the namespaces see it) and
the rules (:func:`op_rule`, :func:`all_of`, :func:`declared`, :func:`when_op`, :func:`stream_class_rule`,
:func:`optional_op`), each a function ``(view, ns) -> (Status, note)``."""
from __future__ import annotations

from typing import Callable

from ..backend import STATUS_ATTR, Status, status_of
from ..streams import HostEvent, HostStream

NATIVE, TRANSLATED, EMULATED, NOOP, UNSUPPORTED = (
    Status.NATIVE, Status.TRANSLATED, Status.EMULATED, Status.NOOP, Status.UNSUPPORTED,
)




class View:
    """One backend's name, device type and operation objects (no hardware needed).

    :func:`install` builds it from the resolved active backend;
    :mod:`torchdevice.matrix` builds one for every installed backend from its
    plugin's family hooks, whether or not the hardware is present.
    """

    def __init__(self, name: str, device_type: str, memory, streams, rng, collectives=None):
        self.name = name
        self.device_type = device_type
        self.memory = memory
        self.streams = streams
        self.rng = rng
        self.collectives = collectives

    @classmethod
    def of_active(cls, active) -> "View":
        return cls(active.name, active.device_type, active.memory, active.streams, active.rng, active.collectives)

    def op(self, family: str, name: str) -> tuple[Status, str]:
        """``(Status, note)`` of operation ``name`` of ``family``, as the backend tags it."""
        ops = getattr(self, family)
        if ops is None:
            return UNSUPPORTED, f"the backend provides no {family} operations"
        return status_of(ops, name)

    def __repr__(self) -> str:
        return f"<View {self.name} ({self.device_type})>"



Rule = Callable[[View, str], "tuple[Status, str]"]


def _reading(rule: Rule, uses: tuple[tuple[str, str], ...], optional: tuple[str, str] | None = None) -> Rule:
    """``rule``, marked with the backend operations it reads (``rule.uses``; an optional op: ``rule.optional``)."""
    rule.uses = uses  # type: ignore[attr-defined]
    if optional is not None:
        rule.optional = optional  # type: ignore[attr-defined]
    return rule


def _fmt(text: str, view: View, ns: str) -> str:
    return text.format(ns=ns, backend=view.name, device_type=view.device_type)


def op_rule(family: str, op: str, how: str = "") -> Rule:
    """The status of one backend operation, as tagged (``how`` prefixes the note)."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        status, note = view.op(family, op)
        if status is UNSUPPORTED or not how:
            return status, note
        return status, f"{_fmt(how, view, ns)}; {family}.{op}: {note}" if note else _fmt(how, view, ns)

    return _reading(rule, ((family, op),))


def all_of(*pairs: tuple[str, str], how: str = "") -> Rule:
    """Unsupported if any of the operations is; otherwise the status of the first."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        for family, op in pairs:
            status, note = view.op(family, op)
            if status is UNSUPPORTED:
                return status, note
        status, note = view.op(*pairs[0])
        text = _fmt(how, view, ns) if how else ""
        return status, f"{text}; {pairs[0][0]}.{pairs[0][1]}: {note}" if text and note else (text or note)

    return _reading(rule, pairs)


def declared(status: Status, note: str) -> Rule:
    """A facade-level function that maps to no backend operation: its kind is declared."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        return status, _fmt(note, view, ns)

    return _reading(rule, ())


def when_op(family: str, op: str, expect: Status, then: tuple[Status, str], otherwise: str) -> Rule:
    """``then`` if the backend tags ``family.op`` as ``expect``, else unsupported (``otherwise``)."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        status, _ = view.op(family, op)
        if status is expect:
            return then[0], _fmt(then[1], view, ns)
        return UNSUPPORTED, _fmt(otherwise, view, ns)

    return _reading(rule, ((family, op),))


def stream_class_rule(attr: str) -> Rule:
    """Status of the backend's ``Stream``/``Event`` class."""

    def rule(view: View, ns: str) -> tuple[Status, str]:
        # the instance's: TorchStreams sets the namespace's classes per object, host backends per class
        cls = getattr(view.streams, attr, None) if view.streams is not None else None
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


def _has_op(view: View, family: str, op: str) -> bool:
    ops = getattr(view, family)
    return ops is not None and callable(getattr(type(ops), op, None))


def optional_op(family: str, op: str, fallback: Rule) -> Rule:
    """The backend's own ``family.op`` when its Ops define one (tagged); else ``fallback``.

    These are the *optional operations*: not part of the base families, a
    plugin adds them to its Ops subclass to give the function a real answer
    (see :data:`OPTIONAL_OPS`).
    """

    def rule(view: View, ns: str) -> tuple[Status, str]:
        if _has_op(view, family, op):
            return view.op(family, op)
        return fallback(view, ns)

    return _reading(rule, ((family, op),), optional=(family, op))


def host_synchronous(view: View) -> bool:
    """Whether the backend's streams are host-synchronous (its ``Stream`` class is a :class:`HostStream`)."""
    cls = getattr(view.streams, "Stream", None) if view.streams is not None else None
    return isinstance(cls, type) and issubclass(cls, HostStream)


def op_or_host(family: str, op: str, how: str, host: tuple[Status, str], otherwise: str) -> Rule:
    """The backend's ``family.op`` as tagged (``how`` prefixes the note); where it is unsupported, ``host`` on a
    host-synchronous backend (:func:`host_synchronous`), else unsupported (``otherwise``)."""
    tagged = op_rule(family, op, how)

    def rule(view: View, ns: str) -> tuple[Status, str]:
        status, note = tagged(view, ns)
        if status is not UNSUPPORTED:
            return status, note
        if host_synchronous(view):
            return host[0], _fmt(host[1], view, ns)
        return UNSUPPORTED, _fmt(otherwise, view, ns)

    return _reading(rule, ((family, op),))
