"""Versions and pins: the core and the five plugins are released together, above the
unrelated ``torchdevice`` 0.1.x on PyPI, each plugin requiring a compatible core range; read from the
pyproject files and the packages, fast (the built wheels are checked by tests/test_packaging.py)."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
packaging = pytest.importorskip("packaging.requirements")
from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ("cuda", "mps", "mtia", "xpu", "mlx", "sim")
PYPI_UNRELATED = Version("0.1.3")  #: the highest release of the unrelated project named torchdevice on PyPI


def _project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def _core_requirement(project: dict) -> Requirement:
    found = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "torchdevice"]
    assert len(found) == 1, project["dependencies"]
    return found[0]


def _source_version(package_dir: Path) -> str:
    match = re.search(r'^__version__ = "([^"]+)"', (package_dir / "__init__.py").read_text(), re.MULTILINE)
    assert match, f"no __version__ in {package_dir}"
    return match.group(1)


CORE = _project(ROOT)
CORE_VERSION = Version(CORE["version"])


def test_core_version_sorts_above_the_unrelated_project_on_pypi():
    assert CORE_VERSION > PYPI_UNRELATED and CORE_VERSION.major >= 1
    assert _source_version(ROOT / "torchdevice") == CORE["version"]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_plugins_are_released_with_the_core_and_require_a_compatible_range(plugin):
    path = ROOT / "plugins" / f"torchdevice-{plugin}"
    project = _project(path)
    assert project["version"] == CORE["version"], "core and plugins are released together"
    assert _source_version(path / f"torchdevice_{plugin}") == project["version"]
    spec = _core_requirement(project).specifier
    assert spec.contains(CORE["version"]), spec
    assert not spec.contains(str(PYPI_UNRELATED)) and not spec.contains("0.1.0"), "the unrelated project must never satisfy it"
    assert not spec.contains(f"{CORE_VERSION.major + 1}.0"), "a next major core is not assumed compatible"
    extras = {name: [Requirement(r) for r in reqs] for name, reqs in CORE["optional-dependencies"].items()}
    for extra in (plugin, "all"):
        (req,) = [r for r in extras[extra] if r.name == f"torchdevice-{plugin}"]
        assert req.specifier.contains(project["version"]), (extra, req)


def test_sample_plugin_and_docs_require_the_same_core_range():
    vendor = _core_requirement(_project(ROOT / "examples" / "vendor-plugin"))
    plugin = _core_requirement(_project(ROOT / "plugins" / "torchdevice-mlx"))
    assert vendor.specifier == plugin.specifier
    for doc in ("docs/plugins.md", "docs/tutorial.md"):
        text = (ROOT / doc).read_text()
        pins = re.findall(r'"(torchdevice(?:[<>=!~][^"]*))"', text)
        assert pins, f"{doc} shows no core requirement"
        for pin in pins:
            assert Requirement(pin).specifier == vendor.specifier, f"{doc}: {pin}"


def test_installed_distributions_match_the_checkout():
    """Guards against stale editable installs: `torchdevice info` reports installed metadata."""
    from importlib.metadata import PackageNotFoundError, version

    for dist, module, path in [("torchdevice", "torchdevice", ROOT)] + [
        (f"torchdevice-{p}", f"torchdevice_{p}", ROOT / "plugins" / f"torchdevice-{p}") for p in PLUGINS
    ]:
        try:
            installed = version(dist)
        except PackageNotFoundError:
            continue
        loaded = importlib.import_module(module)
        if Path(loaded.__file__).resolve().is_relative_to(path.resolve()):
            assert installed == _project(path)["version"], (
                f"{dist} {installed} is installed but this checkout is {_project(path)['version']}: "
                f"reinstall it (pip install -e {path.relative_to(ROOT) if path != ROOT else '.'})")


def _torch_requirement(project: dict) -> Requirement:
    found = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "torch"]
    assert len(found) == 1, project["dependencies"]
    return found[0]


def _pinned(constraints: str) -> Version:
    found = re.search(r"^torch==(\S+)", (ROOT / constraints).read_text(), re.MULTILINE)
    assert found, f"{constraints} pins no torch"
    return Version(found.group(1))


def test_the_declared_torch_range_is_the_tested_range():
    """The core and every plugin declare one torch range; its lower end is what `tox -e torch-lower` pins,
    and the torch `tox -e torch-newest` pins (and constraints.txt's, CI's) lie inside it (docs/testing.md,
    "The declared torch range")."""
    ranges = {"torchdevice": _torch_requirement(_project(ROOT)).specifier}
    for plugin in PLUGINS:
        ranges[f"torchdevice-{plugin}"] = _torch_requirement(_project(ROOT / "plugins" / f"torchdevice-{plugin}")).specifier
    assert len(set(map(str, ranges.values()))) == 1, ranges
    declared = ranges["torchdevice"]
    lower = [s for s in declared if s.operator == ">="]
    assert len(lower) == 1 and any(s.operator == "<" for s in declared), f"torch{declared}: give both ends"
    assert _pinned("constraints-torch-lower.txt") == Version(lower[0].version)
    for constraints in ("constraints-torch-newest.txt", "constraints.txt"):
        assert _pinned(constraints) in declared, (constraints, str(declared))
