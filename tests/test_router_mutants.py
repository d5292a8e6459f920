"""The router where mutation testing found the suite blind (docs/testing.md, issue 15).

* A plugin put on pluggy's plugin manager directly (not through ``torchdevice.plugins.register``,
  so without distribution information) still declares its backend: it is listed, with no
  distribution and no version, rather than breaking discovery.
* A backend asked for by name (``torchdevice.use``) that fails while resolving must not be reported
  as available afterwards -- neither in the error's "available here" list nor in
  ``torchdevice.backends()`` -- as it is not when automatic selection skips it
  (``tests/test_router.py::test_plugin_raising_at_resolution_falls_back_to_the_next``). The
  failure is kept until the next ``use()``/invalidation, whatever rebuilds the records.
"""
from __future__ import annotations

import pytest
from helpers import make_backend

import torchdevice
from torchdevice import plugins, router
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
