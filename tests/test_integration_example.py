"""The integration example of docs/plugins.md ("Framework integrations") works as written: taken
from the doc, registered as a plugin, it lets a framework that refuses non-CUDA devices run under
translation, stays out of the way without it, and ``unpatch()`` puts the framework back."""
from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
import torch

import torchdevice
from torchdevice import plugins, translate

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"

FRAMEWORK = '''\
import torch


def check_device(device):
    if device.type != "cuda":
        raise ValueError(f"Device should be GPU, got {device.type} instead")


class Trainer:
    def __init__(self):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        check_device(self.device)
'''


def _example() -> str:
    text = DOC.read_text()
    section = text.split("## Framework integrations", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one example"
    return blocks[0]


@pytest.fixture
def tinytrainer(on_cpu, tmp_path, monkeypatch):
    (tmp_path / "tinytrainer.py").write_text(FRAMEWORK)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = types.ModuleType("tinytrainer_torchdevice")
    exec(compile(_example(), str(DOC), "exec"), plugin.__dict__)
    plugins.register(plugin, name="tinytrainer-plugin")
    yield
    translate.unpatch()
    plugins.unregister("tinytrainer-plugin")
    sys.modules.pop("tinytrainer", None)


def test_the_documented_integration_adapts_the_framework(tinytrainer):
    translate.patch()
    import tinytrainer

    trainer = tinytrainer.Trainer()  # without the integration: "Device should be GPU, got cpu instead"
    assert trainer.device.type == "cpu" and torch.cuda.is_available()
    states = {name: status for name, _, _, status in __import__("torchdevice.integrations").integrations.states()}
    assert states["tinytrainer"] == "active: tinytrainer"
    translate.unpatch()
    with pytest.raises(ValueError, match="Device should be GPU, got cpu instead"):
        tinytrainer.check_device(torch.device("cpu"))  # the framework's own check is back
    assert tinytrainer.check_device.__module__ == "tinytrainer"


def test_disabled_by_name_the_framework_refuses_the_target(tinytrainer, monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_DISABLE_INTEGRATIONS", "tinytrainer")
    translate.patch()
    import tinytrainer

    with pytest.raises(ValueError, match="Device should be GPU, got cpu instead"):
        tinytrainer.Trainer()


def test_nothing_happens_for_a_program_that_never_imports_it(tinytrainer):
    translate.patch()
    assert "tinytrainer" not in sys.modules
    assert torchdevice.integrations.is_active("tinytrainer") is False


def test_a_hanging_integration_plugin_is_bounded(tmp_path):
    """An integration-only plugin whose import hangs costs TORCHDEVICE_PLUGIN_TIMEOUT, not the hang:
    translation goes on and the problem is reported."""
    from helpers import run_command, write_distribution

    module = tmp_path / "src" / "td_hanging_integration.py"
    module.parent.mkdir()
    module.write_text("import time\ntime.sleep(60)\n")
    site = tmp_path / "site"
    write_distribution(site, "td-hanging-integration", "1.0",
                       {"torchdevice.integrations": {"hanging": "td_hanging_integration"}}, [module])
    code = ("import torch, torchdevice\n"
            "print(torch.zeros(1, device='cuda').device)\n"
            "print([p.plugin for p in torchdevice.problems()])\n")
    run = run_command([sys.executable, "-c", code], pythonpath=[site], timeout=40,
                      env={"TORCHDEVICE_BACKEND": "cpu", "TORCHDEVICE_PLUGIN_TIMEOUT": "1"})
    assert run.returncode == 0, str(run)
    assert run.stdout.splitlines()[0] == "cpu" and "hanging" in run.stdout.splitlines()[1], str(run)


def test_the_documented_integration_installed_as_a_distribution(tmp_path):
    """The example as a package that is only an integration (entry-point group
    ``torchdevice.integrations``), installed: a program using the framework runs through
    ``torchdevice run``, ``torchdevice info`` lists it, and disabling it by name brings the
    framework's own refusal back."""
    from helpers import run_command, run_concurrently, write_distribution

    src = tmp_path / "src"
    src.mkdir()
    (src / "tinytrainer_torchdevice.py").write_text(_example())
    site = tmp_path / "site"
    write_distribution(site, "tinytrainer-torchdevice", "0.1.0",
                       {"torchdevice.integrations": {"tinytrainer": "tinytrainer_torchdevice"}},
                       [src / "tinytrainer_torchdevice.py"])
    (site / "tinytrainer.py").write_text(FRAMEWORK)
    program = tmp_path / "train.py"
    program.write_text("import torch, tinytrainer\n"
                       "from torchdevice import integrations\n"
                       "trainer = tinytrainer.Trainer()\n"
                       "status = {n: (p, st) for n, p, _, st in integrations.states()}['tinytrainer']\n"
                       "print('DEVICE', trainer.device, torch.cuda.is_available(), status)\n")
    run = [sys.executable, "-m", "torchdevice", "run", "--backend", "cpu", str(program)]
    results = run_concurrently({
        "run": (run_command, (run,), {"pythonpath": [site]}),
        "disabled": (run_command, (run,), {"pythonpath": [site], "env": {"TORCHDEVICE_DISABLE_INTEGRATIONS": "tinytrainer"}}),
        "info": (run_command, ([sys.executable, "-m", "torchdevice", "info", "--json"],), {"pythonpath": [site]}),
    })
    assert results["run"].returncode == 0, str(results["run"])
    assert "DEVICE cpu True ('tinytrainer', 'active: tinytrainer')" in results["run"].stdout, str(results["run"])
    disabled = results["disabled"]
    assert disabled.returncode != 0 and "Device should be GPU, got cpu instead" in disabled.stderr, str(disabled)
    assert results["info"].returncode == 0, str(results["info"])
    listed = {i["name"]: i for i in json.loads(results["info"].stdout)["integrations"]}
    assert listed["tinytrainer"]["plugin"] == "tinytrainer"
    assert listed["tinytrainer"]["framework"] == "tinytrainer (Trainer device check)"
