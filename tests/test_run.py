"""``torchdevice run`` behaves like ``python SCRIPT ARGS`` / ``python -m MODULE ARGS``, with translation on."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import Result, clean_env, run_concurrently, torchdevice_script, unset_env

PROBE = """\
import json, os, sys
import torch
import torchdevice.translate
info = {
    "name": __name__,
    "file": __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "spec": None if __spec__ is None else __spec__.name,
    "patched": torchdevice.translate.is_patched(),
    "cuda_tensor_on": torch.zeros(1, device="cuda").device.type,
    "env_backend": os.environ.get("TORCHDEVICE_BACKEND"),
}
import sibling
info["sibling"] = sibling.VALUE
print("PROBE " + json.dumps(info))
"""

EXITS = """\
import sys
mode = sys.argv[1]
if mode == "code":
    sys.exit(int(sys.argv[2]))
if mode == "message":
    sys.exit("goodbye from the program")
if mode == "none":
    sys.exit()
if mode == "raise":
    def inner():
        raise ValueError("boom in the program")
    def outer():
        inner()
    outer()
print("normal end")
"""


def _run(args, env=None, cwd=None, timeout=120) -> Result:
    import subprocess

    proc = subprocess.run(args, env=clean_env(env), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return Result(list(map(str, args)), proc.returncode, proc.stdout, proc.stderr)


def _probe(result: Result) -> dict:
    for line in result.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[6:])
    raise AssertionError(f"no PROBE line\n{result}")


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    scripts = root / "scripts"
    scripts.mkdir()
    (scripts / "probe.py").write_text(PROBE)
    (scripts / "sibling.py").write_text("VALUE = 'from the script directory'\n")
    (scripts / "exits.py").write_text(EXITS)
    (scripts / "broken.py").write_text("def f(:\n    pass\n")
    pkg = root / "cwd" / "probepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(PROBE.replace("import sibling\ninfo[\"sibling\"] = sibling.VALUE\n",
                                                   "info['sibling'] = None\n"))
    (pkg / "mod.py").write_text(PROBE.replace("import sibling\ninfo[\"sibling\"] = sibling.VALUE\n",
                                              "info['sibling'] = None\n"))
    argvpkg = root / "cwd" / "argvpkg"  # no torch: run natively too, to compare with Python's own argv
    argvpkg.mkdir()
    (argvpkg / "__init__.py").write_text("import sys\nprint('AT IMPORT', sys.argv)\n")
    (argvpkg / "mod.py").write_text("import sys\nprint('IN MODULE', sys.argv)\n")
    return root


@pytest.fixture(scope="module")
def results(programs):
    """The behaviours that need a real process, run concurrently (each pays ``import torch``)."""
    td = torchdevice_script()
    scripts, cwd = programs / "scripts", programs / "cwd"
    probe = str(scripts / "probe.py")
    exits = str(scripts / "exits.py")
    jobs = {
        "script": (_run, ([td, "run", probe, "--lr", "3", "--report", "x", "-m", "y"],), {"cwd": cwd}),
        "python_m": (_run, ([sys.executable, "-m", "torchdevice", "run", "--backend", "cpu", probe, "a"],), {}),
        "module": (_run, ([td, "run", "-m", "probepkg.mod", "--flag", "v"],), {"cwd": cwd}),
        "argv_translated": (_run, ([td, "run", "-m", "argvpkg.mod", "--job", "x"],), {"cwd": cwd}),
        "argv_native": (_run, ([sys.executable, "-m", "argvpkg.mod", "--job", "x"],), {"cwd": cwd}),
        "raise": (_run, ([td, "run", exits, "raise"],), {}),
        "raise_python": (_run, ([sys.executable, exits, "raise"],), {}),
        "message": (_run, ([td, "run", exits, "message"],), {}),
    }
    return run_concurrently(jobs)


def test_script_sees_python_semantics(results, programs):
    r = results["script"]
    assert r.returncode == 0, r
    info = _probe(r)
    probe = str(programs / "scripts" / "probe.py")
    assert info["name"] == "__main__"
    assert info["file"] == probe
    assert info["argv"] == [probe, "--lr", "3", "--report", "x", "-m", "y"]  # passed through untouched
    assert Path(info["path0"]) == (programs / "scripts").resolve()
    assert info["sibling"] == "from the script directory"
    assert info["spec"] is None


def test_translation_is_on_and_exported(results):
    for key in ("script", "python_m", "module"):
        info = _probe(results[key])
        assert info["patched"] is True, key
        assert info["cuda_tensor_on"] == "cpu", key
        assert info["env_backend"] == "cpu", key


def test_python_dash_m_torchdevice(results, programs):
    r = results["python_m"]
    assert r.returncode == 0, r
    assert _probe(r)["argv"] == [str(programs / "scripts" / "probe.py"), "a"]


def test_module_mode_argv_while_the_package_imports(results):
    """The package sees the program's arguments at import, as under ``python -m`` (torchtitan parses them there)."""
    translated, native = results["argv_translated"], results["argv_native"]
    assert native.returncode == 0, native
    assert translated.returncode == 0, translated
    assert translated.stdout.splitlines() == native.stdout.splitlines()


def test_module_mode(results, programs, inproc, monkeypatch):
    r = results["module"]
    assert r.returncode == 0, r
    info = _probe(r)
    mod = programs / "cwd" / "probepkg" / "mod.py"
    assert info["name"] == "__main__"
    assert info["spec"] == "probepkg.mod"
    assert info["argv"] == [str(mod), "--flag", "v"]
    assert info["file"] == str(mod)
    assert Path(info["path0"]) == programs / "cwd"
    monkeypatch.chdir(programs / "cwd")  # a package's __main__, in-process
    monkeypatch.delitem(sys.modules, "probepkg", raising=False)
    assert inproc(["run", "-m", "probepkg"]) == 0
    assert sys.modules["__main__"].info["spec"] == "probepkg.__main__"


def test_exit_codes(results, programs, inproc, capsys):
    exits = str(programs / "scripts" / "exits.py")
    assert inproc(["run", exits, "normal"]) == 0
    assert "normal end" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        inproc(["run", exits, "code", "3"])
    assert info.value.code == 3
    with pytest.raises(SystemExit) as info:
        inproc(["run", exits, "none"])
    assert info.value.code is None
    message = results["message"]  # Python itself prints a sys.exit(str) and exits 1
    assert message.returncode == 1
    assert "goodbye from the program" in message.stderr


def test_uncaught_exception_traceback_is_the_programs(results):
    ours, python = results["raise"], results["raise_python"]
    assert ours.returncode == 1 == python.returncode
    assert ours.stderr == python.stderr  # identical to `python SCRIPT`: no torchdevice frames
    assert ours.stderr.startswith("Traceback (most recent call last):\n  File ")
    assert "torchdevice" not in ours.stderr


def test_syntax_error(programs, inproc, capsys):
    assert inproc(["run", str(programs / "scripts" / "broken.py")]) == 1
    err = capsys.readouterr().err
    assert "SyntaxError" in err and "broken.py" in err
    assert "torchdevice" not in err


def test_errors_before_the_program(programs, inproc, capsys):
    probe = str(programs / "scripts" / "probe.py")
    assert inproc(["run", str(programs / "scripts" / "nope.py")]) == 2
    assert "can't open file" in capsys.readouterr().err
    assert inproc(["run", "-m", "no_such_module_xyz"]) == 1
    assert "no_such_module_xyz" in capsys.readouterr().err
    assert inproc(["run", "--backend", "nope", probe]) == 2
    captured = capsys.readouterr()
    assert "'nope'" in captured.err and "cpu" in captured.err and "PROBE" not in captured.out
    assert inproc(["run"]) == 2
    assert "missing SCRIPT" in capsys.readouterr().err
    assert inproc(["run", "-m"]) == 2
    assert "missing MODULE" in capsys.readouterr().err


def test_in_process_run_returns_status(tmp_path, on_cpu, monkeypatch):
    """run() is callable in-process too: it returns the status and leaves translation on."""
    from torchdevice import run as run_mod
    from torchdevice import translate

    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""\
        import sys, torch
        RESULT = torch.ones(2, device="cuda").device.type
        if len(sys.argv) > 1:
            raise KeyError(sys.argv[1])
    """))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    main_before = sys.modules["__main__"]
    monkeypatch.setitem(sys.modules, "__main__", main_before)
    unset_env(monkeypatch, "TORCHDEVICE_BACKEND", "TORCHDEVICE_SOURCE", "TORCHDEVICE_DEVICE_COUNT")
    was = translate.is_patched()
    try:
        assert run_mod.run(str(script), []) == 0
        assert sys.modules["__main__"].RESULT == "cpu"
        assert sys.argv == [str(script)]
        assert run_mod.run(str(script), ["k"]) == 1
    finally:
        if not was:
            translate.unpatch()
