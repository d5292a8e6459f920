"""``torchdevice port``: each rewrite (before/after), idempotence, kept comments and layout, the command
line (diff, write, directories, exit statuses, errors) and agreement with ``torchdevice scan``.

The numbers of ported programs are checked against translated runs in
plugins/torchdevice-sim/tests/test_sim_port.py (the oracle).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from torchdevice.port import PortError, port_source
from torchdevice.port.rules import ACCEL, ACCELERATOR_NAMES, AGNOSTIC, KEPT, TORCH_NAMES, namespace_rule
from torchdevice.scan import scan_source

ROOT = Path(__file__).resolve().parents[1]
HEADER = 'ACCELERATOR = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'


def _port(body: str, families: tuple[str, ...] | None = None) -> str:
    """The ported body of ``import torch`` + ``body``, without the import and the header line."""
    code = port_source("import torch\n" + textwrap.dedent(body), "t.py", families).code
    lines = code.splitlines()
    assert lines[0] == "import torch"
    return "\n".join(line for line in lines[1:] if line != HEADER)


@pytest.mark.parametrize("before, after", [
    ('d = torch.device("cuda")', "d = torch.device(ACCELERATOR.type)"),
    ('d = torch.device("cuda", 1)', "d = torch.device(ACCELERATOR.type, 1)"),
    ('x = torch.ones(2, device="cuda:1")', 'x = torch.ones(2, device=f"{ACCELERATOR.type}:1")'),
    ("d = f'cuda:{rank}'", "d = f'{ACCELERATOR.type}:{rank}'"),
    ('d = "cuda:%d" % i', 'd = f"{ACCELERATOR.type}:%d" % i'),
    ("y = x.cuda()", "y = x.to(ACCELERATOR)"),
    ("y = x.cuda(1, non_blocking=True)", "y = x.to(torch.device(ACCELERATOR.type, 1), non_blocking=True)"),
    ('y = x.to("cuda")', "y = x.to(ACCELERATOR.type)"),
    ('s = torch.load(p, map_location="cuda:0")', 's = torch.load(p, map_location=f"{ACCELERATOR.type}:0")'),
    ("ok = x.is_cuda", "ok = (x.device.type == ACCELERATOR.type)"),
    ("assert torch.cuda.is_available()", "assert torch.accelerator.is_available()"),
    ("torch.cuda.synchronize()", "torch.accelerator.synchronize()"),
    ("i = torch.cuda.current_device()", "i = torch.accelerator.current_device_index()"),
    ("torch.cuda.set_device(1)", "torch.accelerator.set_device_index(1)"),
    ("m = torch.cuda.max_memory_allocated()", "m = torch.accelerator.max_memory_allocated()"),
    ("torch.cuda.manual_seed_all(0)", "torch.get_device_module(ACCELERATOR).manual_seed_all(0)"),
    ("n = torch.cuda.get_device_properties(0).total_memory",
     "n = torch.get_device_module(ACCELERATOR).get_device_properties(0).total_memory"),
    ("e = torch.cuda.Event(enable_timing=True)", "e = torch.Event(enable_timing=True)"),
    ("ok = isinstance(s, torch.cuda.Stream)", "ok = isinstance(s, torch.Stream)"),
    ("with torch.cuda.stream(s): pass", "with torch.get_device_module(ACCELERATOR).stream(s): pass"),
    ('with torch.autocast("cuda"): pass', "with torch.autocast(ACCELERATOR.type): pass"),
    ('g = torch.amp.GradScaler("cuda")', "g = torch.amp.GradScaler(ACCELERATOR.type)"),
    ("with torch.cuda.amp.autocast(True, torch.bfloat16): pass",
     "with torch.amp.autocast(ACCELERATOR.type, enabled=True, dtype=torch.bfloat16): pass"),
    ("g = torch.cuda.amp.GradScaler(init_scale=2.0)", "g = torch.amp.GradScaler(ACCELERATOR.type, init_scale=2.0)"),
    ('torch.distributed.init_process_group("nccl")',
     "torch.distributed.init_process_group(torch.distributed.get_default_backend_for_device(ACCELERATOR))"),
    ('dist.init_process_group(backend="cpu:gloo,cuda:nccl")',
     "dist.init_process_group(backend=f\"cpu:gloo,{ACCELERATOR.type}:"
     "{torch.distributed.get_default_backend_for_device(ACCELERATOR)}\")"),
    ("except torch.cuda.OutOfMemoryError: pass", "except torch.OutOfMemoryError: pass"),
    ("torch.backends.cudnn.benchmark = True",
     "torch.backends.cudnn.benchmark = True  # torchdevice port: kept, a no-op off this vendor's kernels"),
])
def test_each_cuda_rewrite(before, after):
    if before.startswith("except"):
        before, after = f"try: pass\n{before}", f"try: pass\n{after}"
    assert _port(before) == after


@pytest.mark.parametrize("before, after", [
    ('x = torch.ones(2, device="mps")', "x = torch.ones(2, device=ACCELERATOR.type)"),
    ("ok = torch.backends.mps.is_available()", "ok = torch.accelerator.is_available()"),
    ("ok = torch.backends.mps.is_built()", "ok = (torch.accelerator.current_accelerator() is not None)"),
    ("torch.mps.synchronize()", "torch.accelerator.synchronize()"),
    ("n = torch.mps.current_allocated_memory()", "n = torch.accelerator.memory_allocated()"),
    ("n = torch.mps.driver_allocated_memory()", "n = torch.accelerator.memory_reserved()"),
    ("torch.mps.manual_seed(0)", "torch.get_device_module(ACCELERATOR).manual_seed(0)"),
    ("e = torch.mps.Event(enable_timing=True)", "e = torch.Event(enable_timing=True)"),
])
def test_each_mps_rewrite(before, after):
    assert _port(before, ("mps",)) == after


def test_imported_names_and_aliases_are_resolved_as_the_scan_resolves_them():
    code = port_source(textwrap.dedent("""\
        import torch
        import torch.cuda as tc
        from torch.cuda.amp import autocast
        from torch.cuda import synchronize
        tc.synchronize()
        with autocast(): synchronize()
    """), "t.py").code
    assert code == textwrap.dedent(f"""\
        import torch
        {HEADER}
        torch.accelerator.synchronize()
        with torch.amp.autocast(ACCELERATOR.type): torch.accelerator.synchronize()
    """)


def test_the_header_comes_after_the_imports_once_and_imports_torch_if_needed():
    code = port_source('"""Doc."""\nfrom __future__ import annotations\nfrom torch import nn\nx = "cuda"\n').code
    assert code.splitlines() == ['"""Doc."""', "from __future__ import annotations", "from torch import nn",
                                 "import torch", HEADER, "x = ACCELERATOR.type"]
    assert port_source("import torch\nx = 1\n").code == "import torch\nx = 1\n"  # nothing to port: no header


def test_comments_and_layout_are_kept():
    source = textwrap.dedent("""\
        import torch


        def f(x):  # moves x
            # to the GPU
            return x.cuda(
                non_blocking=True,   # async
            )
    """)
    code = port_source(source).code
    assert code == source.replace("x.cuda(\n        non", "x.to(\n        ACCELERATOR, non").replace(
        "import torch\n", f"import torch\n{HEADER}\n")
    compile(code, "t.py", "exec")


def test_porting_ported_code_changes_nothing():
    for path in [*ROOT.glob("examples/*.py"), *ROOT.glob("tests/programs/*.py")]:
        once = port_source(path.read_text(), str(path)).code
        assert port_source(once, str(path)).code == once, path


def test_unportable_sites_are_left_and_reported():
    source = "import torch\ng = torch.cuda.CUDAGraph()\ntorch.cuda.nvtx.range_push('a')\nv = torch.version.cuda\n"
    result = port_source(source)
    assert result.code == source
    assert [(u.line, u.api) for u in result.unported] == [
        (2, "torch.cuda.CUDAGraph"), (3, "torch.cuda.nvtx.range_push"), (4, "torch.version.cuda")]
    assert "graph" in result.unported[0].why and "record_function" in result.unported[1].why


def test_source_limits_the_port_to_one_family():
    result = port_source('import torch\na = "cuda"\nb = "mps"\n', "t.py", ("mps",))
    assert 'a = "cuda"' in result.code and "b = ACCELERATOR.type" in result.code


def test_a_source_that_does_not_parse_names_its_line_and_column():
    with pytest.raises(PortError, match=r"t\.py:2:5: cannot parse"):
        port_source("x = 1\ny = (\n", "t.py")


def test_the_rule_table_names_what_torch_has():
    for target in ACCELERATOR_NAMES.values():
        assert callable(getattr(torch.accelerator, target)), target
    for target in TORCH_NAMES.values():
        assert hasattr(torch, target), target
    assert namespace_rule("torch.cuda.synchronize").action == ACCEL
    import torch.distributed as dist

    assert callable(dist.get_default_backend_for_device)


def test_scan_and_port_agree():
    """Every site the scan flags is either rewritten or reported: none is left unmentioned."""
    for path in [*ROOT.glob("examples/*.py"), *ROOT.glob("tests/programs/*.py"), ROOT / "tests" / "scan" / "test_scan.py"]:
        source = path.read_text()
        result = port_source(source, str(path))
        left = {u.api for u in scan_source(result.code, str(path))
                if namespace_rule(u.api).action not in (AGNOSTIC, KEPT) or u.kind != "namespace"}
        assert left == {u.api for u in result.unported}, path
        assert left <= {u.api for u in scan_source(source, str(path))}
    result = port_source("import torch\nx = torch.cuda.graphs\ny = 'CUDA_VISIBLE_DEVICES' in os.environ\n")
    assert {u.api for u in result.unported} == {"torch.cuda.graphs", "env:CUDA_VISIBLE_DEVICES"}


# -- the command line -------------------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchdevice", "port", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_the_command_diffs_writes_walks_directories_and_reports(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    clean = tmp_path / "pkg" / "train.py"
    clean.write_text("import torch\nx = torch.ones(1).cuda()  # here\n")
    graphs = tmp_path / "pkg" / "sub" / "graphs.py"
    graphs.write_text("import torch\ng = torch.cuda.CUDAGraph()\n")
    before = clean.read_text()
    diff = _cli("pkg", cwd=tmp_path)
    assert diff.returncode == 1
    assert clean.read_text() == before  # --diff, the default, changes nothing
    assert "\n-x = torch.ones(1).cuda()  # here\n" in diff.stdout
    assert f"\n+{HEADER}\n+x = torch.ones(1).to(ACCELERATOR)  # here\n" in diff.stdout
    assert f"{Path('pkg', 'sub', 'graphs.py')}:2:5: not ported: torch.cuda.CUDAGraph: CUDA graphs" in diff.stderr
    assert "Traceback" not in diff.stderr
    wrote = _cli("--write", "pkg", cwd=tmp_path)
    assert wrote.returncode == 1 and wrote.stdout == ""
    assert "x = torch.ones(1).to(ACCELERATOR)  # here" in clean.read_text()
    assert _cli("--write", str(clean), cwd=tmp_path).returncode == 0  # all ported, and idempotent
    assert "ACCELERATOR.type" not in _cli(str(clean), cwd=tmp_path).stdout  # nothing left to change


@pytest.mark.parametrize("args, message", [
    (["missing.py"], "no such file or directory: missing.py"),
    (["bad.py"], "bad.py:2:5: cannot parse"),
    (["--source", "rocm", "bad.py"], "invalid choice: 'rocm' (choose from 'cuda', 'mps', 'xpu', 'mtia')"),
])
def test_bad_input_is_a_clear_error(tmp_path, args, message):
    (tmp_path / "bad.py").write_text("x = 1\ny = (\n")
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_the_command_line_loads_the_codemod_only_when_porting():
    """`torchdevice run` builds the same parser: libcst must not slow every start."""
    code = "import sys, torchdevice.cli as c; c.build_parser(); print('libcst' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
