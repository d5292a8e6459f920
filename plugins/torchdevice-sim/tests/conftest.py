"""Fixtures of the sim tests: sim loaded once for the session (skipped where it cannot be built);
translation onto it in a sandbox; programs in fresh processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice import router
from torchdevice.testing import router_sandbox

PROGRAMS = Path(__file__).with_name("programs")
REPO = Path(__file__).resolve().parents[3]
TIMEOUT = 240


@pytest.fixture(scope="session")
def sim():
    """``torch.sim``, loaded (the extension is built on first use, then cached); the test is skipped
    where sim is unavailable."""
    from torchdevice_sim.backend import SimBackend

    availability = SimBackend().availability()
    if not availability.available:
        pytest.skip(f"sim is unavailable here: {availability.reason}")
    import torchdevice_sim

    return torchdevice_sim.load()


@pytest.fixture
def synced(sim):
    """Every device idle before and after the test, so tests do not see each other's queued work."""
    for index in range(sim.device_count()):
        sim.synchronize(index)
    yield sim
    for index in range(sim.device_count()):
        sim.synchronize(index)
    sim.set_device(0)


@pytest.fixture
def checked(synced):
    """sim with the race checker on for the test (every queue idle before), off again after."""
    import torchdevice_sim

    was = torchdevice_sim.set_racecheck(True)
    try:
        yield synced
    finally:
        torchdevice_sim.set_racecheck(was)


@pytest.fixture
def on_sim(synced):
    """Translation onto sim: ``torchdevice.use("sim")`` and ``patched()``, undone afterwards."""
    with router_sandbox(), torchdevice.use("sim"), torchdevice.patched():
        yield router.active()
    assert torch.device("cuda").type == "cuda"  # translation is off again


class Runner:
    """Programs in fresh processes (a test's translation must not leak into the next test): the ``runner`` fixture."""

    programs = PROGRAMS
    repo = REPO

    @staticmethod
    def run(args: list[str], backend: str | None = None) -> subprocess.CompletedProcess:
        return run(args, backend)

    @staticmethod
    def torchrun(args: list[str], backend: str | None = None) -> subprocess.CompletedProcess:
        return torchrun(args, backend)


@pytest.fixture
def runner(sim) -> Runner:
    return Runner()


def run(args: list[str], backend: str | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python args...`` in a fresh process (TORCHDEVICE_BACKEND=backend when given); fails the test on error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_BACKEND")}
    if backend is not None:
        env["TORCHDEVICE_BACKEND"] = backend
    env["PYTHONFAULTHANDLER"] = "1"  # a hung program dumps every thread's stack on the SIGABRT below
    with subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            stdout, stderr = _stacks_of_a_hung_group(process)
            pytest.fail(f"{' '.join(args)} hung for {TIMEOUT} s; every process's threads at that moment:\n"
                        f"{stdout[-3000:]}\n{stderr[-20000:]}")
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done


def _stacks_of_a_hung_group(process: subprocess.Popen) -> tuple[str, str]:
    """SIGABRT to the program's process group (torchrun and its ranks: faulthandler prints each one's
    threads), then SIGKILL whatever is left; the output collected."""
    for sig in (signal.SIGABRT, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            continue
    return process.communicate()


def torchrun(args: list[str], backend: str | None = None) -> subprocess.CompletedProcess:
    """Two ranks on this machine, as ``torchrun --standalone --nproc-per-node 2 args...``."""
    return run(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args], backend)


# -- nn.DataParallel, natively and translated (the data_parallel_check fixture) ----------------------------


def _dp_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def check_data_parallel(device: str) -> None:
    """Forward and backward of DataParallel over devices 0 and 1 of ``device``'s type: the output is the CPU
    model's on the whole batch, each gradient the sum of the CPU gradients of the two halves (DataParallel
    adds the replicas' gradients, in device order)."""
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    reference, model = _dp_model(), _dp_model()
    parallel = torch.nn.DataParallel(model.to(device), device_ids=[0, 1])
    out = parallel(x.to(device))
    assert out.device.index == 0
    assert torch.equal(out.cpu(), reference(x))
    out.square().sum().backward()
    halves = []
    for part in (x[:3], x[3:]):
        reference.zero_grad()
        reference(part).square().sum().backward()
        halves.append([p.grad.clone() for p in reference.parameters()])
    for param, first, second in zip(model.parameters(), *halves):
        assert param.grad.device == out.device and torch.equal(param.grad.cpu(), first + second)


@pytest.fixture
def data_parallel_check():
    return check_data_parallel
