"""The honesty test: every catalog function does what `torchdevice matrix --format json` says it does.

With translation to the CPU backend on, every device function of the seed
catalog (torch.cuda, torch.mps, torch.xpu, torch.mtia) is called with the
valid arguments kept beside the catalog (torchdevice/data/catalog_examples.py):

* a function whose status on cpu is not "unsupported" must return its
  documented type without raising;
* an "unsupported" one must raise torchdevice.UnsupportedError naming the
  function and the backend (and saying what to use instead);
* a host-sensor query (:data:`HOST_SENSOR_QUERIES`) may instead raise
  torchdevice.SensorUnavailableError on a host without that reading, naming the
  function, the backend, what was tried and what to use instead;
* a "native" facade-less one is torch's own object, untouched; every other one
  is replaced, carries the same status tag, and is traced under its name.

The statuses are read from the real command line's JSON, so the CLI is what
is checked against behaviour. The torch.distributed functions run the same
way on a 2-process gloo group started with `init_process_group("nccl")`
(tests/honesty/_dist_worker.py). The MLX backend is checked too where it can
run.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import HOST_SENSOR_QUERIES, host_backends, run_command, run_torchdevice

import torchdevice
from torchdevice import SensorUnavailableError, UnsupportedError, catalog, namespaces, trace, translate
from torchdevice.backend import STATUS_ATTR
from torchdevice.data import catalog_examples as ex

DEVICE_ENTRIES = [e for e in catalog.entries() if e.section != "DISTRIBUTED_COMPUTING"]
DIST_ENTRIES = catalog.entries("DISTRIBUTED_COMPUTING")

@pytest.fixture(scope="module")
def cli_statuses():
    """``{backend: {api: {"status", "note"}}}`` from ``torchdevice matrix --format json``."""
    args = ["matrix", "--format", "json"]
    for b in host_backends():
        args += ["--backend", b]
    result = run_torchdevice(*args, timeout=180)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return {b: {f["api"]: f["status"][b] for f in data["functions"]} for b in data["backends"]}


@pytest.fixture(scope="module")
def originals():
    import torch.cuda.comm  # noqa: F401

    return {ns: dict(vars(getattr(torch, ns))) for ns in namespaces.NAMESPACES}


@pytest.fixture(params=host_backends())
def translating(request, originals, cli_statuses):
    backend = request.param
    rng = torch.get_rng_state()
    torchdevice.use(backend)
    translate.patch()
    try:
        yield backend, cli_statuses[backend]
    finally:
        translate.unpatch()
        torchdevice.use(None)
        torch.set_rng_state(rng)


def test_the_catalog_is_complete():
    counts = {s: len(catalog.entries(s)) for s in catalog.SECTIONS}
    assert counts == {"CUDA_OPERATIONS": 76, "MPS_OPERATIONS": 13, "XPU_OPERATIONS": 35, "MTIA_OPERATIONS": 21,
                      "DISTRIBUTED_COMPUTING": 56}
    for entry in DEVICE_ENTRIES:
        assert ex.examples(entry.api), entry.api


@pytest.mark.parametrize("api", [e.api for e in DEVICE_ENTRIES])
def test_function_does_what_the_matrix_says(api, translating, originals):
    backend, statuses = translating
    entry = catalog.get(api)
    status = statuses[api]["status"]
    module = importlib.import_module(entry.namespace)
    fn = getattr(module, entry.name)
    original = originals[entry.namespace.rpartition(".")[2]].get(entry.name)
    spec = namespaces.SPECS[entry.name]
    if status == "native" and spec.build is None and original is not None:
        assert fn is original, f"{api} is native: it must be torch's own object"
    elif original is not None:
        assert fn is not original, f"{api} is {status} but still torch's own"
        tag = getattr(fn, STATUS_ATTR, None)
        if tag is not None:
            assert tag[0].value == status, f"{api}: the installed function says {tag[0]}, the matrix {status}"
    documented = ex.documented_return(api, entry.returns)
    traced = status != "native" or spec.build is not None
    for example in ex.examples(api):
        args, kwargs = example(module)
        trace.reset()
        trace.start_report()
        unreadable = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                if status == "unsupported":
                    with pytest.raises(UnsupportedError) as info:
                        fn(*args, **kwargs)
                else:
                    try:
                        value = fn(*args, **kwargs)
                    except SensorUnavailableError as exc:
                        unreadable = exc
            uses = {u.api: u for u in trace.report_data()}
            probes = trace.other_family_probes()
        finally:
            trace.stop_report()
            trace.reset()
        if status == "unsupported":
            assert info.value.function == api and info.value.backend == backend
            assert api in str(info.value) and repr(backend) in str(info.value)
            assert info.value.instead, f"{api}: the error must say what to use instead"
            assert uses[api].how == "unsupported"
            continue
        if unreadable is not None:  # a question answered "this host has no such reading"
            assert entry.name in HOST_SENSOR_QUERIES, f"{api} raised {unreadable!r} but reads no host sensor"
            assert unreadable.function == api and unreadable.backend == backend, repr(unreadable)
            assert unreadable.tried and unreadable.instead, f"{api}: say what was tried and what to use instead"
            assert uses[api].how.startswith(status), f"{api} was not traced as {status}"
            continue
        assert ex.returns_ok(documented, value, module), (
            f"{api}{args}: returned {value!r} ({type(value).__name__}), documented {documented}")
        if status == "no-op":
            assert value is None or value is args[0], f"{api} is a no-op but returned {value!r}"
        if api in trace.quiet:  # another family's availability probe: counted, not listed (docs/porting.md)
            assert probes >= 1 and api not in uses, f"{api} was not counted as another family's probe"
        elif traced and entry.name not in ("Stream", "Event"):
            assert api in uses and uses[api].how.startswith(status), f"{api} was not traced as {status}"
        else:
            assert api not in uses


def test_torch_cuda_comm_and_nvtx_agree_with_the_matrix(translating):
    backend, _ = translating
    from torchdevice import matrix

    x = torch.ones(2, device="cuda")
    calls = {
        "torch.cuda.comm.broadcast": lambda: torch.cuda.comm.broadcast(x, [0]),
        "torch.cuda.comm.broadcast_coalesced": lambda: torch.cuda.comm.broadcast_coalesced([x], [0]),
        "torch.cuda.comm.reduce_add": lambda: torch.cuda.comm.reduce_add([x], 0),
        "torch.cuda.comm.reduce_add_coalesced": lambda: torch.cuda.comm.reduce_add_coalesced([[x]], 0),
        "torch.cuda.comm.scatter": lambda: torch.cuda.comm.scatter(x, [0]),
        "torch.cuda.comm.gather": lambda: torch.cuda.comm.gather([x], 0, 0),
        "torch.cuda.nvtx.range_push": lambda: torch.cuda.nvtx.range_push("a"),
        "torch.cuda.nvtx.range_pop": lambda: torch.cuda.nvtx.range_pop(),
        "torch.cuda.nvtx.mark": lambda: torch.cuda.nvtx.mark("m"),
    }
    # what a working call returns, from torch's documentation of each function (one device, index 0)
    def same(ts):
        return len(ts) == 1 and torch.equal(ts[0].cpu(), x.cpu()) and ts[0].device == x.device

    expect = {
        "torch.cuda.comm.broadcast": same,
        "torch.cuda.comm.broadcast_coalesced": lambda r: len(r) == 1 and same(r[0]),
        "torch.cuda.comm.reduce_add": lambda r: torch.equal(r.cpu(), x.cpu()),
        "torch.cuda.comm.reduce_add_coalesced": lambda r: len(r) == 1 and torch.equal(r[0].cpu(), x.cpu()),
        "torch.cuda.comm.scatter": same,
        "torch.cuda.comm.gather": lambda r: torch.equal(r.cpu(), x.cpu()),
        "torch.cuda.nvtx.range_push": lambda r: r == 0,  # zero-based depth of the range started
        "torch.cuda.nvtx.range_pop": lambda r: r == 0,  # ... and of the range ended
        "torch.cuda.nvtx.mark": lambda r: r is None,
    }
    for api, fn in calls.items():
        status, _ = matrix.status_for(api, backend)
        if status.value == "unsupported":
            with pytest.raises(UnsupportedError, match=api.replace(".", r"\.")):
                fn()
        else:
            result = fn()
            assert expect[api](result), f"{api} ({status.value}) returned {result!r}"


@pytest.fixture(scope="module")
def dist_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / "results.json"
    worker = Path(__file__).with_name("_dist_worker.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}
    result = run_command([sys.executable, str(worker), str(out)], env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(out.read_text())
    return {int(rank): per for rank, per in data.items()}


@pytest.mark.parametrize("api", [e.api for e in DIST_ENTRIES])
def test_distributed_function_does_what_the_matrix_says(api, dist_results, cli_statuses):
    name = api.rpartition(".")[2]
    status = cli_statuses["cpu"][api]["status"]
    for rank, results in dist_results.items():
        outcome = results[name]
        if status == "unsupported":
            assert not outcome["ok"] and outcome["unsupported"], f"rank {rank}: {outcome}"
            assert api in outcome["message"] and "'cpu'" in outcome["message"]
        else:
            assert outcome["ok"], f"rank {rank}: {name} raised {outcome.get('error')}: {outcome.get('message')}\n" \
                                  f"{outcome.get('traceback', '')}"
            assert outcome["type_ok"], f"rank {rank}: {name} returned {outcome['type']}, documented " \
                                       f"{outcome['documented']}"
