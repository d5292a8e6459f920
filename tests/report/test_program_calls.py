"""What ``torchdevice run --report`` counts as the program's calls: calls torch's own code makes
(``torch.manual_seed`` seeding every family) are not the program's, the split answers of
:mod:`torchdevice.boundary` name the caller's line, and device probes of the families other than
the source are counted apart (``other_family_probes``), so a CUDA-written program's report names
no ``torch.xpu`` API that it (or its framework) did not use beyond asking whether an XPU exists."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from helpers import run_torchdevice

import torchdevice
from torchdevice.run import format_markdown, report_dict


@pytest.fixture
def translated(on_cpu, restore_rng):
    with torchdevice.patched(source="cuda"):
        yield


def test_torchs_own_calls_are_not_the_programs(translated, report):
    torch.manual_seed(0)  # torch.random.manual_seed calls every family's manual_seed(_all)
    uses = report()
    assert not any(api.startswith(("torch.cuda.", "torch.xpu.", "torch.mps.", "torch.mtia.")) for api in uses), uses
    torch.cuda.manual_seed_all(0)  # the program's own call of a translated API: counted, at this line
    uses = report()
    assert uses["torch.cuda.manual_seed_all"].calls == 1
    assert next(iter(uses["torch.cuda.manual_seed_all"].sites)).startswith(__file__ + ":")


def test_split_answers_name_the_callers_line(translated, report):
    torch.cuda.is_available()  # torchdevice.boundary's generated answer sits between this line and the wrapper
    (site,) = report()["torch.cuda.is_available"].sites
    assert site.startswith(__file__ + ":"), site


def test_other_family_probes_are_counted_apart(translated, report):
    torch.cuda.is_available()
    torch.xpu.is_available()
    torch.xpu.device_count()
    torch.backends.mps.is_available()
    # transformers' is_tracing() asks this of XPU on every masked forward, on any machine: a probe
    assert torch.xpu.is_current_stream_capturing() is False
    torch.xpu.manual_seed_all(0)  # not a probe: the program used torch.xpu, the report says so
    target = torchdevice.translate.target()
    data = report_dict(target, ["prog.py"], False, 0, 0.1)
    apis = {a["api"] for a in data["apis"]}
    assert apis == {"torch.cuda.is_available", "torch.xpu.manual_seed_all"}
    assert data["other_family_probes"] == {"mps": 1, "xpu": 3}
    assert data["total_calls"] == 2 == sum(v["calls"] for v in data["by_handling"].values())
    text = format_markdown(data)
    assert "- Device probes of other families (answered: no device; only the source family `cuda` claims one): " \
           "`mps` 1, `xpu` 3" in text
    assert "`torch.xpu.is_available`" not in text and "`torch.xpu.manual_seed_all`" in text


def test_probes_of_the_source_family_are_listed():
    """With xpu as the source, torch.xpu.is_available is the program's translated probe, and cuda's is apart."""
    from torchdevice.run import _other_family_probe

    xpu_source = SimpleNamespace(source="xpu", sources={"cuda", "mps", "mtia", "xpu"})
    assert _other_family_probe("torch.xpu.is_available", xpu_source) is None
    assert _other_family_probe("torch.cuda.device_count", xpu_source) == "cuda"
    assert _other_family_probe("torch.cuda.is_current_stream_capturing", xpu_source) == "cuda"
    assert _other_family_probe("torch.xpu.is_current_stream_capturing", xpu_source) is None
    assert _other_family_probe("torch.backends.mps.is_available", xpu_source) == "mps"
    assert _other_family_probe("torch.cuda.manual_seed", xpu_source) is None
    assert _other_family_probe("torch.nn.is_available", xpu_source) is None  # not a family
    assert _other_family_probe("torch.backends.cuda.matmul.is_available", xpu_source) is None


def test_run_report_of_a_cuda_program_seeding_and_probing(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "device = 'xpu' if torch.xpu.is_available() else 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "print('DEVICE', device, torch.randn(2, device=device).device)\n"
    )
    result = run_torchdevice("run", "--backend", "cpu", "--report", str(tmp_path / "r.json"), str(script))
    assert result.returncode == 0, result
    assert "DEVICE cuda cpu" in result.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    apis = {a["api"]: a for a in data["apis"]}
    assert not any(api.startswith("torch.xpu.") for api in apis), apis
    assert data["other_family_probes"] == {"xpu": 1}
    assert [s["site"] for s in apis["torch.cuda.is_available"]["sites"]] == [f"{script}:3"]
