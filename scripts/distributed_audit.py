"""The audit of docs/distributed.md: every site in torch's distributed machinery (``torch/distributed``,
``torch/nn/parallel``) and ``torch/_utils.py`` that asks a ``torch.cuda.*``/``torch.accelerator.*``
question or a device-type helper, found by reading torch's sources.

``python scripts/distributed_audit.py`` prints the table's rows (file, API, lines); tests/test_distributed_audit.py
checks that docs/distributed.md lists exactly these rows and that each is answered as the table says.
"""
from __future__ import annotations

import ast
import functools
import os
import sys
from collections import defaultdict

#: the namespaces whose functions are questions about the machine or device operations
NAMESPACES = ("cuda", "xpu", "accelerator")
#: torch._utils's device helpers (and FSDP's handle helper)
HELPERS = ("_get_available_device_type", "_get_device_module", "_get_device_handle")
#: the trees audited, relative to torch's package
TREES = ("distributed", os.path.join("nn", "parallel"), "_utils.py")


def _files(torch_dir: str) -> list[str]:
    found = []
    for tree in TREES:
        path = os.path.join(torch_dir, tree)
        if os.path.isfile(path):
            found.append(path)
            continue
        for root, _dirs, names in os.walk(path):
            found += [os.path.join(root, n) for n in names if n.endswith(".py")]
    return sorted(found)


def _dotted(node: ast.AST) -> str | None:
    """``torch.cuda.is_available`` for the attribute chain ``node``, or None (the scanner's chain reader)."""
    from torchdevice.scan.syntax import _chain_parts

    chain = _chain_parts(node)
    return None if chain is None else ".".join([chain[0].id, *chain[1]])


def _asked(node: ast.AST) -> str | None:
    """The API the code ``node`` names, if audited: ``torch.<ns>.<name>``, a helper, ``Tensor.is_cuda``."""
    if isinstance(node, ast.Attribute):
        dotted = _dotted(node)
        parts = dotted.split(".") if dotted else []
        if len(parts) == 3 and parts[0] == "torch" and parts[1] in NAMESPACES:
            return dotted
        if node.attr in HELPERS:
            return node.attr
        if node.attr == "is_cuda":
            return "Tensor.is_cuda"
    if isinstance(node, ast.Name) and node.id in HELPERS:
        return node.id
    if isinstance(node, ast.alias) and node.name in HELPERS:
        return node.name
    return None


@functools.cache  # parsing torch's distributed sources takes about 2 s; the table and the tests read them once
def sites(torch_dir: str) -> dict[tuple[str, str], list[int]]:
    """``{(file relative to torch, API asked): [line, ...]}`` for every audited site in code (docstrings and
    comments, which name ``torch.cuda.set_device`` in examples, are not code). Cached: do not change it."""
    rows: dict[tuple[str, str], set[int]] = defaultdict(set)
    for path in _files(torch_dir):
        rel = os.path.relpath(path, torch_dir).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            api = _asked(node)
            if api is not None and api.rsplit(".", 1)[-1] not in ("__name__",):
                line = getattr(node, "lineno", None)
                if line is None:  # an alias of ``from torch._utils import _get_device_module`` (3.9: no lineno)
                    continue
                rows[(rel, api)].add(line)
    return {key: sorted(lines) for key, lines in sorted(rows.items())}


#: the machine questions torchdevice answers per caller (torchdevice.boundary.MACHINE_QUERIES), as the table says them
_QUESTIONS = ("is_available", "device_count", "current_device", "get_device_properties", "get_device_capability",
              "get_device_name", "is_bf16_supported", "is_initialized")
_ACCELERATOR_QUESTIONS = ("is_available", "device_count", "current_accelerator", "current_device_index")
_HELPERS = ("_get_available_device_type", "_get_device_module", "_get_device_handle")


def kind(rel: str, api: str) -> str:
    """What the site asks: ``question`` (a torch.cuda/xpu machine question), ``accelerator``, ``helper``,
    ``tensor`` (``Tensor.is_cuda``) or ``action`` (a device operation, run only behind a device-type check)."""
    ns, _, name = api.rpartition(".")
    if ns in ("torch.cuda", "torch.xpu") and name in _QUESTIONS:
        return "question"
    if ns == "torch.accelerator" and name in _ACCELERATOR_QUESTIONS:
        return "accelerator"
    if api in _HELPERS:
        return "helper"
    if api == "Tensor.is_cuda":
        return "tensor"
    return "action"


#: per kind: what the site was told before issue 31 (torch/distributed and torch/nn/parallel then counted as
#: the program's own code), and what it is told now (torch's own code: the real machine)
TOLD = {
    "question": ("translated: the target, as the source device", "torch's real answer"),
    "accelerator": ("torch's real answer", "torch's real answer"),
    "helper": ("torch's helper, answering for the real machine while its callers were told CUDA",
               "torch's helper, answering for the real machine, as its callers are"),
    "tensor": ("the tensor's real device", "the tensor's real device"),
    "action": ("a device operation, not a question; the file's questions were answered as the program's",
               "a device operation, not a question; the file's questions describe the real machine"),
}


def markdown(torch_dir: str) -> str:
    """The audit table of docs/distributed.md."""
    lines = ["| file (under `torch/`) | asks | lines | told before issue 31 | told now |", "|---|---|---|---|---|"]
    for (rel, api), numbers in sites(torch_dir).items():
        before, now = TOLD[kind(rel, api)]
        if rel == "_utils.py" and kind(rel, api) == "question":
            before = "torch's real answer"
        lines.append(f"| `{rel}` | `{api}` | {', '.join(map(str, numbers))} | {before} | {now} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    import torch

    sys.stdout.write(markdown(os.path.dirname(torch.__file__)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
