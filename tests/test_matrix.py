"""torchdevice matrix: statuses derived from what the backends register; docs/compatibility.md kept fresh."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from helpers import run_torchdevice

from torchdevice import catalog, matrix, namespaces, router, translate
from torchdevice.backend import Status, emulated, translated, unsupported
from torchdevice.cpu import CPUBackend, CPUMemory

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"


def test_every_catalog_function_has_one_status_on_every_installed_backend():
    names = matrix.installed_backends()
    assert names[0] == "cpu"
    rows = matrix.rows(names)
    assert len(rows) == 201
    for row in rows:
        assert set(row.statuses) == set(names)
        for status, note in row.statuses.values():
            assert isinstance(status, Status)
            assert note, f"{row.api}: every status comes with a note"
    counts = matrix.counts(rows, names)
    for section, per in counts.items():
        for b in names:
            assert sum(per[b].values()) == len(catalog.entries(section))


def test_a_namespace_on_its_own_device_type_is_native():
    for name in matrix.installed_backends():
        v = matrix.view(name)
        if v.device_type in namespaces.NAMESPACES:
            for entry in catalog.entries():
                if entry.namespace == f"torch.{v.device_type}":
                    assert matrix.status_for(entry.api, name)[0] is Status.NATIVE


class _TaggedMemory(CPUMemory):
    """A backend's memory family with other tags than the CPU's."""

    memory_allocated = unsupported("memory_allocated", "read the fake chip's counters")

    @emulated("counted by the fake backend")
    def memory_reserved(self, index: int) -> int:
        return 4096

    @translated("the fake chip's load sensor")
    def utilization(self, index: int) -> int:  # an optional operation
        return 42


class _TaggedBackend(CPUBackend):
    name = "tagged"
    priority = -1
    description = "test backend with its own tags"

    def memory(self):
        return _TaggedMemory(self.name)


def test_statuses_follow_the_backends_tags_and_calls_follow_the_statuses(router_state, restore_rng):
    """Nothing is a hand-kept table: change a backend's tags and the matrix and the calls change with them."""
    router_state.register(_TaggedBackend())
    assert "tagged" in matrix.installed_backends()
    answer = matrix.status_for("torch.cuda.memory_allocated", "tagged")
    assert answer == (Status.UNSUPPORTED, "read the fake chip's counters")
    assert matrix.status_for("torch.cuda.memory_allocated", "cpu")[0] is Status.TRANSLATED
    assert matrix.status_for("torch.cuda.memory_reserved", "tagged")[0] is Status.EMULATED
    assert matrix.status_for("torch.cuda.memory_cached", "tagged")[0] is Status.EMULATED  # derived from it
    assert matrix.status_for("torch.mps.driver_allocated_memory", "tagged")[0] is Status.EMULATED
    assert matrix.status_for("torch.cuda.utilization", "tagged") == (Status.TRANSLATED, "the fake chip's load sensor")
    assert matrix.status_for("torch.cuda.memory_usage", "cpu")[0] is Status.UNSUPPORTED  # no host exposes it
    assert matrix.status_for("torch.cuda.temperature", "cpu")[0] is Status.TRANSLATED  # hwmon/thermal, where exposed

    import torchdevice

    torchdevice.use("tagged")
    translate.patch()
    try:
        with pytest.raises(torchdevice.UnsupportedError) as info:
            torch.cuda.memory_allocated()
        assert info.value.function == "torch.cuda.memory_allocated" and info.value.backend == "tagged"
        assert info.value.instead == "read the fake chip's counters"
        assert torch.cuda.memory_reserved() == 4096
        assert torch.cuda.utilization() == 42
    finally:
        translate.unpatch()


def test_cli_json_matches_the_library():
    result = run_torchdevice("matrix", "--format", "json", "--backend", "cpu", timeout=180)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["backends"] == ["cpu"]
    assert len(data["functions"]) == 201
    expected = matrix.data(["cpu"])
    assert data["functions"] == json.loads(json.dumps(expected["functions"]))
    first = data["functions"][0]
    assert set(first) == {"api", "section", "arguments", "more_arguments", "returns", "status"}
    assert set(first["status"]["cpu"]) == {"status", "note"}


def test_cli_markdown_and_errors():
    result = run_torchdevice("matrix", "--backend", "cpu", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "| `torch.cuda.memory_allocated` | translated |" in result.stdout
    bad = run_torchdevice("matrix", "--backend", "no-such-backend", timeout=180)
    assert bad.returncode == 2 and "unknown backend 'no-such-backend'" in bad.stderr


# What each spelling the scan meets must be on the CPU backend, from what that backend is (not
# from torchdevice's rules): host figures and host-side equivalents are translated; what the CPU
# generator, gloo and torch's build facts already are is native; streams/events/comm copies that
# torchdevice implements are emulated; flags and annotations with nothing to act on are no-ops.
SCAN_SPELLINGS = {
    "torch.cuda.memory_allocated": "translated", "torch.cuda.memory.memory_allocated": "translated",
    "torch.cuda.random.manual_seed": "native", "torch.cuda.streams.Event": "emulated", "torch.cuda.Stream": "emulated",
    "torch.cuda.nvtx.range_push": "no-op", "torch.cuda.comm.broadcast": "emulated",
    "torch.cuda.amp.autocast": "translated", "torch.cuda.amp": "translated", "torch.autocast": "translated",
    "torch.amp.GradScaler": "translated", "torch.distributed.init_process_group": "translated",
    "torch.distributed.all_reduce": "native", "torch.backends.cudnn.benchmark": "no-op",
    "torch.backends.cudnn.is_available": "native", "torch.backends.cuda.matmul.allow_tf32": "no-op",
    "torch.backends.mps.is_available": "translated", "device:cuda": "translated", "device:cuda:1": "translated",
    "device:mps": "translated", "device:cpu": "native", ".cuda()": "translated", ".xpu()": "translated",
    ".is_cuda": "translated", "dist-backend:gloo": "native", "dist-backend:nccl": "translated",
    "torch.get_device_module": "translated",
}
# submodule spellings answer exactly as the namespace's own name
ALIASES = {"torch.cuda.memory.memory_allocated": "torch.cuda.memory_allocated",
           "torch.cuda.random.manual_seed": "torch.cuda.manual_seed", "torch.cuda.streams.Event": "torch.cuda.Event"}


@pytest.mark.parametrize("api", sorted(SCAN_SPELLINGS))
def test_status_for_the_scan_helper(api):
    answer = matrix.status_for(api, "cpu")
    assert answer is not None, api
    status, note = answer
    assert isinstance(status, Status) and note
    assert status.value == SCAN_SPELLINGS[api], f"{api}: {status.value} ({note})"
    if api in ALIASES:
        assert answer == matrix.status_for(ALIASES[api], "cpu")


def test_status_for_unknown_apis_and_default_backend():
    assert matrix.status_for("torch.add", "cpu") is None
    assert matrix.status_for("torch.cuda.no_such_function", "cpu") is None
    assert matrix.status_for("torch.cuda.memory_allocated") == matrix.status_for(
        "torch.cuda.memory_allocated", router.active().name)


def _doc_backends(text: str) -> list[str]:
    found = re.search(r"backends: ([\w,.-]+) -->", text)
    assert found, "docs/compatibility.md lacks its generated header"
    return found.group(1).split(",")


def _pinned_torch() -> str:
    """The torch version constraints.txt pins (the one docs/compatibility.md is generated with)."""
    pins = (DOC.parents[1] / "constraints.txt").read_text(encoding="utf-8")
    found = re.search(r"^torch==(\S+)", pins, re.MULTILINE)
    assert found, "constraints.txt pins no torch"
    return found.group(1)


def test_compatibility_doc_is_not_stale():
    pinned = _pinned_torch()
    if torch.__version__.split("+")[0] != pinned:
        # the document lists the names of torch's own namespaces (torch.xpu._sleep is new in 2.14)
        pytest.skip(f"docs/compatibility.md is generated with torch {pinned} (constraints.txt); this is torch {torch.__version__}")
    text = DOC.read_text(encoding="utf-8")
    doc_backends = _doc_backends(text)
    installed = matrix.installed_backends()
    missing_here = [b for b in doc_backends if b not in installed]
    if missing_here:
        pytest.skip(f"docs/compatibility.md covers backends not installed here: {missing_here}")
    # the document describes this repository's plugins; one installed ahead of them (the simulated
    # accelerator of docs/testing.md, a fork) answers for its own backend
    ours = {"cpu": "torchdevice", **{b: f"torchdevice-{b}" for b in matrix.PROJECT_BACKENDS if b != "cpu"}}
    others = {r.name: r.distribution for r in router.discover().values()
              if r.name in doc_backends and r.distribution != ours.get(r.name)}
    if others:
        pytest.skip(f"docs/compatibility.md describes this repository's plugins; installed instead: {others}")
    project_installed = [b for b in matrix.PROJECT_BACKENDS if b in installed]
    assert set(project_installed) <= set(doc_backends), (
        "docs/compatibility.md lacks installed backends; regenerate: torchdevice matrix --write docs/compatibility.md")
    assert matrix.render_md(doc_backends) == text, (
        "docs/compatibility.md is stale; regenerate: torchdevice matrix --write docs/compatibility.md")


SEED = Path(__file__).parent / "fixtures" / "seeds"


def test_catalog_json_matches_the_seed():
    seed = catalog.find_seed(SEED)  # the copy kept in the repository: no file outside it is read
    assert seed is not None and seed.name == json.loads(catalog.DATA.read_text(encoding="utf-8"))["source"]
    expected = catalog.render(catalog.parse_seed(seed.read_text(encoding="utf-8")), seed.name)
    assert catalog.DATA.read_text(encoding="utf-8") == expected, "regenerate: python -m torchdevice.catalog"


def test_the_catalog_names_module_lists_every_catalog_function_of_each_namespace():
    from torchdevice.data.catalog_names import NAMES

    by_namespace: dict[str, set[str]] = {}
    for entry in catalog.entries():
        by_namespace.setdefault(entry.namespace, set()).add(entry.name)
    assert NAMES == by_namespace, "regenerate: python -m torchdevice.catalog"


def test_a_note_shown_for_one_backend_names_that_backend():
    # notes differing only by the backend's name are merged under a "<backend>" placeholder; a
    # note left for a single backend must name it
    text = matrix.render_md()
    single = []
    for line in text.splitlines():
        if not line.startswith("- `"):
            continue
        for part in line.split(" — ", 1)[1].split("; "):
            owners, _, note = part.partition(": ")
            if "," not in owners and "<backend>" in note:
                single.append((owners, note))
    assert not single, single[:3]
    assert "<backend>" in text  # notes shared by several backends keep the placeholder
