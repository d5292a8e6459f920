"""Only the source family claims a device; host backends get N logical devices.

* The *source family* is the device type the program is written for: ``cuda``
  unless ``TORCHDEVICE_SOURCE`` / ``torchdevice run --source`` /
  ``torchdevice.patch(source=...)`` names another, or ``torchdevice run``
  infers it from the script. Only ``torch.<source>.is_available()`` is True;
  the other families still translate every other function.
* ``TORCHDEVICE_DEVICE_COUNT=N`` / ``torchdevice run --devices N`` gives a host
  backend N logical devices in the process and its children.
"""
from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
import torch
import torch.distributed as dist
from helpers import run_concurrently, run_python, run_torchdevice

import torchdevice
from torchdevice import namespaces, router, translate
from torchdevice._patching import Patcher
from torchdevice.errors import ConfigError, InvalidDeviceError
from torchdevice.run import infer_source

FAMILIES = ("cuda", "mps", "xpu", "mtia")


def _claims() -> dict:
    return {ns: (getattr(torch, ns).is_available(), getattr(torch, ns).device_count()) for ns in FAMILIES}


def _only(source: str, count: int = 1) -> dict:
    return {ns: (True, count) if ns == source else (False, 0) for ns in FAMILIES}


@pytest.fixture
def unpatched(on_target, restore_rng):
    translate.unpatch()
    yield
    translate.unpatch()


# -- the source family, in process ---------------------------------------------------------------------


def test_cuda_is_the_default_source_family(unpatched, target):
    assert translate.patch().source == "cuda"
    assert _claims() == _only("cuda", target.count)
    assert torch.backends.mps.is_available() is False


@pytest.mark.parametrize("source", ["mps", "xpu", "mtia", "cuda"])
def test_env_chooses_the_source_family(unpatched, target, monkeypatch, source):
    monkeypatch.setenv("TORCHDEVICE_SOURCE", source.upper())  # any case
    assert translate.patch().source == source
    assert _claims() == _only(source, target.count)
    assert torch.backends.mps.is_available() is (source == "mps")


def test_patch_source_option_repatches_and_keeps_other_options(unpatched, target):
    translate.patch(source="xpu")
    assert _claims() == _only("xpu", target.count)
    assert translate.patch().source == "xpu"  # no option: idempotent, the current source stays
    translate.patch(report_available=False)
    assert translate.target().source == "xpu"  # re-patched for report_available, the source kept
    # report_available off: an accelerator-less target claims no device; one with devices of its own keeps them
    assert _claims() == (_only("xpu", target.count) if target.indexed else {ns: (False, 0) for ns in FAMILIES})
    translate.patch(source="mps")
    assert translate.target().report_available is False  # and the other way round
    translate.patch(report_available=True)
    assert _claims() == _only("mps", target.count)


def test_the_other_families_still_translate_when_called(unpatched, target):
    translate.patch()  # source cuda
    assert torch.xpu.is_available() is False
    torch.xpu.synchronize()
    assert torch.xpu.current_device() == 0
    assert torch.xpu.memory_allocated() == torch.cuda.memory_allocated()
    torch.mps.manual_seed(3)
    a = torch.rand(3, device="mps")
    torch.mps.manual_seed(3)
    assert torch.equal(a.cpu(), torch.rand(3, device="mps").cpu())
    assert torch.ones(1, device="xpu:0").device == target.device(0)
    with torch.mtia.device(0):
        assert torch.mtia.current_device() == 0


def test_bad_source_is_an_error_naming_the_value_and_the_valid_ones(unpatched, monkeypatch):
    with pytest.raises(ConfigError) as info:
        translate.patch(source="rocm")
    assert "'rocm'" in str(info.value) and all(f in str(info.value) for f in FAMILIES)
    assert not translate.is_patched()
    monkeypatch.setenv("TORCHDEVICE_SOURCE", "cuda:0")
    with pytest.raises(ValueError, match=r"TORCHDEVICE_SOURCE='cuda:0'.*cuda, mps, xpu, mtia"):
        translate.patch()
    assert not translate.is_patched()


def test_the_targets_own_namespace_stays_native(on_cpu):
    """On a cuda-typed target torch.cuda is torch's own; the fronted families do not claim a device."""
    target = translate.make_target()
    on_cuda = dataclasses.replace(target, device_type="cuda", device_count=1, sources=frozenset({"mps", "xpu", "mtia"}),
                                  report_available=True, source="cuda")
    cuda_before = dict(vars(torch.cuda))
    p = Patcher()
    namespaces.install(p, on_cuda)
    try:
        assert all(vars(torch.cuda)[k] is v for k, v in cuda_before.items())
        for ns in ("mps", "xpu", "mtia"):
            assert getattr(torch, ns).is_available() is False and getattr(torch, ns).device_count() == 0
    finally:
        p.restore()
    as_mps = on_cuda.translating(report_available=True, source="mps")
    p = Patcher()
    namespaces.install(p, as_mps)
    try:
        assert torch.mps.is_available() is True and torch.mps.device_count() == 1
        assert torch.backends.mps.is_available() is True
        assert torch.xpu.is_available() is False
    finally:
        p.restore()


def test_distributed_engines_follow_the_source_family(unpatched):
    translate.patch()
    assert dist.is_nccl_available() and dist.is_backend_available("nccl")
    assert dist.is_xccl_available() is _native_xccl()  # xpu's engine: torch's own answer
    translate.patch(source="xpu")
    assert dist.is_xccl_available() and dist.is_backend_available("xccl")
    assert dist.is_nccl_available() is _native_nccl()
    translate.patch(source="mps")
    assert dist.is_nccl_available() is _native_nccl()


def _native_nccl() -> bool:
    return dist.is_nccl_available.__torchdevice_wrapped__()


def _native_xccl() -> bool:
    return dist.is_xccl_available.__torchdevice_wrapped__()


def test_the_matrix_note_names_the_rule(on_cpu):
    active = router.active()
    for ns in ("cuda", "mps"):
        status, note = namespaces.status(active, ns, "is_available")
        assert f"{ns} is the source family" in note and "TORCHDEVICE_SOURCE" in note
        status, note = namespaces.status(active, ns, "device_count")
        assert "not the source family" in note


# -- inferring the source family from the script -----------------------------------------------------


@pytest.mark.parametrize(("code", "expected"), [
    ('import torch\ndevice = "mps" if torch.backends.mps.is_available() else "cpu"\n', "mps"),
    ("import torch\nx = torch.ones(2).to('xpu:0')\ntorch.xpu.synchronize()\n", "xpu"),
    ("import torch.distributed as d\nd.init_process_group('xccl')\n", "xpu"),
    ("import torch\nif torch.mtia.is_available():\n    pass\n", "mtia"),
    ("import torch\nx = torch.ones(2).cuda()\n", None),
    ('import torch\nd = "cuda" if torch.cuda.is_available() else "mps"\n', None),  # ambiguous: cuda
    ("import torch\nprint(torch.ones(2))\n", None),
    ("def f(:\n", None),
])
def test_infer_source(tmp_path, code, expected):
    script = tmp_path / "prog.py"
    script.write_text(code)
    assert infer_source(str(script))[0] == expected
    assert infer_source(str(tmp_path))[0] is None  # a directory: not inferred


# -- logical devices, in process ------------------------------------------------------------------------


@pytest.fixture
def devices(on_cpu, monkeypatch):
    def make(value: str | None, local_world_size: str | None = None):
        for var, v in (("TORCHDEVICE_DEVICE_COUNT", value), ("LOCAL_WORLD_SIZE", local_world_size)):
            if v is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, v)
        torchdevice.use("cpu")  # re-resolve with the new count

    yield make
    translate.unpatch()
    make(None)
    torchdevice.set_device(0)


def test_device_count_env_gives_n_logical_devices(devices, restore_rng):
    devices("3")
    assert torchdevice.device_count() == 3
    with torchdevice.patched():
        assert torch.cuda.device_count() == 3 and torch.cuda.is_available()
        torch.cuda.set_device(2)
        assert torch.cuda.current_device() == 2
        assert torch.ones(2, device="cuda:2").device == torch.device("cpu")
        stream = torch.cuda.Stream(device=1)
        assert stream.device_index == 1
        with torch.cuda.device(1):
            assert torch.cuda.current_stream().device_index == 1
        with pytest.raises(InvalidDeviceError):
            torch.ones(2, device="cuda:3")
        with pytest.raises(InvalidDeviceError):
            torch.cuda.set_device(3)
        with pytest.raises(InvalidDeviceError):
            torch.cuda.Stream(device=3)
        torch.cuda.set_device(0)


def test_device_count_env_wins_over_local_world_size_which_still_works(devices):
    devices(None, "4")
    assert torchdevice.device_count() == 4
    devices("2", "4")
    assert torchdevice.device_count() == 2
    devices(None, None)
    assert torchdevice.device_count() == 1


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_bad_device_count_is_an_error_naming_the_value(devices, bad):
    devices(bad)
    with pytest.raises(ConfigError) as info:
        torchdevice.device_count()
    assert f"TORCHDEVICE_DEVICE_COUNT={bad!r}" in str(info.value)


def test_mlx_gets_the_logical_devices_too(router_state, monkeypatch, restore_rng):
    pytest.importorskip("mlx.core")
    monkeypatch.setenv("TORCHDEVICE_DEVICE_COUNT", "2")
    try:
        torchdevice.use("mlx")
    except torchdevice.TorchDeviceError as exc:  # pragma: no cover - plugin not installed here
        pytest.skip(str(exc))
    try:
        assert torchdevice.device_count() == 2
        with torchdevice.patched():
            assert torch.cuda.device_count() == 2
            assert torch.cuda.Stream(device=1).device_index == 1
            torch.cuda.set_device(1)
            assert torch.ones(2, device="cuda:1").sum().item() == 2
            torch.cuda.set_device(0)
    finally:
        translate.unpatch()


# -- through `torchdevice run` and zero-code activation (subprocesses) -----------------------------------

PROBE = """\
import json, os, subprocess, sys
import torch
def claims():
    return {ns: [getattr(torch, ns).is_available(), getattr(torch, ns).device_count()]
            for ns in ("cuda", "mps", "xpu", "mtia")}
child = subprocess.run([sys.executable, "-c", "import json, torch; print(json.dumps("
                        "{ns: [getattr(torch, ns).is_available(), getattr(torch, ns).device_count()] "
                        "for ns in ('cuda', 'mps', 'xpu', 'mtia')}))"],
                       capture_output=True, text=True, check=True).stdout
print("PROBE " + json.dumps({"parent": claims(), "child": json.loads(child),
                             "mps_backend": torch.backends.mps.is_available(),
                             "env": os.environ.get("TORCHDEVICE_SOURCE")}))
"""

# written for Apple GPUs only: torchdevice run infers source mps
MPS_ONLY = """\
import json, torch
device = "mps" if torch.backends.mps.is_available() else "cpu"
x = torch.ones(2, device=device)
print("PROBE " + json.dumps({"device": device, "on": x.device.type, "count": torch.mps.device_count()}))
"""

SPAWN = """\
import json, torch
import torch.multiprocessing as mp

def work(rank, queue):
    torch.cuda.set_device(rank)
    t = torch.ones(2, device=f"cuda:{rank}") * rank
    s = torch.cuda.Stream(device=rank)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        total = t.sum().item()
    queue.put([rank, torch.cuda.current_device(), torch.cuda.device_count(), s.device_index, total])

if __name__ == "__main__":
    n = torch.cuda.device_count()
    torch.cuda.set_device(1)
    parent = [n, torch.cuda.current_device(), torch.ones(1, device="cuda:1").device.type,
              torch.cuda.Stream(device=1).device_index]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(work, args=(queue,), nprocs=n)
    print("PROBE " + json.dumps({"parent": parent, "children": sorted(queue.get() for _ in range(n))}))
"""


def _probe(result) -> dict:
    for line in result.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[6:])
    raise AssertionError(f"no PROBE line\n{result}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("source_family")
    probe, mps_only, spawn = root / "probe.py", root / "mps_only.py", root / "spawn.py"
    probe.write_text(PROBE)
    mps_only.write_text(MPS_ONLY)
    spawn.write_text(SPAWN)
    cpu = {"TORCHDEVICE_BACKEND": "cpu"}
    zero_code = textwrap.dedent("""\
        import json, torch
        print("PROBE " + json.dumps({ns: [getattr(torch, ns).is_available(), getattr(torch, ns).device_count()]
                                     for ns in ("cuda", "mps", "xpu", "mtia")}))
    """)
    jobs = {
        "default": (run_torchdevice, ("run", "--backend", "cpu", str(probe)), {}),
        "flag": (run_torchdevice, ("run", "--backend", "cpu", "--source", "XPU", str(probe)), {}),
        "env": (run_torchdevice, ("run", str(probe)), {"env": {**cpu, "TORCHDEVICE_SOURCE": "mtia"}}),
        "flag_over_env": (run_torchdevice, ("run", "--source", "mps", str(probe)),
                          {"env": {**cpu, "TORCHDEVICE_SOURCE": "xpu"}}),
        "inferred": (run_torchdevice, ("run", "--backend", "cpu", str(mps_only)), {}),
        "not_inferred": (run_torchdevice, ("run", "--backend", "cpu", "--source", "cuda", str(mps_only)), {}),
        "bad_flag": (run_torchdevice, ("run", "--source", "rocm", str(probe)), {}),
        "bad_env": (run_torchdevice, ("run", str(probe)), {"env": {**cpu, "TORCHDEVICE_SOURCE": "rocm"}}),
        "zero_code": (run_python, (zero_code,), {"env": {**cpu, "TORCHDEVICE_SOURCE": "xpu"}}),
        "spawn": (run_torchdevice, ("run", "--backend", "cpu", "--devices", "2", str(spawn)), {"timeout": 300}),
        "spawn_env": (run_torchdevice, ("run", str(spawn)),
                      {"env": {**cpu, "TORCHDEVICE_DEVICE_COUNT": "2"}, "timeout": 300}),
        "bad_devices": (run_torchdevice, ("run", "--devices", "0", str(probe)), {}),
        "bad_devices_env": (run_torchdevice, ("run", str(probe)), {"env": {**cpu, "TORCHDEVICE_DEVICE_COUNT": "x"}}),
    }
    return run_concurrently(jobs)


def test_run_default_source_is_cuda_in_the_program_and_its_children(runs):
    info = _probe(runs["default"])
    assert info["parent"] == info["child"] == {ns: list(v) for ns, v in _only("cuda").items()}
    assert info["mps_backend"] is False and info["env"] == "cuda"


@pytest.mark.parametrize(("key", "source"), [("flag", "xpu"), ("env", "mtia"), ("flag_over_env", "mps")])
def test_run_source_from_flag_or_env_reaches_the_children(runs, key, source):
    info = _probe(runs[key])
    assert info["parent"] == info["child"] == {ns: list(v) for ns, v in _only(source).items()}, key
    assert info["env"] == source
    assert info["mps_backend"] is (source == "mps")


def test_run_infers_the_source_family_from_the_script(runs):
    assert _probe(runs["inferred"]) == {"device": "mps", "on": "cpu", "count": 1}
    assert _probe(runs["not_inferred"]) == {"device": "cpu", "on": "cpu", "count": 0}


def test_run_bad_source(runs):
    for key, text in (("bad_flag", "'rocm'"), ("bad_env", "TORCHDEVICE_SOURCE='rocm'")):
        r = runs[key]
        assert r.returncode == 2, r
        assert text in r.stderr and all(f in r.stderr for f in FAMILIES), r
        assert "PROBE" not in r.stdout


def test_zero_code_activation_reads_the_source_family(runs):
    assert _probe(runs["zero_code"]) == {ns: list(v) for ns, v in _only("xpu").items()}


@pytest.mark.parametrize("key", ["spawn", "spawn_env"])
def test_mp_spawn_over_device_count_on_two_logical_devices(runs, key):
    r = runs[key]
    assert r.returncode == 0, r
    info = _probe(r)
    assert info["parent"] == [2, 1, "cpu", 1]
    assert info["children"] == [[0, 0, 2, 0, 0.0], [1, 1, 2, 1, 2.0]]


def test_run_bad_device_count(runs):
    r = runs["bad_devices"]
    assert r.returncode == 2 and "--devices" in r.stderr and "'0'" in r.stderr, r
    r = runs["bad_devices_env"]
    assert r.returncode == 2 and "TORCHDEVICE_DEVICE_COUNT='x'" in r.stderr, r
    assert "PROBE" not in r.stdout


def test_run_help_names_the_options():
    from torchdevice import cli

    text = cli.build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "--source" in text and "--devices" in text and "TORCHDEVICE_SOURCE" in text
