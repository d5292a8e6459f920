"""What the router records and reports per backend: plugins without distribution information, a backend
that failed when asked for by name, priorities, and the property fields filled per device.

* A plugin put on pluggy's plugin manager directly (not through ``torchdevice.plugins.register``,
  so without distribution information) still declares its backend: it is listed, with no
  distribution and no version, rather than breaking discovery.
* A backend asked for by name (``torchdevice.use``) that fails while resolving must not be reported
  as available afterwards -- neither in the error's "available here" list nor in
  ``torchdevice.backends()`` -- as it is not when automatic selection skips it
  (``tests/router/test_selection.py::test_plugin_raising_at_resolution_falls_back_to_the_next``). The
  failure is kept until the next ``use()``/invalidation, whatever rebuilds the records.
* An entry-point backend asked for by name that is unavailable: the error lists every available
  backend, also those of entry-point plugins not imported yet (a named selection imports only the
  named plugin; the error must not stop there). In a subprocess, as entry points are read once per
  process.
* Priorities rank backends: 1 outranks 0 whatever the registration order (a priority of 0 is a
  priority, not a missing one).
* The fields a backend leaves empty are filled per device as ``capability.FILLED`` documents:
  ``is_integrated`` is 1 for a backend whose tensors are host tensors, and the UUID is distinct per
  device -- per index of one backend, and between backends whose devices look the same.
"""
from __future__ import annotations

import json
import textwrap

import pytest
from helpers import make_backend, run_python, write_distribution

import torchdevice
from torchdevice import plugins, router
from torchdevice.backend import DeviceProperties
from torchdevice.errors import BackendUnavailableError


def _record(name):
    (found,) = [r for r in torchdevice.backends() if r.name == name]
    return found


def test_a_plugin_put_on_the_plugin_manager_directly_is_listed_without_a_distribution(router_state):
    plugins.pm.register(make_backend("rawchip", 1), name="rawchip")
    try:
        router.invalidate()
        raw = router.discover()["rawchip"]
        assert (raw.plugin, raw.distribution, raw.version) == ("rawchip", None, None)
        assert raw.available and raw.device_type == "cpu" and raw.priority == 1
        assert router.discover()["cpu"].available  # the others are untouched
    finally:
        plugins.pm.unregister(name="rawchip")
        router.invalidate()


@pytest.fixture
def failed_by_name(router_state):
    """``use("flaky")`` of a backend whose memory hook raises, and the error resolving it gave."""
    router_state.register(make_backend("flaky", 1, fail_in="memory"))
    torchdevice.use("flaky")  # it is available: the choice is accepted
    with pytest.raises(BackendUnavailableError, match="flaky exploded in memory") as info:
        torchdevice.current_backend()
    return info.value


def test_the_error_does_not_list_the_failed_backend_as_available(failed_by_name):
    assert "flaky" not in failed_by_name.available and "cpu" in failed_by_name.available


def test_backends_report_the_failed_backend_unavailable_with_the_reason(failed_by_name):
    flaky = _record("flaky")
    assert not flaky.available and "flaky exploded in memory" in flaky.reason


def test_priority_one_outranks_priority_zero_registered_first(router_state):
    router_state.setenv("TORCHDEVICE_PRIORITY", "cpu=-5")  # cpu below both
    router_state.register(make_backend("lowchip", 0))
    router_state.register(make_backend("highchip", 1))
    assert torchdevice.current_backend() == "highchip"


def _bare_properties_backend(name, device_count=2):
    """A cpu-tensor backend whose devices report only a name and a size (every other field empty)."""
    backend = make_backend(name, 1, automatic=False, device_count=device_count)
    backend.device_properties = lambda index: DeviceProperties(name="barechip", total_memory=1 << 30, type="cpu")
    return backend


def test_empty_fields_are_filled_per_device(router_state):
    router_state.register(_bare_properties_backend("barea"))
    router_state.register(_bare_properties_backend("bareb"))
    torchdevice.use("barea")
    a0, a1 = router.active().properties(0), router.active().properties(1)
    torchdevice.use("bareb")
    b0 = router.active().properties(0)
    # the backend's tensors are cpu tensors: they live in host memory (CUDA's "integrated")
    assert (a0.is_integrated, a1.is_integrated, b0.is_integrated) == (1, 1, 1)
    # "stable and distinct per device here": the two devices of one backend, and the same-looking
    # device of two backends, are different devices
    assert len({a0.uuid, a1.uuid, b0.uuid}) == 3 and "" not in {a0.uuid, a1.uuid, b0.uuid}


CHIPS_PLUGIN = textwrap.dedent("""
    from torchdevice import Availability
    from torchdevice.cpu import CPUBackend

    class Spare(CPUBackend):
        name, device_type, priority = "sparechip", "cpu", -100

    class Down(CPUBackend):
        name, device_type, priority = "downchip", "cpu", -100

        def availability(self):
            return Availability(False, "no downchip card found")

    class Broken(CPUBackend):
        name, device_type, priority = "brokenchip", "cpu", -100

        def memory(self):
            raise RuntimeError("brokenchip's driver lost its memory table")

    spare, down, broken = Spare(), Down(), Broken()
""")


def _named_backend_error(tmp_path, name: str, then: str) -> dict:
    """The BackendUnavailableError of ``use(name)`` followed by ``then``, in a process where three
    entry-point backends are installed (one available, one unavailable, one failing to resolve)."""
    src, site = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    (src / "td_chips.py").write_text(CHIPS_PLUGIN)
    write_distribution(site, "three-chips", "1.0", {"torchdevice": {
        "sparechip": "td_chips:spare", "downchip": "td_chips:down", "brokenchip": "td_chips:broken"}},
        [src / "td_chips.py"])
    result = run_python(textwrap.dedent(f"""
        import json, torchdevice
        try:
            torchdevice.use({name!r})
            {then}
        except torchdevice.BackendUnavailableError as exc:
            print(json.dumps({{"reason": exc.reason, "available": exc.available}}))
    """), pythonpath=[site])
    assert result.returncode == 0, result
    return json.loads(result.stdout)


def test_unavailable_entry_point_backend_by_name_lists_every_available_backend(tmp_path):
    error = _named_backend_error(tmp_path, "downchip", "pass")
    assert error["reason"] == "no downchip card found"
    assert {"cpu", "sparechip", "brokenchip"} <= set(error["available"]) and "downchip" not in error["available"]


def test_named_backend_failing_at_resolution_lists_every_available_backend(tmp_path):
    """Available when asked, then broken while resolving: the error names what else is available, every
    backend (not only the plugins a named selection had imported), and not the broken one."""
    error = _named_backend_error(tmp_path, "brokenchip", "torchdevice.memory_allocated()")
    assert "lost its memory table" in error["reason"], error
    assert {"cpu", "sparechip"} <= set(error["available"]) and "brokenchip" not in error["available"], error
