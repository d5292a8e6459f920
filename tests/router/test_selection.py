"""The router: discovery, selection order, isolation of broken plugins, caching.

In-process tests register fake backends (``helpers.make_backend``) through
``torchdevice.plugins.register``. The entry-point tests install fixture
plugins for real -- a directory with the module and a ``*.dist-info`` holding
``entry_points.txt`` -- and run ``torchdevice`` in subprocesses with that
directory on ``PYTHONPATH``, so discovery goes through ``importlib.metadata``
exactly as for a pip-installed plugin.
"""
from __future__ import annotations

import json
import sys
import threading

import pluggy
import pytest
import torch
from helpers import FIXTURES, make_backend, run_command, run_concurrently, run_torchdevice, write_plugin

import torchdevice
from torchdevice import plugins, router
from torchdevice.errors import BackendNotFoundError, BackendUnavailableError


def top_priority() -> int:
    """The highest priority among the backends installed here (the fakes must beat it)."""
    return max(r.priority for r in torchdevice.backends() if r.priority is not None)


def record(name):
    matches = [r for r in torchdevice.backends() if r.name == name]
    assert len(matches) == 1, [r.name for r in torchdevice.backends()]
    return matches[0]


def selected_names():
    return [r.name for r in torchdevice.backends() if r.selected]


# -- selection order ------------------------------------------------------------------------


def test_cpu_is_built_in_and_available(router_state):
    cpu = record("cpu")
    assert cpu.available and cpu.automatic
    assert cpu.device_type == "cpu"
    assert cpu.distribution == "torchdevice"
    assert cpu.version == torchdevice.__version__
    assert cpu.plugin == "cpu"


def test_highest_priority_available_backend_wins(router_state):
    top = top_priority()
    router_state.register(make_backend("alpha", top + 10))
    router_state.register(make_backend("beta", top + 20))
    assert torchdevice.current_backend() == "beta"
    assert selected_names() == ["beta"]
    names = [r.name for r in torchdevice.backends()]
    assert names[:2] == ["beta", "alpha"]  # listed best priority first
    assert "cpu" in names


def test_unavailable_backend_is_skipped_with_its_reason(router_state):
    router_state.register(make_backend("ghost", top_priority() + 100, available=False, reason="no ghost card"))
    assert torchdevice.current_backend() != "ghost"
    ghost = record("ghost")
    assert not ghost.available and ghost.reason == "no ghost card" and not ghost.selected
    with pytest.raises(BackendUnavailableError, match="ghost") as info:
        torchdevice.use("ghost")
    assert "no ghost card" in str(info.value) and "cpu" in str(info.value)


def test_env_backend_beats_priority(router_state):
    router_state.register(make_backend("alpha", top_priority() + 10))
    assert torchdevice.current_backend() == "alpha"
    router_state.setenv("TORCHDEVICE_BACKEND", "cpu")
    assert torchdevice.current_backend() == "cpu"
    assert selected_names() == ["cpu"]


def test_use_beats_env_and_none_returns_to_env(router_state):
    router_state.register(make_backend("alpha", top_priority() + 10))
    router_state.setenv("TORCHDEVICE_BACKEND", "cpu")
    torchdevice.use("alpha")
    assert torchdevice.current_backend() == "alpha"
    assert selected_names() == ["alpha"]
    torchdevice.use(None)
    assert torchdevice.current_backend() == "cpu"
    router_state.delenv("TORCHDEVICE_BACKEND")
    assert torchdevice.current_backend() == "alpha"


def test_use_as_context_manager_restores_previous_choice(router_state):
    router_state.register(make_backend("alpha", top_priority() + 10))
    with torchdevice.use("cpu"):
        assert torchdevice.current_backend() == "cpu"
        with torchdevice.use("alpha"):
            assert torchdevice.current_backend() == "alpha"
        assert torchdevice.current_backend() == "cpu"
    assert router.requested() is None
    assert torchdevice.current_backend() == "alpha"


def test_priority_env_overrides_declared_priority(router_state):
    top = top_priority()
    router_state.register(make_backend("alpha", top + 10))
    router_state.setenv("TORCHDEVICE_PRIORITY", f"cpu={top + 50}")
    assert torchdevice.current_backend() == "cpu"
    assert record("cpu").priority == top + 50
    assert record("alpha").priority == top + 10
    router_state.setenv("TORCHDEVICE_PRIORITY", f" cpu = {top + 50} , alpha={top + 60}")
    assert torchdevice.current_backend() == "alpha"
    assert record("alpha").priority == top + 60


def test_malformed_priority_env_is_a_clear_error(router_state):
    router_state.setenv("TORCHDEVICE_PRIORITY", "cpu=high")
    with pytest.raises(ValueError, match=r"TORCHDEVICE_PRIORITY.*'cpu=high'.*NAME=INTEGER"):
        torchdevice.current_backend()


def test_non_automatic_backend_only_on_request(router_state):
    router_state.register(make_backend("manual", top_priority() + 100, automatic=False, reason="emulator"))
    manual = record("manual")
    assert manual.available and not manual.automatic
    assert torchdevice.current_backend() != "manual"
    torchdevice.use("manual")
    assert torchdevice.current_backend() == "manual"
    assert selected_names() == ["manual"]
    torchdevice.use(None)
    router_state.setenv("TORCHDEVICE_BACKEND", "manual")  # asking by env counts as asking by name
    assert torchdevice.current_backend() == "manual"


def test_use_unknown_name_lists_known_and_available_and_changes_nothing(router_state):
    before = torchdevice.current_backend()
    with pytest.raises(BackendNotFoundError) as info:
        torchdevice.use("nope")
    message = str(info.value)
    assert "'nope'" in message and "cpu" in message
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
    assert "cpu" in info.value.known and "cpu" in info.value.available
    assert router.requested() is None
    assert torchdevice.current_backend() == before


def test_use_rejects_non_string(router_state):
    with pytest.raises(TypeError, match="backend name"):
        torchdevice.use(0)


def test_env_backend_unknown_raises_naming_the_variable(router_state):
    router_state.setenv("TORCHDEVICE_BACKEND", "nope")
    with pytest.raises(BackendNotFoundError, match=r"'nope' \(from TORCHDEVICE_BACKEND\).*cpu"):
        torchdevice.current_backend()
    # backends() still lists everything, with nothing selected
    assert selected_names() == []
    assert record("cpu").available


def test_env_backend_unavailable_does_not_fall_back(router_state):
    router_state.register(make_backend("ghost", 1, available=False, reason="no ghost card"))
    router_state.setenv("TORCHDEVICE_BACKEND", "ghost")
    with pytest.raises(BackendUnavailableError, match="no ghost card"):
        torchdevice.current_backend()


def test_a_misspelled_name_suggests_the_close_known_one(router_state):
    router_state.register(make_backend("ghostchip", 1))
    with pytest.raises(BackendNotFoundError, match=r"'ghostchp' \(from torchdevice.use\(\); did you mean 'ghostchip'\?\)"):
        torchdevice.use("ghostchp")
    router_state.setenv("TORCHDEVICE_BACKEND", "gostchip")
    with pytest.raises(BackendNotFoundError, match=r"\(from TORCHDEVICE_BACKEND; did you mean 'ghostchip'\?\)"):
        torchdevice.current_backend()
    router_state.setenv("TORCHDEVICE_BACKEND", "nope")
    with pytest.raises(BackendNotFoundError) as info:
        torchdevice.current_backend()
    assert "did you mean" not in str(info.value)


def test_asking_for_a_source_family_as_backend_where_it_is_missing_suggests_source(router_state):
    if torch.backends.mps.is_available():
        pytest.skip("the mps backend runs here")
    router_state.setenv("TORCHDEVICE_BACKEND", "mps")
    with pytest.raises((BackendNotFoundError, BackendUnavailableError), match="torchdevice run --source mps"):
        torchdevice.current_backend()
    with pytest.raises((BackendNotFoundError, BackendUnavailableError), match="torchdevice run --source mps"):
        torchdevice.use("mps")
    router_state.register(make_backend("ghost", 1, available=False, reason="no ghost card"))
    with pytest.raises(BackendUnavailableError) as info:
        torchdevice.use("ghost")
    assert "--source" not in str(info.value)


# -- registration and caching ----------------------------------------------------------------


def test_registration_and_unregistration_invalidate_the_cache(router_state):
    assert torchdevice.current_backend() != "alpha"
    router_state.register(make_backend("alpha", top_priority() + 10))
    assert torchdevice.current_backend() == "alpha"
    router_state.unregister("alpha")
    assert torchdevice.current_backend() != "alpha"
    assert "alpha" not in [r.name for r in torchdevice.backends()]


def test_api_calls_after_resolution_call_no_hook(router_state, monkeypatch, restore_rng):
    torchdevice.use("cpu")
    torchdevice.get_device_properties()  # properties are fetched once per device, then cached
    torchdevice.backends()  # a named backend is resolved without asking other plugins: listing all asks once
    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"hook called after resolution: {args}")

    monkeypatch.setattr(plugins, "call_each", forbidden)
    monkeypatch.setattr(plugins, "call_first", forbidden)
    monkeypatch.setattr(plugins, "call_owner", forbidden)
    monkeypatch.setattr(plugins, "load", forbidden)
    monkeypatch.setattr(plugins, "load_only", forbidden)
    for _ in range(3):
        assert torchdevice.current_backend() == "cpu"
        assert torchdevice.device_type() == "cpu"
        assert torchdevice.device_count() == 1
        assert torchdevice.current_device() == 0
        torchdevice.set_device(0)
        torchdevice.synchronize()
        assert torchdevice.get_device_name()
        assert torchdevice.is_bf16_supported() is True
        assert torchdevice.memory_allocated() > 0
        assert torchdevice.max_memory_allocated() > 0
        assert torchdevice.memory_stats()
        assert torchdevice.mem_get_info()[1] > 0
        torchdevice.empty_cache()
        stream = torchdevice.Stream()
        with torchdevice.stream(stream):
            assert torchdevice.current_stream() == stream
        assert torchdevice.current_stream() == torchdevice.default_stream()
        event = torchdevice.Event(enable_timing=True)
        event.record()
        torchdevice.manual_seed(3)
        torchdevice.set_rng_state(torchdevice.get_rng_state())
        assert [r.name for r in torchdevice.backends() if r.selected] == ["cpu"]
    assert calls == []
    # use() drops the cache: the next call resolves again, through the hooks
    torchdevice.use(None)
    with pytest.raises(AssertionError, match="hook called after resolution"):
        torchdevice.current_backend()
    assert calls


def test_resolution_calls_each_hook_once(router_state, monkeypatch):
    counts: dict[str, int] = {}
    real_each = plugins.call_each

    def counting_each(hook, *args, **kwargs):  # call_first goes through call_each too
        counts[hook] = counts.get(hook, 0) + 1
        return real_each(hook, *args, **kwargs)

    real_owner = plugins.call_owner

    def counting_owner(hook, *args, **kwargs):  # the declaring plugin, asked directly
        counts[hook] = counts.get(hook, 0) + 1
        return real_owner(hook, *args, **kwargs)

    monkeypatch.setattr(plugins, "call_each", counting_each)
    monkeypatch.setattr(plugins, "call_owner", counting_owner)
    router.invalidate()
    for _ in range(5):
        torchdevice.current_backend()
        torchdevice.memory_allocated()
        torchdevice.backends()
    assert counts["torchdevice_backends"] == 1
    for hook in ("device_count", "memory", "streams", "rng", "collectives"):
        assert counts[f"torchdevice_{hook}"] == 1, counts


# -- broken plugins, in process --------------------------------------------------------------


def test_plugin_raising_in_availability_is_reported_and_skipped(router_state):
    router_state.register(make_backend("grumpy", top_priority() + 100, fail_in="availability"))
    assert torchdevice.current_backend() != "grumpy"
    grumpy = record("grumpy")
    assert not grumpy.available and "grumpy exploded in availability" in grumpy.reason
    assert any(p.plugin == "grumpy" and "exploded" in p.error for p in torchdevice.problems())
    assert record("cpu").available


def test_plugin_raising_at_resolution_falls_back_to_the_next(router_state):
    top = top_priority()
    router_state.register(make_backend("alpha", top + 10))
    router_state.register(make_backend("flaky", top + 20, fail_in="memory"))
    assert torchdevice.current_backend() == "alpha"
    flaky = record("flaky")
    assert not flaky.available and "flaky exploded in memory" in flaky.reason
    assert any(p.plugin == "flaky" and p.stage == "torchdevice_memory" for p in torchdevice.problems())
    # asked for by name, the failure is an error, not a silent fallback
    router_state.setenv("TORCHDEVICE_BACKEND", "flaky")
    with pytest.raises(BackendUnavailableError, match="flaky exploded in memory"):
        torchdevice.current_backend()


def test_plugin_raising_in_backends_hook_is_reported(router_state):
    class CrashChip:
        @torchdevice.hookimpl
        def torchdevice_backends(self):
            raise RuntimeError("crashchip cannot enumerate")

    router_state.register(CrashChip(), name="crashchip")
    assert torchdevice.current_backend()  # the others still resolve
    crash = record("crashchip")
    assert not crash.available and "crashchip cannot enumerate" in crash.reason
    assert any(p.plugin == "crashchip" and p.stage == "torchdevice_backends" for p in torchdevice.problems())


def test_misspelled_hookimpl_is_rejected_by_validation(router_state):
    class TypoChip:
        @torchdevice.hookimpl
        def torchdevice_availabilty(self, name):
            return None

    with pytest.raises(pluggy.PluginValidationError, match="torchdevice_availabilty"):
        plugins.register(TypoChip(), name="typochip")
    assert not plugins.pm.has_plugin("typochip")
    assert record("cpu").available
    assert torchdevice.current_backend()


def test_backend_declared_twice_is_a_reported_conflict(router_state):
    # the impostor's memory family raises: if the router used it for "cpu", resolving "cpu" would fail
    router_state.register(make_backend("cpu", 1_000_000, fail_in="memory"), name="impostor")
    assert any(p.plugin == "impostor" and "already provided" in p.error for p in torchdevice.problems())
    assert record("cpu").plugin == "cpu"  # the built-in, registered first, keeps the name
    torchdevice.use("cpu")
    before = torchdevice.memory_allocated()  # the built-in's figure: tensor bytes, moved by a tensor
    held = torch.ones(1024)
    assert torchdevice.memory_allocated() >= before + held.nbytes
    torchdevice.use(None)
    torchdevice.use("cpu")  # rediscovery must not repeat the problem
    assert sum("already provided" in p.error for p in torchdevice.problems()) == 1


# -- per-thread current device, on a fake two-device backend ------------------------------------


def test_current_device_is_per_thread(router_state):
    router_state.register(make_backend("twin", top_priority() + 10, device_count=2))
    torchdevice.use("twin")
    assert torchdevice.device_count() == 2
    torchdevice.set_device(1)
    try:
        seen = {}

        def worker():
            seen["start"] = torchdevice.current_device()
            torchdevice.set_device(0)
            seen["after_set"] = torchdevice.current_device()

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert seen == {"start": 0, "after_set": 0}
        assert torchdevice.current_device() == 1
        with torchdevice.device(0):
            assert torchdevice.current_device() == 0
        assert torchdevice.current_device() == 1
        with pytest.raises(torchdevice.InvalidDeviceError, match="2"):
            torchdevice.set_device(2)
    finally:
        torchdevice.set_device(0)


# -- real entry points, in subprocesses ------------------------------------------------------

GOOD_STEPS = [
    {"name": "default"},
    {"name": "env_cpu", "env": {"TORCHDEVICE_BACKEND": "cpu"}},
    {"name": "priority", "env": {"TORCHDEVICE_PRIORITY": "fastchip=-5"}},
    {"name": "manual", "env": {"FASTCHIP_MODE": "manual"}, "use": "fastchip"},
    {"name": "unavailable", "env": {"FASTCHIP_MODE": "unavailable"}, "use": "fastchip"},
    {"name": "unavailable_env", "env": {"FASTCHIP_MODE": "unavailable", "TORCHDEVICE_BACKEND": "fastchip"}},
]


def probe(*steps, **kwargs):
    """A job for run_concurrently: tests/fixtures/probe.py through ``steps``."""
    return (run_command, ([sys.executable, str(FIXTURES / "probe.py"), json.dumps(list(steps))],), kwargs)


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """Two fake site directories: fastchip alone, and fastchip with four broken plugins."""
    good = tmp_path_factory.mktemp("site-good")
    write_plugin(good, "acme-fastchip", "0.3.1", "fastchip", "td_fastchip")
    mixed = tmp_path_factory.mktemp("site-mixed")
    write_plugin(mixed, "acme-fastchip", "0.3.1", "fastchip", "td_fastchip")
    write_plugin(mixed, "brokenchip-plugin", "1.0", "brokenchip", "td_brokenchip")
    write_plugin(mixed, "typochip-plugin", "2.0", "typochip", "td_typochip")
    write_plugin(mixed, "grumpychip-plugin", "3.0", "grumpychip", "td_grumpychip")
    write_plugin(mixed, "crashchip-plugin", "4.0", "crashchip", "td_crashchip")
    return {"good": good, "mixed": mixed}


@pytest.fixture(scope="module")
def runs(sites):
    """Every subprocess of this module, run concurrently once (each one pays ``import torch``)."""
    good, mixed = [sites["good"]], [sites["mixed"]]
    jobs = {
        # the real console script, with the plugin found through its entry point
        "info_text": (run_torchdevice, ("info",), {"pythonpath": good}),
        "unavailable_asked": (run_torchdevice, ("info", "--json"), {"pythonpath": good, "env": {
            "FASTCHIP_MODE": "unavailable", "TORCHDEVICE_BACKEND": "fastchip"}}),
        "good": probe(*GOOD_STEPS, pythonpath=good),
        "mixed": probe({"name": "default", "use": "brokenchip"}, pythonpath=mixed),
        "disabled": probe({"name": "default"}, pythonpath=mixed, env={
            "TORCHDEVICE_DISABLE_PLUGINS": "fastchip, brokenchip"}),
        "only": probe({"name": "default"}, pythonpath=mixed, env={"TORCHDEVICE_PLUGINS": "fastchip"}),
    }
    results = run_concurrently(jobs)
    for key in ("good", "mixed", "disabled", "only"):
        assert results[key].returncode == 0, results[key]
        results[key] = results[key].json()
    return results


def by_name(backends):
    return {b["name"]: b for b in backends}


def test_entry_point_plugin_outranks_cpu_in_info_json(runs):
    step = runs["good"]["default"]
    assert step["info_rc"] == 0, step["info_err"]
    info = step["info_json"]
    assert info["selected"] == "fastchip" and info["error"] is None
    backends = by_name(info["backends"])
    fast = backends["fastchip"]
    assert fast["distribution"] == "acme-fastchip" and fast["version"] == "0.3.1"
    assert fast["plugin"] == "fastchip" and fast["priority"] == 10_000 and fast["device_type"] == "cpu"
    assert fast["available"] and fast["selected"] and fast["reason"] == "fastchip emulator"
    assert backends["cpu"]["available"] and not backends["cpu"]["selected"]
    assert info["backends"][0]["name"] == "fastchip"  # best priority first


def test_entry_point_plugin_in_info_table_of_console_script(runs):
    result = runs["info_text"]
    assert result.returncode == 0, result
    table = result.stdout.partition("\n\n")[0]  # the descriptions follow a blank line
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    assert rows["backend"][:3] == ["backend", "plugin", "version"]
    assert rows["fastchip"][1:6] == ["acme-fastchip", "0.3.1", "cpu", "10000", "yes"]
    assert rows["fastchip"][6] == "*"
    assert rows["cpu"][1:3] == ["torchdevice", torchdevice.__version__]
    assert "*" not in rows["cpu"]


def test_entry_point_plugin_is_selected_by_the_api(runs):
    step = runs["good"]["default"]
    assert step["current"] == "fastchip" and "error" not in step
    assert step["tensor_device"] == "cpu"
    fast = by_name(step["backends"])["fastchip"]
    assert (fast["distribution"], fast["version"], fast["selected"]) == ("acme-fastchip", "0.3.1", True)
    assert "'nope'" in step["use_nope"] and "fastchip" in step["use_nope"] and "cpu" in step["use_nope"]


def test_env_backend_beats_entry_point_priority(runs):
    step = runs["good"]["env_cpu"]
    assert step["current"] == "cpu" and step["info_json"]["selected"] == "cpu"
    assert by_name(step["backends"])["fastchip"]["available"]


def test_priority_env_demotes_entry_point_plugin(runs):
    step = runs["good"]["priority"]
    assert by_name(step["backends"])["fastchip"]["priority"] == -5
    assert step["current"] != "fastchip"


def test_entry_point_backend_not_automatic_is_taken_only_by_use(runs):
    step = runs["good"]["manual"]
    fast = by_name(step["backends"])["fastchip"]
    assert fast["available"] and not fast["automatic"] and not fast["selected"]
    assert step["current"] != "fastchip"
    assert step["use"] == "selected fastchip"
    table_row = [line for line in step["info_text"].splitlines() if line.startswith("fastchip")][0]
    assert "on request" in table_row


def test_use_unavailable_entry_point_backend_raises_with_reason(runs):
    step = runs["good"]["unavailable"]
    assert step["current"] != "fastchip"
    assert step["use"].startswith("raised BackendUnavailableError")
    assert "no fastchip card found" in step["use"] and "cpu" in step["use"].split("available here:")[1]


def test_env_asking_for_unavailable_entry_point_backend_fails(runs):
    step = runs["good"]["unavailable_env"]
    assert step["info_rc"] != 0 and step["info_json"]["selected"] is None
    assert step["error"].startswith("BackendUnavailableError")
    result = runs["unavailable_asked"]  # the same through the console script
    assert result.returncode != 0, result
    assert "'fastchip' (from TORCHDEVICE_BACKEND) is not available: no fastchip card found" in result.stderr
    assert "cpu" in result.stderr.split("available here:")[1]
    info = result.json()
    assert info["selected"] is None and "no fastchip card found" in info["error"]


def test_broken_plugins_are_reported_and_isolated_in_info_json(runs):
    step = runs["mixed"]["default"]
    assert step["info_rc"] == 0, step["info_err"]
    info = step["info_json"]
    assert info["selected"] == "fastchip" and info["error"] is None
    backends = by_name(info["backends"])
    assert backends["cpu"]["available"]

    broken = backends["brokenchip"]
    assert not broken["available"] and not broken["selected"]
    assert "failed to import: ModuleNotFoundError" in broken["reason"]
    assert "brokenchip_vendor_sdk" in broken["reason"]
    assert (broken["distribution"], broken["version"]) == ("brokenchip-plugin", "1.0")

    typo = backends["typochip"]
    assert not typo["available"]
    assert "failed validation: PluginValidationError" in typo["reason"]
    assert "torchdevice_availabilty" in typo["reason"]
    assert (typo["distribution"], typo["version"]) == ("typochip-plugin", "2.0")

    grumpy = backends["grumpychip"]
    assert not grumpy["available"] and "grumpychip driver exploded" in grumpy["reason"]
    assert (grumpy["distribution"], grumpy["version"]) == ("grumpychip-plugin", "3.0")

    crash = backends["crashchip"]
    assert not crash["available"] and "crashchip cannot enumerate its devices" in crash["reason"]
    assert (crash["distribution"], crash["version"]) == ("crashchip-plugin", "4.0")

    problems = "\n".join(info["problems"])
    for text in ("'brokenchip' (import)", "brokenchip_vendor_sdk", "'typochip' (validate)", "torchdevice_availabilty",
                 "'grumpychip' (torchdevice_availability)", "'crashchip' (torchdevice_backends)"):
        assert text in problems, problems


def test_broken_plugins_in_info_table(runs):
    lines = runs["mixed"]["default"]["info_text"].splitlines()
    table = runs["mixed"]["default"]["info_text"].partition("\n\n")[0]  # descriptions follow a blank line
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert "*" in rows["fastchip"].split()
    assert "brokenchip_vendor_sdk" in rows["brokenchip"]
    problem_lines = [line for line in lines if line.startswith("problem: ")]
    assert any("brokenchip" in line and "(import)" in line for line in problem_lines), lines
    assert any("grumpychip driver exploded" in line for line in problem_lines), lines


def test_broken_plugins_in_backends_and_problems(runs):
    step = runs["mixed"]["default"]
    assert step["current"] == "fastchip"
    backends = by_name(step["backends"])
    assert {"brokenchip", "typochip", "grumpychip", "crashchip"} <= set(backends)
    assert [b["name"] for b in step["backends"] if b["selected"]] == ["fastchip"]
    stages = {(p["plugin"], p["stage"]) for p in step["problems"]}
    assert ("brokenchip", "import") in stages
    assert ("typochip", "validate") in stages
    assert ("grumpychip", "torchdevice_availability") in stages
    assert ("crashchip", "torchdevice_backends") in stages
    assert any(p["plugin"] == "typochip" and "PluginValidationError" in p["error"] for p in step["problems"])
    # a broken plugin cannot be chosen: use() says why, and the selection is unchanged
    assert step["use"].startswith("raised BackendUnavailableError")
    assert "'brokenchip'" in step["use"] and "ModuleNotFoundError" in step["use"]


def test_disable_plugins_blocks_the_named_entry_points(runs):
    step = runs["disabled"]["default"]
    names = set(by_name(step["backends"]))
    assert "fastchip" not in names and "brokenchip" not in names
    assert {"typochip", "grumpychip", "crashchip", "cpu"} <= names
    assert step["current"] != "fastchip"
    assert not any(p["plugin"] in ("fastchip", "brokenchip") for p in step["problems"])


def test_plugins_env_loads_only_the_named_entry_points(runs):
    step = runs["only"]["default"]
    assert set(by_name(step["backends"])) == {"fastchip", "cpu"}  # cpu is built in and always there
    assert step["problems"] == []
    assert step["current"] == "fastchip"


# -- hostile plugins ---------------------------------------------------------------------------


def test_hook_returning_the_wrong_type_is_reported_and_skipped(router_state):
    liar = make_backend("liar", top_priority() + 10)
    liar.memory = lambda: "plenty"  # not a MemoryOps: the API would fail later, far from the cause
    router_state.register(liar, name="liar")
    assert torchdevice.current_backend() != "liar"  # automatic selection falls back
    assert any(p.plugin == "liar" and "not a MemoryOps" in p.error for p in torchdevice.problems())
    assert "not a MemoryOps" in record("liar").reason and not record("liar").available
    with pytest.raises(torchdevice.BackendUnavailableError, match="not a MemoryOps"):
        torchdevice.use("liar")
        torchdevice.current_backend()


def test_plugin_calling_sys_exit_in_a_hook_does_not_end_the_process(router_state):
    quitter = make_backend("quitter", top_priority() + 10)

    def leave():
        raise SystemExit(3)

    quitter.availability = leave
    router_state.register(quitter, name="quitter")
    assert not record("quitter").available
    assert torchdevice.current_backend() != "quitter"
    assert any(p.plugin == "quitter" and "SystemExit" in p.error for p in torchdevice.problems())
