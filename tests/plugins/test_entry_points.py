"""torchdevice.plugins.entry_points: the scan activation makes lists what importlib.metadata lists."""
from __future__ import annotations

import importlib.metadata

import pytest
from helpers import write_distribution

from torchdevice import plugins

GROUPS = ("torchdevice", "torchdevice.integrations")


def _listed(eps) -> list[tuple[str, str, str, str]]:
    return sorted((ep.group, ep.name, ep.value, ep.dist.version if ep.dist else "") for ep in eps)


@pytest.fixture
def sites(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    # shadowed: the first vendor_plugin on sys.path has no entry points, so importlib lists none of the second's
    write_distribution(first, "vendor_plugin", "1.0")
    write_distribution(second, "vendor_plugin", "2.0", {"torchdevice": {"shadowed": "vendor_plugin:plugin"}})
    # one group of ours among others, and an integration
    write_distribution(first, "acme_accel", "0.3", {"console_scripts": {"acme": "acme:main"},
                                                    "torchdevice": {"acme": "acme.td:plugin"},
                                                    "torchdevice.integrations": {"acme-fw": "acme.fw:plugin"}})
    # a group whose name only starts like ours, and no group of ours
    write_distribution(second, "other", "1.0", {"torchdevices": {"x": "y:z"}, "pytest11": {"other": "other.plugin"}})
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    monkeypatch.setattr(plugins, "_entry_point_cache", None)  # scanned afresh (the old scan is put back after)


@pytest.mark.parametrize("group", GROUPS)
def test_the_scan_lists_what_importlib_metadata_lists(sites, group):
    expected = _listed(importlib.metadata.entry_points(group=group))
    assert _listed(plugins.entry_points(group=group)) == expected
    names = {name for _, name, _, _ in expected}
    assert "shadowed" not in names  # the check above is about these distributions, not an empty list
    assert ("acme" if group == "torchdevice" else "acme-fw") in names


def test_a_group_that_only_starts_like_ours_is_not_read(sites):
    assert not [ep for ep in plugins.entry_points(group="torchdevices")]
