"""``torch.cuda.get_device_properties()`` under translation carries every field torch's CUDA properties
have, with honest values: compared with torch's own declaration of the class and with what the OS says."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import torchdevice
from torchdevice import capability, host, matrix
from torchdevice.backend import CUDA_PROPERTY_FIELDS, DeviceProperties

_TYPES = {"_int": int, "int": int, "str": str}


def _torchs_cuda_property_fields() -> dict[str, type]:
    """The fields torch declares for ``_CudaDeviceProperties`` (torch/_C/__init__.pyi), with their types."""
    stub = Path(torch.__file__).parent / "_C" / "__init__.pyi"
    if not stub.exists():
        pytest.skip("this torch ships no torch/_C/__init__.pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_CudaDeviceProperties")
    return {n.target.id: _TYPES[ast.unparse(n.annotation)] for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def test_every_field_torch_declares_is_there_with_its_type(translated):
    declared = _torchs_cuda_property_fields()
    assert list(declared) == list(CUDA_PROPERTY_FIELDS)
    props = torch.cuda.get_device_properties(0)
    for name, kind in declared.items():
        value = getattr(props, name)
        assert type(value) is kind, (name, value)
    assert props is torch.cuda.get_device_properties("cuda:0")


@pytest.mark.cpu_only(reason="the cpu backend describes the host; sim's properties are its own "
                             "(plugins/torchdevice-sim/tests/test_sim_translation.py::test_properties_are_sims)")
def test_the_cpu_answers_are_what_the_os_says(translated):
    props = torch.cuda.get_device_properties(0)
    assert props.multi_processor_count == len(os.sched_getaffinity(0))  # usable cores, not all cores
    assert props.is_integrated == 1 and props.is_multi_gpu_board == 0
    assert props.warp_size == 1
    assert (props.memory_clock_rate, props.memory_bus_width) == (0, 0)
    assert (props.shared_memory_per_block, props.shared_memory_per_multiprocessor) == (0, 0)
    assert props.gcnArchName == props.name  # what CUDA builds of torch answer
    lscpu = shutil.which("lscpu")
    if lscpu:
        out = subprocess.run([lscpu], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}).stdout
        threads = re.search(r"^Thread\(s\) per core:\s*(\d+)", out, re.M)
        if threads:
            assert props.max_threads_per_multi_processor == int(threads.group(1))
    getconf = shutil.which("getconf")
    if getconf:
        l2 = subprocess.run([getconf, "LEVEL2_CACHE_SIZE"], capture_output=True, text=True).stdout.strip()
        if l2.isdigit() and int(l2) > 0:
            assert props.L2_cache_size == int(l2)
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            assert props.clock_rate == int(f.read())
    except FileNotFoundError:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.lower().startswith("cpu mhz")]
        if mhz:
            assert abs(props.clock_rate - mhz[0] * 1000) <= 0.25 * mhz[0] * 1000


def test_the_uuid_is_a_stable_uuid_distinct_per_device(on_cpu, monkeypatch):
    first = torchdevice.get_device_properties(0).uuid
    assert str(uuid.UUID(first)) == first
    torchdevice.use("cpu")  # a fresh resolution derives it again
    assert torchdevice.get_device_properties(0).uuid == first
    monkeypatch.setenv("TORCHDEVICE_DEVICE_COUNT", "2")
    torchdevice.use("cpu")
    assert torchdevice.device_count() == 2
    assert torchdevice.get_device_properties(1).uuid != first == torchdevice.get_device_properties(0).uuid
    assert capability.device_uuid("mlx", 0, torchdevice.get_device_properties(0).name) != first


def test_a_backend_gives_what_it_has_and_the_rest_is_filled():
    bare = DeviceProperties("chip", 1 << 30, bf16_supported=False, type="x")
    filled = capability.complete(bare, "x", 0, "x")
    assert (filled.major, filled.minor, filled.gcnArchName, filled.warp_size) == (7, 0, "chip", 1)
    assert filled.is_integrated == 0  # a device with its own memory says nothing of integration
    assert capability.complete(bare, "x", 0, "cpu").is_integrated == 1  # host tensors live in host memory
    own = DeviceProperties("gpu", 1, major=9, minor=0, warp_size=64, uuid="u", gcnArchName="gfx942",
                           max_threads_per_multi_processor=2048)
    assert capability.complete(own, "x", 0, "x") == own


def test_a_torch_namespace_backend_carries_the_real_fields():
    from torchdevice.torch_backend import _other_cuda_fields

    raw = SimpleNamespace(name="GPU", total_memory=1, warp_size=32, L2_cache_size=40 << 20, uuid=uuid.UUID(int=7),
                          gcnArchName="gfx90a", clock_rate=None, is_integrated="n/a")
    assert _other_cuda_fields(raw) == {"warp_size": 32, "L2_cache_size": 40 << 20, "gcnArchName": "gfx90a",
                                       "uuid": "00000000-0000-0000-0000-000000000007"}


def test_without_sysfs_the_counts_come_from_sysctl(monkeypatch):
    # macOS has no /sys: the host's answers come from sysctl there
    monkeypatch.setattr(host, "read", lambda path: None)
    monkeypatch.setattr(host, "cpu_mhz", lambda: None)
    values = {"hw.logicalcpu": 16, "hw.physicalcpu": 8, "hw.l2cachesize": 4 << 20, "hw.cpufrequency_max": 3_200_000_000}
    monkeypatch.setattr(host, "sysctl_int", values.get)
    assert (host.threads_per_core(), host.l2_cache_size(), host.max_clock_khz()) == (2, 4 << 20, 3_200_000)
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    assert (host.threads_per_core(), host.l2_cache_size(), host.max_clock_khz()) == (1, 0, 0)


def test_the_matrix_gives_each_field_a_status():
    rows = {r.api: r for r in matrix.property_rows(["cpu"])}
    assert list(rows) == [f"get_device_properties().{name}" for name in CUDA_PROPERTY_FIELDS]
    for row in rows.values():
        status, note = row.statuses["cpu"]
        assert status.value == "translated" and note
