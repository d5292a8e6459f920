"""Zero-code activation through torch's ``torch.backends`` entry point, and child processes."""
from __future__ import annotations

import json
import textwrap
from importlib.metadata import entry_points

import pytest
from helpers import NATIVE_CUDA_AVAILABLE, Result, clean_env, run_concurrently, run_python, torchdevice_script

from torchdevice import autoload, translate

STATE = """\
import json, sys, warnings
import torch
torchdevice_at_import = any(m.startswith('torchdevice') for m in sys.modules)
import torchdevice.autoload, torchdevice.translate
print("STATE " + json.dumps({
    "torchdevice_at_import": torchdevice_at_import,
    "outcome": torchdevice.autoload.outcome,
    "patched": torchdevice.translate.is_patched(),
    "cuda_available": torch.cuda.is_available(),
    "cuda_tensor_on": torch.zeros(1, device="cuda").device.type
        if torchdevice.translate.is_patched() else None,
    "plugin_modules": sorted(m for m in sys.modules if m.startswith(("torchdevice_", "mlx"))),
}))
"""

CHILDREN = """\
import json, os, subprocess, sys
import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset


def facts():
    import torchdevice.translate
    return {
        "patched": torchdevice.translate.is_patched(),
        "cuda_available": torch.cuda.is_available(),
        "on": torch.zeros(1, device="cuda").device.type,
        "backend": os.environ.get("TORCHDEVICE_BACKEND"),
    }


class Probe(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return json.dumps(facts())


def spawned(rank, path):
    with open(f"{path}.{rank}", "w") as f:
        json.dump(facts(), f)


if __name__ == "__main__":
    out = {"parent": facts()}
    for ctx in ("fork", "spawn"):
        loader = DataLoader(Probe(), batch_size=None, num_workers=2, multiprocessing_context=ctx)
        out[f"workers_{ctx}"] = [json.loads(item) for item in loader]
    path = sys.argv[1]
    mp.spawn(spawned, args=(path,), nprocs=2)
    out["mp_spawn"] = [json.load(open(f"{path}.{rank}")) for rank in range(2)]
    child = subprocess.run([sys.executable, "-c", "import json, torch, torchdevice.translate as t; "
                            "print(json.dumps([t.is_patched(), torch.ones(1, device='cuda').device.type]))"],
                           capture_output=True, text=True, check=True)
    out["subprocess"] = json.loads(child.stdout)
    print("CHILDREN " + json.dumps(out))
"""


def _state(result: Result) -> dict:
    for line in result.stdout.splitlines():
        if line.startswith("STATE "):
            return json.loads(line[6:])
    raise AssertionError(f"no STATE line\n{result}")


def _run(args, env=None, timeout=240) -> Result:
    import subprocess

    proc = subprocess.run(args, env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    return Result(list(map(str, args)), proc.returncode, proc.stdout, proc.stderr)


def test_entry_point_is_registered():
    eps = [ep for ep in entry_points(group="torch.backends") if ep.value == "_torchdevice_autoload:hook"]
    assert eps, "pip install -e . registers the torch.backends entry point"
    import _torchdevice_autoload

    assert eps[0].load() is _torchdevice_autoload.hook


def test_import_torchdevice_first_still_activates():
    # torchdevice importing torch runs the entry point while torchdevice is half-initialised
    out = run_python(
        "import torchdevice, torch; print(torchdevice.is_patched(), torch.zeros(1, device='cuda').device)",
        env={"TORCHDEVICE_BACKEND": "cpu"},
    )
    assert out.stdout.split() == ["True", "cpu"], out.stderr


def test_nothing_imported_when_not_asked(imports):
    r = imports["plain"]  # what `import torch` imported, read before the probe imports torchdevice itself
    assert r.returncode == 0 and _state(r)["torchdevice_at_import"] is False, r


@pytest.fixture(scope="module")
def imports():
    jobs = {
        "plain": (run_python, (STATE,), {}),
        "backend": (run_python, (STATE,), {"env": {"TORCHDEVICE_BACKEND": "cpu"}}),
        "auto": (run_python, (STATE,), {"env": {"TORCHDEVICE_AUTO": "1"}}),
        "opt_out": (run_python, (STATE,), {"env": {"TORCHDEVICE_BACKEND": "cpu", "TORCHDEVICE_AUTO": "0"}}),
        "nope": (run_python, (STATE,), {"env": {"TORCHDEVICE_BACKEND": "nope"}}),
        "torch_off": (run_python, (STATE,), {"env": {"TORCHDEVICE_BACKEND": "cpu",
                                                     "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}}),
    }
    return run_concurrently(jobs)


def test_nothing_set_does_nothing(imports):
    r = imports["plain"]
    assert r.returncode == 0 and r.stderr == "", r
    state = _state(r)
    # the stdlib-only shim returns before torchdevice.autoload is even imported
    assert state["outcome"] == "not run" and not state["patched"]
    assert state["cuda_available"] is NATIVE_CUDA_AVAILABLE  # torch's own answer (True on a GPU runner)


@pytest.mark.parametrize("key", ["backend", "auto"])
def test_environment_turns_translation_on_quietly(imports, key):
    r = imports[key]
    assert r.returncode == 0, r
    assert r.stderr == "", "nothing is printed by default"
    state = _state(r)
    assert state["outcome"].startswith("on") and state["patched"]
    assert state["cuda_available"] and state["cuda_tensor_on"] == "cpu"


def test_opt_outs(imports):
    for key in ("opt_out", "torch_off"):
        r = imports[key]
        assert r.returncode == 0 and r.stderr == "", r
        assert not _state(r)["patched"], key


def test_broken_backend_never_breaks_import_torch(imports):
    r = imports["nope"]
    assert r.returncode == 0, r
    state = _state(r)
    assert state["outcome"].startswith("failed") and not state["patched"]
    assert "RuntimeWarning" in r.stderr and "'nope'" in r.stderr and "cpu" in r.stderr
    assert "Traceback" not in r.stderr


def _hook_warnings() -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        autoload.hook()  # must return, whatever happens
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_hook_never_raises(monkeypatch, on_cpu):
    monkeypatch.setenv("TORCHDEVICE_BACKEND", "cpu")

    def explode(**kwargs):
        raise RuntimeError("installer exploded")

    monkeypatch.setattr(translate, "patch", explode)
    assert any("installer exploded" in m for m in _hook_warnings())
    assert autoload.outcome.startswith("failed")
    monkeypatch.setenv("TORCHDEVICE_LOG", "shouting")
    assert any("TORCHDEVICE_LOG" in m for m in _hook_warnings())
    monkeypatch.setattr(autoload, "wanted", lambda: 1 / 0)
    assert any("ZeroDivisionError" in m for m in _hook_warnings())


def test_hook_turns_translation_on_in_process(monkeypatch, on_cpu):
    was = translate.is_patched()
    monkeypatch.setenv("TORCHDEVICE_AUTO", "1")
    try:
        autoload.hook()
        assert translate.is_patched()
        assert autoload.outcome.startswith("on: TORCHDEVICE_AUTO=1")
    finally:
        if not was:
            translate.unpatch()


@pytest.mark.parametrize("env, expected", [
    ({}, False),
    ({"TORCHDEVICE_BACKEND": "mlx"}, True),
    ({"TORCHDEVICE_AUTO": "1"}, True),
    ({"TORCHDEVICE_AUTO": "yes"}, True),
    ({"TORCHDEVICE_AUTO": "0", "TORCHDEVICE_BACKEND": "cpu"}, False),
    ({"TORCHDEVICE_AUTO": "maybe"}, False),
    ({"TORCHDEVICE_BACKEND": "  "}, False),
])
def test_wanted(env, expected):
    assert autoload.wanted(env)[0] is expected


def test_children_inherit_translation(tmp_path):
    """DataLoader workers (fork and spawn), torch.multiprocessing.spawn and plain subprocesses."""
    script = tmp_path / "children.py"
    script.write_text(textwrap.dedent(CHILDREN))
    r = _run([torchdevice_script(), "run", str(script), str(tmp_path / "spawned")])
    assert r.returncode == 0, r
    line = next(line for line in r.stdout.splitlines() if line.startswith("CHILDREN "))
    out = json.loads(line[9:])
    expected = {"patched": True, "cuda_available": True, "on": "cpu", "backend": "cpu"}
    assert out["parent"] == expected
    for ctx in ("fork", "spawn"):
        assert out[f"workers_{ctx}"] == [expected] * 4, ctx
    assert out["mp_spawn"] == [expected] * 2
    assert out["subprocess"] == [True, "cpu"]


def test_a_named_backend_imports_no_other_plugin(imports):
    """TORCHDEVICE_BACKEND=cpu: no plugin distribution is imported (activation cost)."""
    result = imports["backend"]  # the probe's last reading, after a tensor made on "cuda"
    state = _state(result)
    assert result.returncode == 0 and state["cuda_tensor_on"] == "cpu", str(result)
    assert state["plugin_modules"] == [], str(result)
