"""Bad TORCHDEVICE_* values: one clear message naming the variable, the value and what is valid;
only the feature the variable configures is affected; `import torch` never fails."""
from __future__ import annotations

import sys

import pytest
from helpers import run_command, run_concurrently

PROGRAM = "import torch; print(torch.zeros(1, device='cuda').device)"
PY = sys.executable

CASES = {
    "priority_info": ([PY, "-m", "torchdevice", "info"], {"TORCHDEVICE_PRIORITY": "mlx"}),
    "priority_abc_info": ([PY, "-m", "torchdevice", "info"], {"TORCHDEVICE_PRIORITY": "mlx=abc"}),
    "priority_named": ([PY, "-c", PROGRAM], {"TORCHDEVICE_PRIORITY": "mlx=1e3", "TORCHDEVICE_BACKEND": "cpu"}),
    "priority_named_info": ([PY, "-m", "torchdevice", "info"],
                            {"TORCHDEVICE_PRIORITY": "mlx=1e3", "TORCHDEVICE_BACKEND": "cpu"}),
    "amp_dtype": ([PY, "-c", PROGRAM], {"TORCHDEVICE_AMP_DTYPE": "int8", "TORCHDEVICE_BACKEND": "cpu"}),
    "auto_maybe": ([PY, "-c", "import torch, torchdevice.translate as t; print(t.is_patched())"],
                   {"TORCHDEVICE_AUTO": "maybe"}),
    "plugins_typo": ([PY, "-c", PROGRAM], {"TORCHDEVICE_PLUGINS": "mlxx", "TORCHDEVICE_BACKEND": "cpu"}),
    "disabled": ([PY, "-m", "torchdevice", "info"],
                 {"TORCHDEVICE_DISABLE_PLUGINS": "mlx", "TORCHDEVICE_BACKEND": "mlx"}),
}


@pytest.fixture(scope="module")
def results():
    return run_concurrently({k: (run_command, (args,), {"env": env}) for k, (args, env) in CASES.items()}, workers=2)


@pytest.mark.parametrize("case", ["priority_info", "priority_abc_info"])
def test_bad_priority_is_one_clear_error_without_traceback(results, case):
    run = results[case]
    assert run.returncode == 2 and "Traceback" not in run.stderr, str(run)
    value = CASES[case][1]["TORCHDEVICE_PRIORITY"]
    assert f"TORCHDEVICE_PRIORITY={value!r} is not valid" in run.stderr and "NAME=INTEGER" in run.stderr, str(run)


def test_bad_priority_does_not_matter_when_a_backend_is_named(results):
    run = results["priority_named"]
    assert run.returncode == 0 and run.stdout.strip() == "cpu" and "activation failed" not in run.stderr, str(run)
    info = results["priority_named_info"]
    assert info.returncode == 0 and "Traceback" not in info.stderr, str(info)


def test_bad_amp_dtype_affects_amp_only(results):
    run = results["amp_dtype"]
    assert run.returncode == 0 and run.stdout.strip() == "cpu", str(run)
    assert "TORCHDEVICE_AMP_DTYPE='int8' is not valid" in run.stderr and "float16 or bfloat16" in run.stderr


def test_auto_neither_on_nor_off_warns(results):
    run = results["auto_maybe"]
    assert run.returncode == 0 and run.stdout.strip() == "False", str(run)
    assert "TORCHDEVICE_AUTO='maybe' is not 1 or 0" in run.stderr, str(run)


def test_plugins_typo_warns_naming_it_and_the_known_names(results):
    run = results["plugins_typo"]
    assert run.returncode == 0 and run.stdout.strip() == "cpu", str(run)
    assert "TORCHDEVICE_PLUGINS names 'mlxx'" in run.stderr and "installed entry points:" in run.stderr, str(run)


def test_disabled_backend_is_reported_as_disabled(results):
    run = results["disabled"]
    assert run.returncode == 2, str(run)
    assert "disabled by TORCHDEVICE_DISABLE_PLUGINS" in run.stderr and "unknown" not in run.stderr, str(run)
