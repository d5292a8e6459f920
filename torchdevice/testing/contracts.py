"""Contract tests for torch-namespace plugins (subclasses of
:class:`torchdevice.torch_backend.TorchNamespaceBackend`): :class:`NamespaceContract`, driven by a table of
:class:`Expect` (:func:`torch_namespace_contract`), and :class:`UnavailableHere`."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import torch

from .. import plugins
from ..backend import (
    FAMILIES,
    Availability,
    Backend,
    Ops,
    Status,
    status_of,
)
from ..errors import BackendUnavailableError, UnsupportedError
from .conformance import BEHAVIOUR_CHECKS, CHECKS, check_backend
from .sandbox import info_json, info_text, registered
from .standin import FloatLike, IntLike, StandIn

if TYPE_CHECKING:
    import pytest

#: ``Expect.result`` meaning "the very object the stand-in returned for the last call".
RETURNED = object()


@dataclass(frozen=True)
class Expect:
    """One stand-in contract: calling ``op`` with ``args`` makes exactly ``calls`` and gives ``result``.

    * ``op``: ``"family.operation"`` (``"memory.memory_allocated"``);
    * ``calls``: the namespace calls expected, in order, as ``(function, args)``;
    * ``returns``: what the stand-in returns (``{function: value}``);
    * ``result``: the expected result, compared with ``==`` and by exact type,
      or :data:`RETURNED` for identity with the last configured return value;
    * ``status``: the expected status tag (a :class:`~torchdevice.backend.Status` value).
    """

    op: str
    args: tuple = ()
    calls: tuple = ()
    returns: Mapping = field(default_factory=dict)
    result: Any = None
    status: str = "native"


def torch_namespace_contract(index: int = 1) -> dict[str, Expect]:
    """The contract of :class:`~torchdevice.torch_backend.TorchNamespaceBackend` (``torch.cuda``'s shape).

    Every operation calls the same-named namespace function with the device
    ``index`` and converts the result (``IntLike`` -> ``int`` ...). Plugin
    tests start from this table and override the entries their namespace
    spells differently.
    """
    i = index
    stream, state = object(), torch.zeros(4, dtype=torch.uint8)
    generators = (torch.Generator(), torch.Generator())

    def same(op: str, family: str, args: tuple, returns: object = None, result: object = None) -> Expect:
        calls = ((op, args),)
        return Expect(f"{family}.{op}", args, calls, {op: returns} if returns is not None else {}, result)

    table = [
        same("memory_allocated", "memory", (i,), IntLike(1_001), 1_001),
        same("max_memory_allocated", "memory", (i,), IntLike(2_002), 2_002),
        same("memory_reserved", "memory", (i,), IntLike(3_003), 3_003),
        same("max_memory_reserved", "memory", (i,), IntLike(4_004), 4_004),
        same("reset_peak_memory_stats", "memory", (i,), "ignored", None),
        same("reset_accumulated_memory_stats", "memory", (i,), "ignored", None),
        same("memory_stats", "memory", (i,), collections.OrderedDict(a=1), {"a": 1}),
        same("mem_get_info", "memory", (i,), [IntLike(5), IntLike(6)], (5, 6)),
        same("empty_cache", "memory", (), "ignored", None),
        same("set_per_process_memory_fraction", "memory", (0.25, i), "ignored", None),
        same("get_per_process_memory_fraction", "memory", (i,), FloatLike(0.5), 0.5),
        same("current_device", "streams", (), IntLike(1), 1),
        same("set_device", "streams", (i,), "ignored", None),
        same("synchronize", "streams", (i,), "ignored", None),
        same("current_stream", "streams", (i,), stream, RETURNED),
        same("default_stream", "streams", (i,), stream, RETURNED),
        same("set_stream", "streams", (stream,), "ignored", None),
        same("manual_seed", "rng", (7,), "ignored", None),
        same("manual_seed_all", "rng", (7,), "ignored", None),
        same("seed", "rng", (), IntLike(99), None),
        same("seed_all", "rng", (), IntLike(99), None),
        same("initial_seed", "rng", (), IntLike(1234), 1234),
        same("get_rng_state", "rng", (i,), state, RETURNED),
        same("set_rng_state", "rng", (state, i), "ignored", None),
        Expect("rng.default_generator", (i,), (), {"default_generators": generators}, generators[i], "translated"),
    ]
    return {e.op: e for e in table}


def _ops(backend: Backend, family: str) -> Ops:
    return getattr(backend, family)()


class NamespaceContract:
    """pytest mixin: stand-in contract tests of a torch-namespace plugin (stand-in, not hardware-verified).

    Set ``backend_class`` (a :class:`~torchdevice.torch_backend.TorchNamespaceBackend`
    subclass), ``namespace`` (``"cuda"``), ``index`` (the device index used,
    default 1), ``devices`` (the stand-in's device count, default 2), ``overrides`` (``{op: Expect}`` replacing entries of
    :func:`torch_namespace_contract`; ``None`` removes one, to be tested by
    hand) and ``unsupported_ops`` (``"family.op"`` that must raise
    UnsupportedError without touching the namespace). Override
    :meth:`construct` when the plugin takes more than the namespace, and
    :meth:`unbuilt` when "not built" is not ``_is_compiled() == False``.

    Every test name and docstring says *stand-in*: they prove the calls made
    to the namespace and the conversions, not behaviour on hardware.
    """

    backend_class: Any = None  #: the plugin's TorchNamespaceBackend subclass, set by the test class
    namespace: str = ""
    index: int = 1
    devices: int = 2
    overrides: Mapping[str, Expect | None] = {}
    unsupported_ops: frozenset = frozenset()

    # -- construction ----------------------------------------------------------------------
    def construct(self, standin: StandIn) -> Backend:
        """The backend over ``standin``."""
        return self.backend_class(standin)

    def make(self, returns: Mapping[str, Any] | None = None, **options: Any) -> tuple[Any, StandIn]:
        """A backend over a fresh stand-in; returns ``(backend, standin)``."""
        options.setdefault("devices", self.devices)
        standin = StandIn(self.namespace, returns=returns, **options)
        return self.construct(standin), standin

    def unbuilt(self) -> Backend:
        """A backend whose torch was built without this accelerator."""
        return self.make({"_is_compiled": False})[0]

    def expectations(self) -> list[Expect]:
        table: dict[str, Expect | None] = dict(torch_namespace_contract(self.index))
        table.update(self.overrides)
        return [e for op, e in table.items() if e is not None and op not in self.unsupported_ops]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "expect" in metafunc.fixturenames:
            metafunc.parametrize("expect", self.expectations(), ids=lambda e: e.op)
        if "unsupported_op" in metafunc.fixturenames:
            metafunc.parametrize("unsupported_op", sorted(self.unsupported_ops) or ["(none)"])

    # -- the contract table ----------------------------------------------------------------
    def test_standin_call(self, expect: Expect) -> None:
        """stand-in, not hardware-verified: the operation calls the namespace as the table says."""
        backend, standin = self.make(dict(expect.returns))
        family, op = expect.op.split(".")
        ops = _ops(backend, family)
        standin.reset()
        result = getattr(ops, op)(*expect.args)
        assert [(c.name, c.args) for c in standin.calls] == [(f, tuple(a)) for f, a in expect.calls], (
            f"{expect.op}{expect.args} made {standin.calls}")
        assert all(not c.kwargs for c in standin.calls), f"{expect.op} passed keywords: {standin.calls}"
        if expect.result is RETURNED:
            last = expect.calls[-1][0]
            assert result is expect.returns[last], f"{expect.op} returned {result!r}, not the namespace's object"
        else:
            assert result == expect.result and type(result) is type(expect.result), (
                f"{expect.op} returned {result!r} ({type(result).__name__}), expected {expect.result!r}")
        status, note = status_of(ops, op)
        assert str(status) == str(Status(expect.status)), f"{expect.op} is tagged {status} ({note}), expected {expect.status}"

    def test_standin_unsupported(self, unsupported_op: str) -> None:
        """stand-in, not hardware-verified: the operation raises UnsupportedError and calls nothing.

        ``(none)``: the plugin declares no unsupported operation, and has none.
        """
        backend, standin = self.make()
        if unsupported_op == "(none)":
            return self.test_standin_unsupported_set_is_exact()
        family, op = unsupported_op.split(".")
        ops = _ops(backend, family)
        standin.reset()
        try:
            getattr(ops, op)(self.index)
        except UnsupportedError as exc:
            assert exc.backend == backend.name and exc.instead, f"{exc} should say what to do instead"
        else:
            raise AssertionError(f"{unsupported_op} did not raise UnsupportedError")
        assert standin.calls == [], f"{unsupported_op} called {standin.calls}"
        assert status_of(ops, op)[0] is Status.UNSUPPORTED

    # -- discovery -------------------------------------------------------------------------
    def test_standin_unsupported_set_is_exact(self) -> None:
        """stand-in, not hardware-verified: exactly the declared operations are tagged unsupported (an opt-in
        operation, ``Ops.opt_in``, left unsupported need not be declared)."""
        backend, _ = self.make()
        declared = set(self.unsupported_ops)
        found = {f"{family}.{op}" for family in FAMILIES for ops in [_ops(backend, family)]
                 for op in type(ops).operations() if status_of(ops, op)[0] is Status.UNSUPPORTED
                 and (op not in type(ops).opt_in or f"{family}.{op}" in declared)}
        assert found == declared, f"tagged unsupported: {sorted(found)}"

    def test_standin_available(self) -> None:
        """stand-in, not hardware-verified: available, with the device count in the reason."""
        backend, standin = self.make(devices=3)
        found = backend.availability()
        assert found.available and found.automatic, found
        assert "3" in found.reason, found.reason
        assert backend.device_count() == 3 and type(backend.device_count()) is int

    def test_standin_unbuilt(self) -> None:
        """stand-in, not hardware-verified: a torch without the accelerator is unavailable and says so."""
        found = self.unbuilt().availability()
        assert not found.available and "built without" in found.reason, found

    def test_standin_no_device(self) -> None:
        """stand-in, not hardware-verified: built but no device: unavailable, naming is_available."""
        backend, _ = self.make({"is_available": False})
        found = backend.availability()
        assert not found.available and "is_available() is False" in found.reason, found

    def test_standin_availability_never_raises(self) -> None:
        """stand-in, not hardware-verified: a raising driver check gives Availability(False, why)."""
        backend, _ = self.make({"is_available": RuntimeError("driver exploded")})
        found = backend.availability()
        assert not found.available and "driver exploded" in found.reason, found

    def test_standin_conformance(self) -> None:
        """stand-in, not hardware-verified: the conformance suite, router included, over the stand-in
        (not the behaviour and queues checks: a stand-in's events, threads and memory do not behave)."""
        backend, _ = self.make()
        check_backend(backend, checks=[c for c in CHECKS if c not in BEHAVIOUR_CHECKS])


class UnavailableHere:
    """pytest mixin: real tests of a plugin on a machine or torch build without its hardware.

    Set ``plugin`` (the installed plugin instance), ``distribution``
    (``"torchdevice-cuda"``) and ``reason`` (text the unavailability reason
    must contain, e.g. ``"built without CUDA"``). Each test skips itself
    where the backend *is* available.
    """

    plugin: Any = None
    distribution: str = ""
    reason: str = ""

    def _require_unavailable(self) -> Availability:
        import pytest

        found = self.plugin.availability()
        if found.available:
            pytest.skip(f"{self.plugin.name} is available here ({found.reason})")
        return found

    def test_real_entry_point(self) -> None:
        """real, this environment: the installed entry point of group ``torchdevice`` is this plugin."""
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group=plugins.GROUP) if ep.name == self.plugin.name]
        assert found, f"no entry point {self.plugin.name!r} in group {plugins.GROUP!r}: pip install {self.distribution}"
        assert found[0].load() is self.plugin
        assert found[0].dist is not None and found[0].dist.name == self.distribution

    def test_real_unavailable_with_reason(self) -> None:
        """real, this machine: availability is False and says why."""
        found = self._require_unavailable()
        assert self.reason in found.reason, found.reason

    def test_real_not_selected(self) -> None:
        """real, this machine: automatic selection passes it over; use() refuses it with the reason."""
        import torchdevice

        found = self._require_unavailable()
        with registered(self.plugin):
            assert torchdevice.current_backend() != self.plugin.name
            record = next(r for r in torchdevice.backends() if r.name == self.plugin.name)
            assert not record.available and not record.selected
            try:
                torchdevice.use(self.plugin.name)
            except BackendUnavailableError as exc:
                assert found.reason in str(exc)
            else:
                raise AssertionError(f"use({self.plugin.name!r}) accepted an unavailable backend")

    def test_real_info_says_why(self) -> None:
        """real, this machine: `torchdevice info` (installed entry point) lists it unavailable, with the reason."""
        self._require_unavailable()
        info = info_json()
        record = next((b for b in info["backends"] if b["name"] == self.plugin.name), None)
        assert record is not None, f"torchdevice info does not list {self.plugin.name!r}; is {self.distribution} installed?"
        assert record["distribution"] == self.distribution and record["version"] == _version(self.distribution)
        assert record["available"] is False and record["selected"] is False
        assert self.reason in record["reason"], record
        row = next(line for line in info_text().splitlines() if line.startswith(self.plugin.name + " "))
        assert self.reason in row and " no " in row, row


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)
