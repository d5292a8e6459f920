"""Shared test helpers (importable as ``helpers``: pyproject puts ``tests/`` on ``sys.path``).

* :func:`write_distribution` -- make a directory look like a site-packages
  with one installed distribution: its modules plus a ``NAME-VERSION.dist-info``
  holding ``METADATA`` and ``entry_points.txt``. Put the directory on
  ``PYTHONPATH`` of a subprocess and ``importlib.metadata`` discovers the entry
  points exactly as it does for a pip-installed package, no pip needed.
* :func:`run_torchdevice` / :func:`run_python` -- run the real CLI or a Python
  snippet in a clean subprocess (``TORCHDEVICE_*`` variables removed unless given).
* :func:`run_concurrently` -- run several such subprocesses at once (each one
  pays ``import torch``, about 2-3 s on the reference machine).
* :class:`FakeBackend` -- an in-process backend with a chosen name, priority,
  availability and device count, running on the real CPU operations, for
  selection tests through :func:`torchdevice.plugins.register`.
* :func:`write_files` and :class:`FakeClock` -- fake sysfs/procfs trees and a fake
  ``time`` for :mod:`torchdevice.host`'s readers (the ``sysfs`` and ``clock`` fixtures
  of ``conftest.py`` use them).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

FIXTURES = Path(__file__).parent / "fixtures"
PLUGIN_FIXTURES = FIXTURES / "plugins"


# -- fake installed distributions ------------------------------------------------------


#: Queries answered from a host reading (a clock, a thermal sensor, RAPL energy counters): where the host
#: exposes none they raise SensorUnavailableError -- "not readable here", as CUDA raises without NVML --
#: which is neither a refusal nor a number.
HOST_SENSOR_QUERIES = frozenset({"clock_rate", "temperature", "power_draw"})


def host_backends() -> list[str]:
    """The host backends this machine runs: cpu, and mlx where it is available."""
    from torchdevice import router

    names = ["cpu"]
    record = router.discover().get("mlx")
    if record is not None and record.available:
        names.append("mlx")
    return names


@contextlib.contextmanager
def device_translation_onto_meta() -> Iterator:
    """Device translation alone (``devices.install``, nothing else patched) onto a fake 2-device ``meta``
    target that every source family maps to; yields the target, and restores torch after."""
    from torchdevice import devices, router, translate
    from torchdevice._patching import Patcher

    translate.unpatch()
    target = router.Target("fake-meta", "meta", 2, None, None, None, None,
                           sources=frozenset({"cuda", "mps", "xpu", "mtia"}))
    patcher = Patcher()
    devices.install(patcher, target)
    try:
        yield target
    finally:
        patcher.restore()
        devices.uninstall()


def load_file(name: str, path: Path):
    """The Python file ``path`` (a script, a program of the tests) imported as a module named ``name``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_distribution(
    site: Path,
    name: str,
    version: str,
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    modules: Sequence[Path] = (),
) -> Path:
    """Write an installed distribution ``name==version`` into directory ``site``; return its dist-info.

    ``entry_points`` maps a group to ``{entry-point name: "module:attr"}``,
    e.g. ``{"torchdevice": {"fastchip": "td_fastchip:plugin"}}``. ``modules``
    are source files copied next to the dist-info (importable once ``site``
    is on ``sys.path``).
    """
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    normalized = re.sub(r"[-_.]+", "_", name).lower()
    dist_info = site / f"{normalized}-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: torchdevice test fixture\n"
    )
    lines = []
    for group, eps in (entry_points or {}).items():
        lines.append(f"[{group}]")
        lines += [f"{ep_name} = {target}" for ep_name, target in eps.items()]
        lines.append("")
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    (dist_info / "INSTALLER").write_text("torchdevice-tests\n")
    copied = []
    for module in modules:
        module = Path(module)
        shutil.copy(module, site / module.name)
        copied.append(module.name)
    (dist_info / "RECORD").write_text(
        "".join(f"{f},,\n" for f in copied) + "".join(
            f"{dist_info.name}/{f},,\n" for f in ("METADATA", "entry_points.txt", "INSTALLER", "RECORD")
        )
    )
    return dist_info


def write_plugin(site: Path, dist: str, version: str, entry_name: str, module: str, attr: str = "plugin") -> Path:
    """Install fixture module ``tests/fixtures/plugins/<module>.py`` as distribution ``dist``.

    Its entry point ``entry_name = module:attr`` is in group ``torchdevice``.
    """
    return write_distribution(
        site, dist, version, {"torchdevice": {entry_name: f"{module}:{attr}"}}, [PLUGIN_FIXTURES / f"{module}.py"]
    )


# -- fake host trees and clock (torchdevice.host) ------------------------------------------


#: a real RAPL ``max_energy_range_uj``
RAPL_RANGE = 262_143_328_850


def write_files(root: Path, files: Mapping[str, str]) -> None:
    """Write ``{relative path: text}`` under ``root``, making the directories."""
    for rel, text in files.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


class FakeClock:
    """``time.monotonic``/``time.sleep`` for :mod:`torchdevice.host`: sleeping advances the clock (by ``rate``
    times the time asked for) and runs ``during_sleep`` (the counters moving meanwhile)."""

    def __init__(self):
        self.now, self.rate = 1000.0, 1.0
        self.slept: list[float] = []
        self.during_sleep = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds * self.rate
        if self.during_sleep is not None:
            self.during_sleep()


# -- subprocesses -----------------------------------------------------------------------


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self):
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"not JSON ({exc}); stdout:\n{self.stdout}\nstderr:\n{self.stderr}") from None

    def __str__(self) -> str:
        return f"$ {' '.join(self.args)}\n[rc={self.returncode}]\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


#: the entry points this repository ships; any other installed one is a third party's
OWN_ENTRY_POINTS = frozenset({"cuda", "mps", "mtia", "xpu", "mlx", "sim"})


def foreign_entry_points() -> list[str]:
    """Installed ``torchdevice`` entry points that are not this repository's (a vendor plugin
    someone installed): subprocess tests disable them, so automatic selection is ours."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group="torchdevice")} - OWN_ENTRY_POINTS)


def _outranking_cpu() -> tuple[str, ...]:
    """Backends that automatic selection would pick over the built-in cpu backend here: a real
    GPU's (cuda on an NVIDIA machine), a third party's, a simulated one (docs/testing.md). Read by
    discovery in this process with no ``TORCHDEVICE_*`` variable set, so declared priorities and
    every installed plugin count, whatever the environment pytest was started from."""
    from torchdevice import router

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("TORCHDEVICE_")}
    try:
        router.invalidate()
        records = router.discover()
        cpu = records["cpu"].priority or 0
        return tuple(sorted(
            r.name for r in records.values()
            if r.name != "cpu" and r.available and r.automatic and r.device_type is not None
            and r.priority is not None and r.priority >= cpu
        ))
    finally:
        os.environ.update(saved)
        router.invalidate()


#: The backends that would outrank cpu in automatic selection on this machine (empty on a machine
#: without accelerators and without third-party plugins: the reference machine).
OUTRANKING_CPU = _outranking_cpu()
#: whether automatic selection would pick something other than cpu here (a GPU runner)
ACCELERATOR_PRESENT = bool(OUTRANKING_CPU)
#: The suite's expectations are those of a machine without accelerators: there, automatic
#: selection picks the built-in CPU backend. Where something outranks it (a GPU runner), this
#: ranks those backends below cpu (priority 0) so automatic selection picks cpu too, while a
#: test's own fake backend (priority > 0) still wins; tests of an accelerator name it (its
#: plugin's tests, the kit, scripts/gpu_check.sh). Empty where nothing outranks cpu.
CPU_FIRST = {"TORCHDEVICE_PRIORITY": ",".join(f"{name}=-1" for name in OUTRANKING_CPU)} if OUTRANKING_CPU else {}


def _native_cuda_available() -> bool:
    """``torch.cuda.is_available()`` as torch alone answers it (translation off)."""
    import torch

    from torchdevice import translate

    if not translate.is_patched():
        return torch.cuda.is_available()
    translate.unpatch()  # a process started with TORCHDEVICE_BACKEND set: ask torch untranslated
    try:
        return torch.cuda.is_available()
    finally:
        translate.patch()


#: torch's own answer on this machine (True on a GPU runner): tests of native behaviour compare
#: with it instead of assuming a CPU-only build
NATIVE_CUDA_AVAILABLE = _native_cuda_available()


def with_cpu_first(priority: str) -> str:
    """A test's own ``TORCHDEVICE_PRIORITY`` value, after the suite's pin (:data:`CPU_FIRST`), so
    it keeps automatic selection on the machine's expectations; the test's entries come last and
    win for the names they repeat."""
    pin = CPU_FIRST.get("TORCHDEVICE_PRIORITY")
    return f"{pin},{priority}" if pin else priority


def unset_env(monkeypatch, *names: str) -> None:
    """Unset each variable for the test and put its value back afterwards -- also when the test
    (an in-process ``torchdevice run``, which exports variables) sets one that was unset before:
    ``monkeypatch.delenv`` alone records nothing for a variable that is not set."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def clean_env(env: Mapping[str, str] | None = None, pythonpath: Sequence[Path] = ()) -> dict[str, str]:
    """``os.environ`` without any ``TORCHDEVICE_*`` variable, plus ``env``, with ``pythonpath``
    prepended; third-party plugins installed here are disabled unless ``env`` picks plugins, and
    where something outranks cpu automatic selection is pinned to cpu (:data:`CPU_FIRST`) unless
    ``env`` sets priorities or picks plugins itself."""
    result = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    foreign = foreign_entry_points()
    if foreign and not {"TORCHDEVICE_PLUGINS", "TORCHDEVICE_DISABLE_PLUGINS"} & set(env or {}):
        result["TORCHDEVICE_DISABLE_PLUGINS"] = ",".join(foreign)
    if not {"TORCHDEVICE_PRIORITY", "TORCHDEVICE_PLUGINS"} & set(env or {}):
        result.update(CPU_FIRST)
    paths = [str(p) for p in pythonpath]
    if result.get("PYTHONPATH"):
        paths.append(result["PYTHONPATH"])
    if paths:
        result["PYTHONPATH"] = os.pathsep.join(paths)
    result.update(env or {})
    return result


def torchdevice_script() -> str:
    """The ``torchdevice`` console script installed next to this interpreter."""
    bindir = Path(sys.executable).parent
    for candidate in (bindir / "torchdevice", bindir / "torchdevice.exe"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("torchdevice")
    if found is None:
        raise AssertionError(f"no torchdevice console script next to {sys.executable} or on PATH")
    return found


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(program: Path, *args: str, backend: str | None = "cpu", timeout: float = 150,
             cwd: Path | None = None) -> Result:
    """``torchrun --nproc-per-node 2 -m torchdevice run PROGRAM ARGS`` on loopback (``backend=None``:
    ``torchrun ... PROGRAM ARGS``, natively), time-limited; the whole process group is killed on a timeout."""
    import signal

    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    if backend is not None:
        env["TORCHDEVICE_BACKEND"] = backend
    env["PYTHONUNBUFFERED"] = "1"
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo on the loopback interface
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd += ["-m", "torchdevice", "run"] if backend is not None else []
    cmd += [str(program), *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish in {timeout} s:\n{out[-4000:]}") from None
    return Result(cmd, proc.returncode, out, "")


def run_command(args: Sequence[str], env=None, pythonpath=(), timeout: float = 120) -> Result:
    """Run ``args`` with :func:`clean_env` and capture its output."""
    args = [str(a) for a in args]
    proc = subprocess.run(
        args, env=clean_env(env, pythonpath), capture_output=True, text=True, timeout=timeout
    )
    return Result(args, proc.returncode, proc.stdout, proc.stderr)


def run_torchdevice(*args: str, env=None, pythonpath=(), timeout: float = 120) -> Result:
    """Run the real ``torchdevice`` console script."""
    return run_command([torchdevice_script(), *args], env, pythonpath, timeout)


def run_python(code: str, env=None, pythonpath=(), timeout: float = 120) -> Result:
    """Run ``python -c code`` with this interpreter."""
    return run_command([sys.executable, "-c", code], env, pythonpath, timeout)


def run_concurrently(jobs: Mapping[str, tuple], workers: int | None = None) -> dict[str, Result]:
    """Run ``{key: (function, args, kwargs)}`` in threads; return ``{key: Result}``."""
    workers = workers or max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(workers) as pool:
        futures = {key: pool.submit(fn, *args, **kwargs) for key, (fn, args, kwargs) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


# -- in-process fake backends --------------------------------------------------------------


def make_backend(name: str, priority: int, available: bool = True, reason: str = "fake backend for tests",
                 automatic: bool = True, device_count: int = 1, fail_in: str | None = None):
    """Return a backend plugin instance running on the real CPU operations.

    ``fail_in`` names a hook method (``"availability"``, ``"memory"``,
    ``"device_count"`` ...) that raises ``RuntimeError("<name> exploded in
    <method>")`` when called.
    """
    from torchdevice.backend import Availability
    from torchdevice.cpu import CPUBackend

    class FakeBackend(CPUBackend):
        description = "fake backend for tests"

        def availability(self):
            return Availability(available, reason, automatic)

        def device_count(self):
            return device_count

    backend = FakeBackend()
    backend.name = name
    backend.priority = priority
    if fail_in is not None:
        def explode(*args, **kwargs):
            raise RuntimeError(f"{name} exploded in {fail_in}")

        setattr(backend, fail_in, explode)
    return backend
