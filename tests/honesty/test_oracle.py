"""The honesty test's own oracle: what each function *should* do on a host backend, written down
by hand from what the function means, never read from the matrix or from torchdevice's rules.

tests/honesty/test_published_status.py checks that the published status and the installed wrapper agree; both
come from the same rule table, so a consistently wrong rule (a working ``synchronize``
relabelled unsupported) would pass it. Here:

1. every catalog device function is called (with the examples beside the catalog) and its
   behaviour classified: *refuses* (raises UnsupportedError), *torch's own* object, *answers*
   (returns), or *unreadable here* (raises SensorUnavailableError: a host-sensor query on a host
   that exposes no such reading -- allowed only for the queries in :data:`HOST_SENSOR_QUERIES`);
2. the class must match the published status (unsupported <=> refuses);
3. a function may refuse only if it is in :data:`MAY_REFUSE` -- actions that cannot be
   honoured without the accelerator's runtime (graphs, allocators, IPC, external streams) --
   or in :data:`REFUSED_QUERIES`, the queries still refused (a known gap, listed so it shrinks);
4. actions with an observable effect are probed for it (seeding makes draws repeat, a peak
   reset resets the peak, a device switch is seen by ``current_device``), and functions
   published as ``no-op`` must leave every probe unchanged.
"""
from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from helpers import HOST_SENSOR_QUERIES, host_backends

import torchdevice
from torchdevice import SensorUnavailableError, UnsupportedError, catalog, translate
from torchdevice.data import catalog_examples as ex

ENTRIES = [e for e in catalog.entries() if e.section != "DISTRIBUTED_COMPUTING"]

#: Actions a host backend cannot honour: they need the accelerator's own runtime. Per function
#: name (shared by torch.cuda / xpu / mps / mtia) and the backends allowed to refuse them.
MAY_REFUSE: dict[str, str] = {
    "caching_allocator_alloc": "raw device pointers from CUDA's caching allocator",
    "caching_allocator_delete": "raw device pointers from CUDA's caching allocator",
    "caching_allocator_enable": "CUDA's caching allocator",
    "change_current_allocator": "a custom CUDA allocator",
    "use_mem_pool": "CUDA memory pools",
    "graph_pool_handle": "CUDA graphs",
    "get_stream_from_external": "a foreign runtime's stream pointer",
    "set_per_process_memory_fraction": "a memory cap the host allocator cannot enforce",
    "cudart": "the CUDA runtime library handle",
    "current_blas_handle": "a cuBLAS handle",
    "compile_shader": "Metal shader compilation",
    "record_memory_history": "the accelerator allocator's history recorder",
    "set_sync_debug_mode": "CUDA's synchronisation debug mode",
}

#: Queries that are still refused on a host backend although a program only asks them: a known
#: gap against "answer queries, refuse only actions", listed per backend so that it
#: shrinks (an entry whose query now answers fails :func:`test_the_refused_queries_list_is_exact`).
_HOST_TELEMETRY = ("clock_rate", "utilization", "list_gpu_processes", "temperature", "power_draw")  # cpu reads them
REFUSED_QUERIES: dict[str, frozenset[str]] = {
    "memory_usage": frozenset({"cpu", "mlx"}),  # memory-bus busy time: no host exposes it (perf privileges, bandwidth)
    **{name: frozenset({"mlx"}) for name in _HOST_TELEMETRY},  # MLX's device may be a GPU: no host figure fits
}

@pytest.fixture(scope="module")
def originals():
    return {ns: dict(vars(getattr(torch, ns))) for ns in ("cuda", "mps", "xpu", "mtia")}


@pytest.fixture(params=host_backends())
def host(request):
    rng = torch.get_rng_state()
    torchdevice.use(request.param)
    translate.patch()
    try:
        yield request.param
    finally:
        translate.unpatch()
        torchdevice.use(None)
        torch.set_rng_state(rng)


def _classify(fn, original, module, api) -> str:
    if original is not None and fn is original:
        return "torch's own"
    outcomes = set()
    for example in ex.examples(api):
        args, kwargs = example(module)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*args, **kwargs)
            outcomes.add("answers")
        except UnsupportedError:
            outcomes.add("refuses")
        except SensorUnavailableError as exc:
            assert api.rpartition(".")[2] in HOST_SENSOR_QUERIES, f"{api} raised {exc!r}: it reads no host sensor"
            assert exc.function == api and exc.tried and exc.instead, f"{api}: {exc!r}"
            outcomes.add("unreadable here")
    assert len(outcomes) == 1, f"{api}: some calls refuse, some answer: {outcomes}"
    return outcomes.pop()


@pytest.mark.parametrize("api", [e.api for e in ENTRIES])
def test_behaviour_matches_the_published_status_and_the_oracle(api, host, originals):
    from torchdevice import matrix

    entry = catalog.get(api)
    module = importlib.import_module(entry.namespace)
    ns = entry.namespace.split(".")[1]
    fn = getattr(module, entry.name)
    behaviour = _classify(fn, originals[ns].get(entry.name), module, api)
    status = matrix.status_for(api, host)[0].value
    assert (behaviour == "refuses") == (status == "unsupported"), f"{api} on {host}: {behaviour}, published {status}"
    if behaviour == "torch's own":  # torch's own object does what torch does: nothing is translated
        assert status == "native", f"{api} on {host} is torch's own object, published {status}"
    if behaviour == "refuses":
        assert entry.name in MAY_REFUSE or host in REFUSED_QUERIES.get(entry.name, ()), (
            f"{api} refuses on {host}, but it is neither an action a host cannot honour nor a known refused query")


@pytest.mark.parametrize("name", sorted(REFUSED_QUERIES))
def test_the_refused_queries_list_is_exact(name, host):
    """Each listed gap is still there (else the list would excuse a regression to refusing it)."""
    checked = 0
    for ns in ("cuda", "xpu", "mps", "mtia"):
        fn = getattr(getattr(torch, ns), name, None)
        if fn is None or catalog.get(f"torch.{ns}.{name}") is None:
            continue
        refused = []
        for example in ex.examples(f"torch.{ns}.{name}"):
            args, kwargs = example(getattr(torch, ns))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn(*args, **kwargs)
                refused.append(False)
            except SensorUnavailableError:  # answered "not readable on this host": not a refusal
                refused.append(False)
            except UnsupportedError:
                refused.append(True)
        assert refused and all(refused) == (host in REFUSED_QUERIES[name]), (
            f"torch.{ns}.{name} on {host}: refused {refused}, listed for {sorted(REFUSED_QUERIES[name])}")
        checked += 1
    assert checked, f"{name} is in no namespace's catalog"


def _probes(module) -> dict:
    """Everything a no-op must leave as it was."""
    return {
        "rng": module.get_rng_state().clone() if hasattr(module, "get_rng_state") else None,
        "device": module.current_device() if hasattr(module, "current_device") else None,
        "allocated": module.memory_allocated() if hasattr(module, "memory_allocated") else None,
        "stream": module.current_stream() if hasattr(module, "current_stream") else None,
    }


def _same(a, b) -> bool:
    """Probes equal; memory within 1 MiB (cpu reads the process's resident set, which moves by a few
    pages with anything the interpreter does; a no-op that held memory would move it by more)."""
    def same(key):
        if isinstance(a[key], torch.Tensor):
            return torch.equal(a[key], b[key])
        if key == "allocated" and a[key] is not None:
            return abs(a[key] - b[key]) < 1 << 20
        return a[key] == b[key]

    return all(same(k) for k in a)


def _published_no_ops() -> list[tuple[str, str]]:
    from torchdevice import matrix

    return [(b, e.api) for b in host_backends() for e in ENTRIES if matrix.status_for(e.api, b)[0].value == "no-op"]


@pytest.mark.parametrize(("backend", "api"), _published_no_ops())
def test_a_published_no_op_changes_nothing(backend, api, originals):
    torchdevice.use(backend)
    translate.patch()
    try:
        entry = catalog.get(api)
        module = importlib.import_module(entry.namespace)
        for example in ex.examples(api):
            args, kwargs = example(module)
            before = _probes(module)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(module, entry.name)(*args, **kwargs)
            assert _same(before, _probes(module)), f"{api} is published as a no-op on {backend} but changed state"
    finally:
        translate.unpatch()
        torchdevice.use(None)


@pytest.mark.parametrize("ns", ["cuda", "xpu", "mtia", "mps"])
def test_actions_have_their_effect(ns, host):
    module = getattr(torch, ns)

    def draw():
        return torch.randn(4, device=ns)

    module.manual_seed(1234)
    first = draw().cpu()
    module.manual_seed(1234)
    assert torch.equal(first, draw().cpu()), f"torch.{ns}.manual_seed does not make draws repeat"
    if hasattr(module, "initial_seed"):
        assert module.initial_seed() == 1234
    state = module.get_rng_state()
    again = draw().cpu()
    module.set_rng_state(state)
    assert torch.equal(again, draw().cpu()), f"torch.{ns}.set_rng_state does not restore the generator"
    assert module.synchronize() is None
    if hasattr(module, "set_device") and hasattr(module, "current_device"):
        module.set_device(0)
        assert module.current_device() == 0
    if hasattr(module, "manual_seed_all"):
        module.manual_seed_all(99)
        first = draw().cpu()
        module.manual_seed_all(99)
        assert torch.equal(first, draw().cpu()), f"torch.{ns}.manual_seed_all does not make draws repeat"
    if hasattr(module, "seed") and hasattr(module, "initial_seed"):
        module.seed()  # a fresh seed, which initial_seed reports
        first = draw().cpu()
        module.manual_seed(module.initial_seed())
        assert torch.equal(first, draw().cpu()), f"torch.{ns}.seed: initial_seed does not give the seed in use"
    if all(hasattr(module, n) for n in ("Stream", "set_stream", "current_stream", "stream")):
        default, mine = module.current_stream(), module.Stream()
        assert mine != default
        module.set_stream(mine)
        assert module.current_stream() == mine, f"torch.{ns}.set_stream is not seen by current_stream"
        module.set_stream(default)
        with module.stream(mine):
            assert module.current_stream() == mine, f"torch.{ns}.stream() is not seen by current_stream"
        assert module.current_stream() == default
    if hasattr(module, "memory_allocated"):
        before = module.memory_allocated()
        block = torch.ones(64 << 20, dtype=torch.uint8, device=ns)  # written, so resident
        assert module.memory_allocated() - before >= 32 << 20, f"torch.{ns}.memory_allocated misses 64 MiB"
        del block
    if hasattr(module, "reset_peak_memory_stats") and hasattr(module, "max_memory_allocated"):
        block = torch.empty(8 << 20, dtype=torch.uint8, device=ns)
        del block
        module.reset_peak_memory_stats()
        assert module.max_memory_allocated() == module.memory_allocated(), f"torch.{ns} peak not reset"
