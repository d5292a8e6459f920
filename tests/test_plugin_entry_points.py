"""torchdevice.plugins.entry_points: the scan activation makes lists what importlib.metadata lists."""
from __future__ import annotations

import importlib.metadata

import pytest

from torchdevice import plugins

GROUPS = ("torchdevice", "torchdevice.integrations")


def _dist(site, name: str, version: str, entry_points: str | None) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def _listed(eps) -> list[tuple[str, str, str, str]]:
    return sorted((ep.group, ep.name, ep.value, ep.dist.version if ep.dist else "") for ep in eps)


@pytest.fixture
def sites(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    # shadowed: the first vendor_plugin on sys.path has no entry points, so importlib lists none of the second's
    _dist(first, "vendor_plugin", "1.0", None)
    _dist(second, "vendor_plugin", "2.0", "[torchdevice]\nshadowed = vendor_plugin:plugin\n")
    # one group of ours among others, and an integration
    _dist(first, "acme_accel", "0.3", "[console_scripts]\nacme = acme:main\n\n[torchdevice]\nacme = acme.td:plugin\n"
                                      "\n[torchdevice.integrations]\nacme-fw = acme.fw:plugin\n")
    # a group whose name only starts like ours, and no group of ours
    _dist(second, "other", "1.0", "[torchdevices]\nx = y:z\n\n[pytest11]\nother = other.plugin\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    monkeypatch.setattr(plugins, "_entry_point_cache", None)
    yield
    plugins._entry_point_cache = None


@pytest.mark.parametrize("group", GROUPS)
def test_the_scan_lists_what_importlib_metadata_lists(sites, group):
    expected = _listed(importlib.metadata.entry_points(group=group))
    assert _listed(plugins.entry_points(group=group)) == expected
    names = {name for _, name, _, _ in expected}
    assert "shadowed" not in names  # the check above is about these distributions, not an empty list
    assert ("acme" if group == "torchdevice" else "acme-fw") in names


def test_a_group_that_only_starts_like_ours_is_not_read(sites):
    assert not [ep for ep in plugins.entry_points(group="torchdevices")]
