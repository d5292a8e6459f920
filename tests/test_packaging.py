"""Packaging: the core and the five plugins as wheels and sdists, installed into a fresh venv.

What this proves, from built artifacts only (never this checkout):

* ``python -m build`` makes a wheel and an sdist of ``torchdevice`` and of each
  ``plugins/torchdevice-*`` (the wheel is built from the sdist, so the sdist is
  complete), with version 1.0.0 in lockstep, the ``torchdevice>=1.0,<2``
  requirement, the entry point in group ``torchdevice``, and MLX's
  platform-marked dependency;
* in a fresh venv, ``pip install --find-links dist 'torchdevice[mlx]'`` -- what a
  user types, the package index reachable (torch pinned to 2.13.0) -- installs
  *our* torchdevice, not the unrelated project of that name on PyPI (0.1.0-0.1.3
  there; our 1.0.0 sorts above it), and gives a ``torchdevice info --json``
  listing ``mlx`` found through its entry point, with its distribution and
  version, and ``torchdevice.use("mlx")`` reports MLX memory figures that move
  when MLX arrays are allocated; ``torchdevice[all]`` brings the other four. A
  stand-in for the unrelated 0.1.3 shows that pip prefers our wheels, and that the
  installation check fails where that project is installed instead;
* the sample third-party plugin ``examples/vendor-plugin`` (written against
  ``docs/plugins.md``) installs from its wheel, is discovered, is selected when
  its priority is highest (and not when ``TORCHDEVICE_PRIORITY`` lowers it),
  and its own tests -- the vendor kit from the installed wheel -- pass;
* ``docs/tutorial.md`` runs as written: its files and commands, extracted and run
  in order in an empty folder, build a plugin, pass the kit, build its wheel, and
  install it into a fresh venv where torchdevice selects it.

Slow (fresh venvs with torch and MLX, a few minutes): it runs under
``tox -e packaging`` (``TORCHDEVICE_PACKAGING_TESTS=1``) or when this file is
named on the pytest command line, and is skipped in the default test run.
"""
from __future__ import annotations

import email.parser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERSION = "1.0.0"
PYPI_UNRELATED = "0.1.3"  #: the highest release of the unrelated project named torchdevice on PyPI
PLUGINS = ("cuda", "mps", "mtia", "xpu", "mlx", "sim")
PROJECTS = {"torchdevice": ROOT, **{f"torchdevice-{p}": ROOT / "plugins" / f"torchdevice-{p}" for p in PLUGINS}}
VENDOR = ROOT / "examples" / "vendor-plugin"
ENV_FLAG = "TORCHDEVICE_PACKAGING_TESTS"


def _requested(config) -> bool:
    if os.environ.get(ENV_FLAG) == "1":
        return True
    return any(Path(str(arg).split("::")[0]).name == Path(__file__).name for arg in config.args)


@pytest.fixture(scope="module", autouse=True)
def _only_when_asked(request):
    if not _requested(request.config):
        pytest.skip(f"slow packaging test: run `tox -e packaging`, set {ENV_FLAG}=1, or name tests/test_packaging.py")


def _run(args, *, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"$ {' '.join(map(str, args))}\n[rc={proc.returncode}]\n{proc.stdout}\n{proc.stderr}")
    return proc


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHDEVICE_", "SIMCHIP_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _build(project: Path, outdir: Path) -> None:
    # --no-isolation: hatchling comes from this environment (no index needed for the build itself)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", outdir, project], env=_clean_env())


def _wheel(dist: Path, name: str, version: str = VERSION) -> Path:
    path = dist / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    assert path.exists(), f"no wheel {path.name} in {sorted(p.name for p in dist.iterdir())}"
    return path


def _metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        eps = next((n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")), None)
        meta = email.parser.Parser().parsestr(zf.read(info).decode())
        return meta, (zf.read(eps).decode() if eps else "")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda project: _build(project, out), PROJECTS.values()))
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh venv where ``pip install --find-links dist 'torchdevice[mlx]'`` ran as a user types it: no
    version pin, the package index reachable (torch, pluggy and MLX come from it, and so would PyPI's
    unrelated ``torchdevice`` 0.1.x if pip preferred it)."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", root / "venv"])
    bindir = root / "venv" / ("Scripts" if os.name == "nt" else "bin")
    constraints = root / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    env = _clean_env(PIP_CONSTRAINT=str(constraints), PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [bindir / "python", "-m", "pip", "install", "-q", "--no-compile"]  # no .pyc of torch: much faster
    _run([*pip, "--find-links", dist, "torchdevice[mlx]", "pytest>=7"], env=env, cwd=root)
    return bindir


def _installed_torchdevice(python, env, cwd) -> list[str]:
    """``[metadata version, torchdevice.__version__ (or '-'), torchdevice.__file__]`` as ``python`` sees them
    (run in ``cwd``: ``python -c`` imports from its working directory first, so never this checkout)."""
    proc = _run([python, "-c",
                 "import importlib.metadata as m, torchdevice as t; "
                 "print(m.version('torchdevice'), getattr(t, '__version__', '-'), t.__file__)"], env=env, cwd=cwd)
    return proc.stdout.split()


def _assert_ours(python, prefix: Path, env) -> None:
    """The torchdevice ``python`` imports is ours, from the built wheel, installed under ``prefix``."""
    dist_version, module_version, path = _installed_torchdevice(python, env, prefix)
    assert (dist_version, module_version) == (VERSION, VERSION), (
        f"torchdevice {dist_version} (module {module_version}) is installed at {path}, not ours ({VERSION}): "
        "pip took another distribution of that name (PyPI's unrelated torchdevice is 0.1.x)")
    assert Path(path).resolve().is_relative_to(prefix.resolve()), f"{path} is not under {prefix}"


def _info(bindir: Path, **env) -> dict:
    proc = _run([bindir / "torchdevice", "info", "--json"], env=_clean_env(**env), cwd=bindir)
    return json.loads(proc.stdout)


def _record(info: dict, name: str) -> dict:
    found = {b["name"]: b for b in info["backends"]}
    assert name in found, f"{name!r} not in torchdevice info: {sorted(found)}"
    return found[name]


# -- the artifacts -----------------------------------------------------------------------------------


def test_wheels_and_sdists_of_core_and_plugins(dist):
    from packaging.requirements import Requirement

    for name in PROJECTS:
        assert (dist / f"{name.replace('-', '_')}-{VERSION}.tar.gz").exists(), f"no sdist of {name}"
        meta, entry_points = _metadata(_wheel(dist, name))
        assert (meta["Name"], meta["Version"]) == (name, VERSION)
        if name == "torchdevice":
            extras = set(meta.get_all("Provides-Extra") or ())
            assert {*PLUGINS, "all"} <= extras
            continue
        plugin = name.split("-", 1)[1]
        (core,) = [r for r in map(Requirement, meta.get_all("Requires-Dist") or []) if r.name == "torchdevice"]
        assert core.specifier.contains(VERSION) and not core.specifier.contains(PYPI_UNRELATED), core
        assert "[torchdevice]" in entry_points and f"{plugin} = torchdevice_{plugin}:plugin" in entry_points
    meta, _ = _metadata(_wheel(dist, "torchdevice-mlx"))
    requires = {(r.name, tuple(sorted(r.extras)), str(r.marker)) for r in map(Requirement, meta.get_all("Requires-Dist"))}
    assert ("mlx", ("cpu",), 'sys_platform == "linux"') in requires
    assert ("mlx", (), 'sys_platform == "darwin"') in requires


# -- torchdevice[mlx] in a fresh venv ------------------------------------------------------------------


def test_fresh_venv_uses_the_built_wheels(venv):
    _assert_ours(venv / "python", venv.parent, _clean_env())
    proc = _run([venv / "python", "-c",
                 "import torch, torchdevice_mlx; print(torch.__version__, torchdevice_mlx.__file__)"],
                env=_clean_env(), cwd=venv)
    torch_version, mlx_file = proc.stdout.split()
    assert torch_version.startswith("2.13.0")
    assert Path(mlx_file).resolve().is_relative_to(venv.parent.resolve()), f"{mlx_file} is not in the fresh venv"


def _unrelated_wheel(folder: Path) -> Path:
    """A stand-in for PyPI's unrelated ``torchdevice`` 0.1.3: the same name, no plugins, no extras."""
    name = f"torchdevice-{PYPI_UNRELATED}"
    wheel = folder / f"{name}-py3-none-any.whl"
    files = {
        "torchdevice/__init__.py": "# Setup CUDA_VISIBLE_DEVICES (a stand-in for the unrelated project)\n",
        f"torchdevice-{PYPI_UNRELATED}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: torchdevice\nVersion: {PYPI_UNRELATED}\n",
        f"torchdevice-{PYPI_UNRELATED}.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = f"torchdevice-{PYPI_UNRELATED}.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(record, "".join(f"{path},,\n" for path in [*files, record]))
    return wheel


def _resolves_to(tmp_path, *find_links) -> tuple[str, str]:
    """What ``pip install --find-links ... 'torchdevice[mlx]'`` would install, offline (a dry run)."""
    report = tmp_path / "report.json"
    links = [arg for folder in find_links for arg in ("--find-links", folder)]
    _run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--no-index",
          *links, "--report", report, "torchdevice[mlx]"], env=_clean_env())
    (chosen,) = [item["metadata"] for item in json.loads(report.read_text())["install"]]
    return chosen["name"], chosen["version"]


def test_pip_prefers_our_wheels_to_the_unrelated_project(dist, tmp_path):
    # Offline, so that the answer does not depend on the network: the stand-in plays PyPI's 0.1.3.
    index = tmp_path / "index"
    index.mkdir()
    _unrelated_wheel(index)
    assert _resolves_to(tmp_path, index) == ("torchdevice", PYPI_UNRELATED)  # pip sees the stand-in
    assert _resolves_to(tmp_path, index, dist) == ("torchdevice", VERSION)


def test_the_installation_check_fails_on_the_unrelated_project(tmp_path):
    """Had pip taken PyPI's torchdevice, the check the fresh venv passes above would fail."""
    target = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", target,
          _unrelated_wheel(tmp_path)], env=_clean_env())
    with pytest.raises(AssertionError, match="not ours"):
        _assert_ours(sys.executable, target, _clean_env(PYTHONPATH=str(target)))


def test_zero_code_activation_from_the_installed_wheel(venv):
    code = ("import sys, torch; print(torch.zeros(1, device='cuda').device, "
            "any(m.startswith('torchdevice') for m in sys.modules))")
    on = _run([venv / "python", "-c", code], env=_clean_env(TORCHDEVICE_BACKEND="cpu"), cwd=venv)
    assert on.stdout.split() == ["cpu", "True"], on.stderr
    # not asked: the torch.backends entry point imports nothing, and "cuda" stays torch's own
    off = _run([venv / "python", "-c",
                "import sys, torch; print(any(m.startswith('torchdevice') for m in sys.modules))"],
               env=_clean_env(), cwd=venv)
    assert off.stdout.strip() == "False", off.stderr


def test_info_lists_mlx_through_its_entry_point(venv):
    info = _info(venv)
    mlx = _record(info, "mlx")
    assert (mlx["plugin"], mlx["distribution"], mlx["version"]) == ("mlx", "torchdevice-mlx", VERSION)
    assert mlx["available"] is True and mlx["device_type"] == "cpu"
    assert info["selected"] == "cpu" and not info["problems"]
    proc = _run([venv / "python", "-c",
                 "from importlib.metadata import entry_points; "
                 "print([ep.value for ep in entry_points(group='torchdevice') if ep.name == 'mlx'])"],
                env=_clean_env(), cwd=venv)
    assert proc.stdout.strip() == "['torchdevice_mlx:plugin']"


def test_use_mlx_reports_moving_mlx_memory(venv):
    script = (
        "import mlx.core as mx, torchdevice\n"
        "torchdevice.use('mlx')\n"
        "assert torchdevice.current_backend() == 'mlx'\n"
        "before = torchdevice.memory_allocated()\n"
        "a = mx.zeros((8 << 20,)); mx.eval(a)\n"
        "during = torchdevice.memory_allocated()\n"
        "peak = torchdevice.max_memory_allocated()\n"
        "del a\n"
        "after = torchdevice.memory_allocated()\n"
        "print(before, during, peak, after)\n"
    )
    proc = _run([venv / "python", "-c", script], env=_clean_env(), cwd=venv)
    before, during, peak, after = map(int, proc.stdout.split())
    assert during - before >= 32 << 20 and peak >= during and during - after >= 32 << 20


_NUMPY_REQUIRERS = (
    "import importlib.metadata as m, json\n"
    "print(json.dumps({d.metadata['Name']: d.requires or [] for d in m.distributions()}))\n"
)


def test_numpy_comes_only_from_the_mlx_plugins_declaration(venv):
    """The MLX bridge imports numpy: the venv has it because torchdevice-mlx declares it, and for no other reason
    (no other installed distribution requires it, and the venv fixture does not install it)."""
    from packaging.requirements import Requirement

    proc = _run([venv / "python", "-c", _NUMPY_REQUIRERS], env=_clean_env(), cwd=venv)
    requirers = sorted(name for name, requires in json.loads(proc.stdout).items()
                       for r in map(Requirement, requires)
                       if r.name == "numpy" and (r.marker is None or r.marker.evaluate({"extra": ""})))
    assert requirers == ["torchdevice-mlx"], requirers
    _run([venv / "python", "-c", "import numpy"], env=_clean_env(), cwd=venv)


def test_a_program_runs_on_mlx_and_reads_a_value_back(venv, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(
        "import torch\n"
        "x = torch.arange(6.0, device='cuda').reshape(2, 3)\n"
        "y = (x @ x.T).sum()\n"
        "print(type(x).__name__, y.item(), x.tolist()[1])\n"
    )
    proc = _run([venv / "torchdevice", "run", "--backend", "mlx", program], env=_clean_env(), cwd=tmp_path)
    assert proc.stdout.split() == ["MLXTensor", "83.0", "[3.0,", "4.0,", "5.0]"], proc.stdout


def test_sim_from_its_wheel_builds_and_runs_a_program_on_its_own_device_type(venv, dist, tmp_path):
    """``pip install 'torchdevice[sim]'`` as the README says; the first use builds sim's C++ extension
    from the installed wheel's source (a cache of its own here), and a CUDA program runs on ``sim``."""
    _run([venv / "python", "-m", "pip", "install", "-q", "--no-compile", "--find-links", dist, "torchdevice[sim]"],
         env=_clean_env(), cwd=venv)
    program = tmp_path / "on_sim.py"
    program.write_text(
        "import torch\n"
        "x = torch.arange(6.0, device='cuda:1').reshape(2, 3)\n"
        "print(x.device, (x @ x.T).sum().item(), torch.cuda.memory_allocated(1) > 0)\n"
    )
    env = {**_clean_env(), "TORCHDEVICE_SIM_CACHE": str(tmp_path / "sim-cache")}
    proc = _run([venv / "torchdevice", "run", "--backend", "sim", program], env=env, cwd=tmp_path)
    assert proc.stdout.split() == ["sim:1", "83.0", "True"], proc.stdout + proc.stderr


def test_all_extra_brings_every_plugin(venv, dist):
    _run([venv / "python", "-m", "pip", "install", "-q", "--no-compile", "--find-links", dist, "torchdevice[all]"],
         env=_clean_env(), cwd=venv)
    info = _info(venv)
    for plugin in PLUGINS:
        record = _record(info, plugin)
        assert (record["distribution"], record["version"]) == (f"torchdevice-{plugin}", VERSION)
        assert record["reason"], record
    for plugin in ("cuda", "mps", "mtia", "xpu"):
        assert _record(info, plugin)["available"] is False  # torch 2.13.0+cpu
    assert info["selected"] == "cpu"


# -- a third-party plugin ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vendor(venv, dist, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vendor-dist")
    _build(VENDOR, out)
    _run([venv / "python", "-m", "pip", "install", "-q", "--no-compile", "--find-links", out,
          "--find-links", dist, "torchdevice-simchip"], env=_clean_env(), cwd=venv)
    return out


def test_vendor_plugin_is_discovered_and_wins_on_priority(vendor, venv):
    runs = {
        "default": {},
        "lowered": {"TORCHDEVICE_PRIORITY": "simchip=-1"},
        "raised": {"SIMCHIP_PRIORITY": "200", "TORCHDEVICE_PRIORITY": "mlx=300"},
        "blocked": {"TORCHDEVICE_DISABLE_PLUGINS": "simchip"},
    }
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(runs, pool.map(lambda env: _info(venv, **env), runs.values())))
    info, lowered, raised, blocked = (results[k] for k in runs)
    simchip = _record(info, "simchip")
    assert (simchip["plugin"], simchip["distribution"], simchip["version"]) == ("simchip", "torchdevice-simchip", "1.0.0")
    assert simchip["available"] and simchip["priority"] == 50
    assert info["selected"] == "simchip"  # the highest available automatic priority here (mlx is on request)
    assert lowered["selected"] == "cpu"
    # mlx=300 does not make CPU-only MLX automatic: the highest *automatic* backend wins
    assert raised["selected"] == "simchip" and _record(raised, "simchip")["priority"] == 200
    assert "simchip" not in {b["name"] for b in blocked["backends"]} and blocked["selected"] == "cpu"


def test_vendor_plugin_tests_pass_with_the_installed_kit(vendor, venv, tmp_path):
    tests = tmp_path / "tests"
    shutil.copytree(VENDOR / "tests", tests)
    _run([venv / "pytest", "-q", "-p", "no:cacheprovider", tests], env=_clean_env(), cwd=tmp_path)


# -- the tutorial ------------------------------------------------------------------------------------

TUTORIAL = ROOT / "docs" / "tutorial.md"
_STEP = re.compile(r"<!-- tutorial: (?:run|file (\S+)) -->\n```\w*\n(.*?)\n```", re.DOTALL)


def tutorial_script(text: str) -> str:
    """``docs/tutorial.md`` as one bash script: its files written and its commands run, in document order."""
    lines = ["set -euxo pipefail"]
    for match in _STEP.finditer(text):
        path, body = match.groups()
        if path is None:
            lines.append(body)
            continue
        assert "TUTORIAL_EOF" not in body
        lines += [f'mkdir -p "$(dirname {shlex.quote(path)})"', f"cat > {shlex.quote(path)} <<'TUTORIAL_EOF'", body,
                  "TUTORIAL_EOF"]
    return "\n".join(lines) + "\n"


def test_tutorial_script_has_every_step():
    script = tutorial_script(TUTORIAL.read_text())
    for needle in ("mkdir torchdevice-toychip", "cat > pyproject.toml", "cat > torchdevice_toychip/__init__.py",
                   "cat > tests/test_toychip.py", 'pip wheel --no-deps --wheel-dir ../wheels "$CORE"', "pytest -q",
                   "python -m build", "../try-toychip/bin/pip install --find-links ../wheels dist/"):
        assert needle in script, needle


def test_tutorial_from_an_empty_folder_to_a_tested_wheel(tmp_path):
    """Run docs/tutorial.md as written (publishing excepted), in an empty folder."""
    (tmp_path / "tutorial.sh").write_text(tutorial_script(TUTORIAL.read_text()))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    work = tmp_path / "work"
    work.mkdir()
    env = _clean_env(CORE=str(ROOT), PIP_CONSTRAINT=str(constraints), PIP_DISABLE_PIP_VERSION_CHECK="1",
                     PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    out = _run(["bash", tmp_path / "tutorial.sh"], cwd=work, env=env, timeout=1800).stdout
    assert out.count("[ok] behaviour:") == 2 and "[FAIL]" not in out, out  # the kit, in development and on the wheel
    rows = [line.split() for line in out.splitlines() if line.startswith("toychip ") and "torchdevice-toychip" in line]
    assert len(rows) == 2, out
    for row in rows:
        assert row[1:4] == ["torchdevice-toychip", "1.0.0", "cpu"] and "*" in row, row
    assert re.search(r"^\d+ passed", out, re.MULTILINE), out
    project = work / "torchdevice-toychip"
    assert (project / "dist" / "torchdevice_toychip-1.0.0-py3-none-any.whl").exists()
    assert (project / "dist" / "torchdevice_toychip-1.0.0.tar.gz").exists()
    try_env = work / "try-toychip"
    _assert_ours(try_env / "bin" / "python", try_env, _clean_env())
    proc = _run([try_env / "bin" / "python", "-c", "import torchdevice_toychip as t; print(t.__file__)"],
                env=_clean_env(), cwd=work)
    assert Path(proc.stdout.strip()).resolve().is_relative_to(try_env.resolve()), "the wheel was not what ran"
