"""What the router reports when plugins get things wrong: each record, problem and error in full.

``torchdevice info`` and the errors of ``torchdevice.use()`` are how a user learns why a backend
is not there; tests/test_router.py checks the selection they lead to, these check the words and
fields themselves (in process, so mutation testing can reach them; the subprocess tests in
tests/test_router.py and tests/test_plugin_faults.py check the same through real entry points).
"""
from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from helpers import make_backend

import torchdevice
from torchdevice import BackendSpec, plugins, router
from torchdevice.cpu import CPUMemory
from torchdevice.errors import BackendUnavailableError, ConfigError, TorchDeviceError


def _top() -> int:
    return max(r.priority for r in torchdevice.backends() if r.priority is not None)


def _records() -> dict:
    return {r.name: r for r in torchdevice.backends()}


def _problems(plugin: str) -> list[tuple[str, str]]:
    return [(p.stage, p.error) for p in torchdevice.problems() if p.plugin == plugin]


class Declares:
    """A plugin declaring ``specs`` and answering nothing else."""

    def __init__(self, specs):
        self.specs = specs

    @torchdevice.hookimpl
    def torchdevice_backends(self):
        return self.specs


def test_declarations_a_plugin_gets_wrong_are_reported_and_skipped(router_state):
    router_state.register(Declares([
        "fastchip", BackendSpec("Bad-Name", "cpu", 1), BackendSpec(3, "cpu", 1),
        BackendSpec("highchip", "cpu", "high"), BackendSpec("boolchip", "cpu", True),
        BackendSpec("indexchip", "cpu:0", 1), BackendSpec("nochip", "nochip", 1), BackendSpec("intchip", 5, 1),
    ]), name="sloppy")
    assert _problems("sloppy") == [("torchdevice_backends", why) for why in (
        "returned 'fastchip', not a BackendSpec",
        "backend name 'Bad-Name' is not lowercase letters, digits and '_' starting with a letter",
        "backend name 3 is not lowercase letters, digits and '_' starting with a letter",
        "backend 'highchip' has priority 'high', not an int",
        "backend 'boolchip' has priority True, not an int",
        "backend 'indexchip' has device_type 'cpu:0', which torch does not know",
        "backend 'nochip' has device_type 'nochip', which torch does not know",
        "backend 'intchip' has device_type 5, which torch does not know",
    )]
    assert not {"fastchip", "Bad-Name", 3, "highchip", "boolchip", "indexchip", "nochip", "intchip"} & set(_records())


def test_a_good_declaration_is_recorded_as_declared(router_state):
    router_state.register(Declares([BackendSpec("goodchip", "cpu", 7, "a good chip"),
                                    BackendSpec("quietchip", "cpu", 8, 42)]), name="tidy")
    good, quiet = _records()["goodchip"], _records()["quietchip"]
    # nobody answers availability for them: not available, and why
    assert good.as_dict() == {
        "name": "goodchip", "plugin": "tidy", "distribution": None, "version": None, "device_type": "cpu",
        "priority": 7, "available": False, "reason": "availability hook returned None", "automatic": True,
        "selected": False, "problems": [], "description": "a good chip",
    }
    assert quiet.description == ""  # a description that is no str is dropped
    assert _problems("tidy") == []


class Bogus(CPUMemory):
    def memory_allocated(self, index):
        return -1


def test_a_backend_declared_twice_is_asked_of_its_first_plugin_only(router_state):
    class Helper:  # answers the resolution hooks for "split", which its owner leaves open
        @torchdevice.hookimpl
        def torchdevice_device_count(self, name):
            return 1 if name == "split" else None

        @torchdevice.hookimpl
        def torchdevice_memory(self, name):
            return make_backend("split", 0).memory() if name == "split" else None

        @torchdevice.hookimpl
        def torchdevice_streams(self, name):
            return make_backend("split", 0).streams() if name == "split" else None

        @torchdevice.hookimpl
        def torchdevice_rng(self, name):
            return make_backend("split", 0).rng() if name == "split" else None

        @torchdevice.hookimpl
        def torchdevice_collectives(self, name):
            return make_backend("split", 0).collectives() if name == "split" else None

    class Owner(Declares):
        @torchdevice.hookimpl
        def torchdevice_availability(self, name):
            return torchdevice.Availability(True, "owner says yes") if name == "split" else None

    shadow = make_backend("split", _top() + 100)
    shadow.memory = lambda: Bogus("split")  # asked about "split", its figures would be the answer
    router_state.register(Helper(), name="helper")
    router_state.register(Owner([BackendSpec("split", "cpu", _top() + 50)]), name="owner")
    router_state.register(shadow, name="shadow")
    assert _problems("shadow") == [("torchdevice_backends", "backend 'split' is already provided by plugin "
                                                            "'owner'; this declaration is skipped")]
    assert router.skip("split") == frozenset({"shadow"}) and router.skip("cpu") == frozenset()
    split = _records()["split"]
    assert (split.plugin, split.priority, split.available, split.reason) == ("owner", _top(), True, "owner says yes")
    torchdevice.use("split")
    assert torchdevice.current_backend() == "split" and torchdevice.memory_allocated() >= 0  # Bogus answers -1


def test_availability_that_fails_is_the_reason(router_state):
    router_state.register(make_backend("grumpy", _top() + 10, fail_in="availability"))
    odd = make_backend("odd", _top() + 20)
    odd.availability = lambda: 42
    router_state.register(odd)
    grumpy, odd_record = _records()["grumpy"], _records()["odd"]
    why = "plugin 'grumpy' (torchdevice_availability): RuntimeError: grumpy exploded in availability"
    assert (grumpy.available, grumpy.reason, grumpy.problems) == (False, why, [why])
    assert (odd_record.available, odd_record.reason, odd_record.problems) == (False, "availability hook returned 42", [])


def test_plugins_that_never_declared_are_listed_with_why(router_state, monkeypatch):
    monkeypatch.setitem(plugins.plugin_info, "ghost", plugins.PluginInfo("ghost", "ghost-dist", "1.2"))
    for problem in (plugins.Problem("noisy", "torchdevice_availability", "RuntimeError: not a discovery stage"),
                    plugins.Problem("gone", "torchdevice_backends", "RuntimeError: unregistered since"),
                    plugins.Problem("cpu", "import", "recorded for a plugin that did declare"),
                    plugins.Problem("ghost", "import", "ImportError: no module named ghostchip"),
                    plugins.Problem("wraith", "validate", "PluginValidationError: typo")):
        plugins.report(problem)
    router.invalidate()
    records = _records()
    assert records["ghost"].as_dict() == {
        "name": "ghost", "plugin": "ghost", "distribution": "ghost-dist", "version": "1.2", "device_type": None,
        "priority": None, "available": False, "reason": "plugin failed to import: ImportError: no module named ghostchip",
        "automatic": True, "selected": False,
        "problems": ["plugin 'ghost' (import): ImportError: no module named ghostchip"], "description": "",
    }
    wraith = records["wraith"]
    assert (wraith.distribution, wraith.version, wraith.reason) == (
        None, None, "plugin failed validation: PluginValidationError: typo")
    assert "gone" not in records and "noisy" not in records  # unregistered since; not a discovery failure
    assert records["cpu"].available and records["cpu"].device_type == "cpu"  # the problem does not replace it
    with pytest.raises(BackendUnavailableError) as info:
        torchdevice.use("ghost")
    assert (info.value.name, info.value.reason) == ("ghost", "plugin failed to import: ImportError: no module named ghostchip")
    assert "cpu" in info.value.available and "(from torchdevice.use())" in str(info.value)


def test_a_plugin_raising_in_its_declaration_is_listed_with_why(router_state):
    class CrashChip:
        @torchdevice.hookimpl
        def torchdevice_backends(self):
            raise RuntimeError("crashchip cannot enumerate")

    router_state.register(CrashChip(), name="crashchip")
    crash = _records()["crashchip"]
    why = "RuntimeError: crashchip cannot enumerate"
    assert (crash.available, crash.device_type, crash.reason, crash.problems) == (
        False, None, f"plugin raised in torchdevice_backends: {why}", [f"plugin 'crashchip' (torchdevice_backends): {why}"])


# -- errors of an explicit choice ----------------------------------------------------------------


def test_choosing_an_unavailable_backend_says_why_and_what_is_available(router_state):
    router_state.register(make_backend("down", _top() + 10, available=False, reason="no down card"))
    usable = [r.name for r in torchdevice.backends() if r.available and r.device_type is not None]
    assert "cpu" in usable and "down" not in usable
    with pytest.raises(BackendUnavailableError) as info:
        torchdevice.use("down")
    assert (info.value.name, info.value.reason, sorted(info.value.available)) == ("down", "no down card", sorted(usable))
    assert str(info.value) == (f"torchdevice backend 'down' (from torchdevice.use()) is not available: no down card; "
                               f"available here: {', '.join(info.value.available)}")
    with pytest.raises(BackendUnavailableError) as info:
        router.check("down")
    assert str(info.value).startswith("torchdevice backend 'down' is not available: no down card;")
    assert router.check("cpu").name == "cpu"


def test_choosing_a_disabled_plugins_backend_names_the_variable(router_state):
    router_state.setenv("TORCHDEVICE_DISABLE_PLUGINS", "ghostchip")
    with pytest.raises(BackendUnavailableError) as info:
        torchdevice.use("ghostchip")
    assert (info.value.name, info.value.reason) == ("ghostchip", "its plugin is disabled by TORCHDEVICE_DISABLE_PLUGINS")
    assert "cpu" in info.value.available and "(from torchdevice.use())" in str(info.value)


def test_resolution_failures_are_reported_in_full(router_state):
    top = _top()
    liar = make_backend("liar", top + 30)
    liar.memory = lambda: "plenty"
    router_state.register(liar)
    router_state.register(make_backend("empty", top + 20, device_count=0))
    router_state.register(make_backend("flaky", top + 10, fail_in="streams"))
    router_state.register(make_backend("alpha", top + 5))
    assert torchdevice.current_backend() == "alpha"  # automatic selection fell past the three
    records = _records()
    reasons = {
        "liar": "torchdevice_memory of plugin 'liar' returned 'plenty', not a MemoryOps",
        "empty": "torchdevice_device_count of plugin 'empty' returned 0, not at least 1",
        "flaky": "torchdevice_streams failed: plugin 'flaky' (torchdevice_streams): RuntimeError: flaky exploded "
                 "in streams",
    }
    for name, why in reasons.items():
        assert (records[name].available, records[name].reason, records[name].problems) == (False, why, [why]), name
    assert ("torchdevice_memory", "returned 'plenty', not a MemoryOps") in _problems("liar")
    assert ("torchdevice_device_count", reasons["empty"]) in _problems("empty")
    assert [r.name for r in torchdevice.backends() if r.selected] == ["alpha"]
    active = router.active()
    assert (active.name, active.priority, active.owner, active.device_count) == ("alpha", top + 5, "alpha", 1)
    # asked for by name, the failure is the error, naming where the choice came from
    router_state.setenv("TORCHDEVICE_BACKEND", "liar")
    with pytest.raises(BackendUnavailableError) as info:
        torchdevice.current_backend()
    assert (info.value.name, info.value.reason) == ("liar", reasons["liar"])
    assert "(from TORCHDEVICE_BACKEND)" in str(info.value) and "alpha" in info.value.available


def test_a_backend_asked_for_by_name_may_have_no_device(router_state):
    """As a CUDA process with CUDA_VISIBLE_DEVICES="": it runs, and sees no device (automatic selection passes it over)."""
    router_state.register(make_backend("empty", _top() + 20, device_count=0))
    router_state.register(make_backend("alpha", _top() + 5))
    assert torchdevice.current_backend() == "alpha"
    router_state.setenv("TORCHDEVICE_BACKEND", "empty")
    active = router.active()
    assert (active.name, active.device_count, active.available) == ("empty", 0, False)


def test_a_chosen_backend_failing_at_resolution_names_the_choice(router_state):
    router_state.register(make_backend("flaky", _top() + 10, fail_in="collectives"))
    torchdevice.use("flaky")  # available: the failure comes at resolution
    with pytest.raises(BackendUnavailableError) as info:
        torchdevice.current_backend()
    assert info.value.name == "flaky" and str(info.value).startswith(
        "torchdevice backend 'flaky' (from torchdevice.use()) is not available: torchdevice_collectives failed: ")


def test_when_no_backend_resolves_every_failure_is_listed(router_state, monkeypatch):
    router_state.register(make_backend("flaky", _top() + 10, fail_in="rng"))
    router_state.register(make_backend("empty", _top() + 5, device_count=0))
    liar = make_backend("liar", _top() + 1)
    liar.streams = lambda: 7
    router_state.register(liar)
    monkeypatch.setattr(router, "_candidates", lambda: [("flaky", "priority"), ("empty", "priority"),
                                                        ("liar", "priority")])
    with pytest.raises(TorchDeviceError) as info:
        router.active()
    assert str(info.value) == (
        "no torchdevice backend could be resolved: torchdevice backend 'flaky' is not available: torchdevice_rng "
        "failed: plugin 'flaky' (torchdevice_rng): RuntimeError: flaky exploded in rng; available here: none; "
        "torchdevice backend 'empty' is not available: torchdevice_device_count of plugin 'empty' returned 0, "
        "not at least 1; available here: none; torchdevice backend 'liar' is not available: torchdevice_streams "
        "of plugin 'liar' returned 7, not a StreamOps; available here: none")


def test_device_properties_that_fail_are_an_error_naming_the_device(router_state):
    asked = []
    twin = make_backend("twin", _top() + 10, device_count=2)
    real = twin.device_properties
    twin.device_properties = lambda index: asked.append(index) or real(index)
    router_state.register(twin)
    torchdevice.use("twin")
    assert router.active().properties(1).name and asked == [1]
    router.active().properties(1)
    assert asked == [1]  # cached per device
    broken = make_backend("broken", _top() + 20, fail_in="device_properties")
    silent = make_backend("silent", _top() + 30)
    silent.device_properties = lambda index: None
    router_state.register(broken)
    router_state.register(silent)
    torchdevice.use("broken")
    with pytest.raises(TorchDeviceError) as info:
        router.active().properties(0)
    assert str(info.value) == ("backend 'broken' gave no properties for device 0: plugin 'broken' "
                               "(torchdevice_device_properties): RuntimeError: broken exploded in device_properties")
    torchdevice.use("silent")
    with pytest.raises(TorchDeviceError) as info:
        router.active().properties(0)
    assert str(info.value) == "backend 'silent' gave no properties for device 0"


@pytest.mark.parametrize("raw", ["cpu", "=5", "cpu=5=6", "cpu=", " = 3"])
def test_priority_items_must_be_name_equals_integer(router_state, raw):
    router_state.delenv("TORCHDEVICE_PRIORITY")
    router_state.monkeypatch.setenv("TORCHDEVICE_PRIORITY", raw)  # exactly this value (no suite pin)
    router.invalidate()
    with pytest.raises(ConfigError) as info:
        torchdevice.current_backend()
    assert (info.value.variable, info.value.value) == ("TORCHDEVICE_PRIORITY", raw)


def test_change_listeners_hear_every_invalidation(router_state):
    heard = []
    router.on_change(lambda: heard.append(1))
    try:
        router.invalidate()
        torchdevice.use("cpu")
        assert len(heard) == 2
    finally:
        router._listeners.pop()


# -- the owner is asked first; other plugins answer what it leaves open ---------------------------


def _families(name, label):
    """A plugin answering every resolution hook, and availability and properties, for ``name``."""
    base = make_backend(name, 0, device_count=2)

    class Families:
        @torchdevice.hookimpl
        def torchdevice_availability(self, name):
            return torchdevice.Availability(False, f"{label} says no") if name == base.name else None

        @torchdevice.hookimpl
        def torchdevice_device_properties(self, name, index):
            if name != base.name:
                return None
            return torchdevice.DeviceProperties(name=f"{label} chip {index}", total_memory=1 << 30, type="cpu")

    def answering(op):
        def answer(self, name):
            return op() if name == base.name else None

        return answer

    for hook in ("device_count", "memory", "streams", "rng", "collectives"):
        answer = answering(getattr(base, hook))
        answer.__name__ = f"torchdevice_{hook}"
        setattr(Families, answer.__name__, torchdevice.hookimpl(answer))
    return Families()


class Owner(Declares):
    def __init__(self, specs, properties=True):
        super().__init__(specs)
        if properties:
            self.torchdevice_device_properties = torchdevice.hookimpl(
                lambda name, index: torchdevice.DeviceProperties(name=f"owner chip {index}", total_memory=1 << 30,
                                                                 type="cpu") if name == specs[0].name else None)

    @torchdevice.hookimpl
    def torchdevice_availability(self, name):
        return torchdevice.Availability(True, "owner says yes") if name == self.specs[0].name else None


def test_the_owner_answers_before_plugins_registered_after_it(router_state):
    router_state.register(Owner([BackendSpec("owned", "cpu", _top() + 50)]), name="owner")
    router_state.register(_families("owned", "helper"), name="helper")  # called before the owner by pluggy
    assert _records()["owned"].reason == "owner says yes"
    torchdevice.use("owned")
    assert router.active().properties(1).name == "owner chip 1"


def test_what_the_owner_leaves_open_is_asked_of_the_others_with_its_arguments(router_state):
    router_state.register(Owner([BackendSpec("open", "cpu", _top() + 50)], properties=False), name="owner")
    router_state.register(_families("open", "helper"), name="helper")
    torchdevice.use("open")
    assert router.active().properties(1).name == "helper chip 1"


def test_a_hook_nobody_answers_is_the_reason(router_state):
    class Broken:
        @torchdevice.hookimpl
        def torchdevice_device_count(self, name):
            if name == "raising":
                raise RuntimeError("no count today")
            return None

    router_state.register(Owner([BackendSpec("lone", "cpu", 1)], properties=False), name="lone")
    router_state.register(Owner([BackendSpec("raising", "cpu", 1)], properties=False), name="raising")
    router_state.register(Broken(), name="broken")
    for name, why in (("lone", "torchdevice_device_count failed: no plugin answered"),
                      ("raising", "torchdevice_device_count failed: plugin 'broken' (torchdevice_device_count): "
                                  "RuntimeError: no count today")):
        torchdevice.use(name)
        with pytest.raises(BackendUnavailableError) as info:
            torchdevice.current_backend()
        assert info.value.reason == why


def test_a_named_selection_loads_only_that_plugin(router_state, monkeypatch):
    """Naming a backend imports its plugin alone: a slow or broken plugin elsewhere costs nothing."""
    import pluggy

    from torchdevice import hookspecs

    fresh = pluggy.PluginManager(hookspecs.PROJECT)
    fresh.add_hookspecs(hookspecs)
    monkeypatch.setattr(plugins, "pm", fresh)
    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setattr(plugins, "plugin_info", {})
    router.invalidate()
    torchdevice.use("cpu")
    assert torchdevice.current_backend() == "cpu" and torchdevice.memory_allocated() >= 0
    assert [name for name, _ in fresh.list_name_plugin()] == ["cpu"]
    installed = {ep.name for ep in entry_points(group="torchdevice")} - plugins.blocked()
    if "mlx" in installed:  # an entry point: that one is imported, no other
        torchdevice.use("mlx")
        assert sorted(name for name, _ in fresh.list_name_plugin()) == ["cpu", "mlx"]
    with pytest.raises(torchdevice.BackendNotFoundError):
        torchdevice.use("nochip")  # unknown: now everything is discovered, to list what is known
    assert installed | {"cpu"} == {name for name, _ in fresh.list_name_plugin()}
