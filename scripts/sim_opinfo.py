"""sim against torch's OpInfo database: every op's first samples (float32) run on the CPU and on sim, forward
and backward (the gradients of the outputs' sum), compared. One command, outside the default test run
(a few minutes)::

    python scripts/sim_opinfo.py [--samples 3] [--only NAME ...] [--json OUT]

An op that runs an aten op tagged ``nondeterministic_seeded`` (a random draw) is listed as random, not
compared: sim draws from its own generator, as a GPU does. Exits 1 when an op fails that ``KNOWN`` does not explain.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

#: ops whose difference is not sim's: name -> why
KNOWN = {
    "as_strided": "reads the storage behind the view: a copy to the device is compact (so on CUDA too)",
    "tensor_split": "torch requires the indices tensor on the CPU (so on CUDA too)",
    "to_sparse": "sim makes no sparse tensors",
    "sparse.mm": "sim makes no sparse tensors",
    "sparse.sampled_addmm": "sim makes no sparse tensors",
    "native_batch_norm": "in eval, the saved statistics take the meta kernel's shape (C,), unused and uninitialised; "
                         "the CPU kernel returns them empty",
    "_native_batch_norm_legit": "as native_batch_norm",
    **{name: "uninitialised memory: nothing to compare" for name in (
        "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided")},
}


def _moved(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    return value


def _leaves(tree: Any, grad: bool = False) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor) and (t.requires_grad or not grad)]


def _run(info: Any, args: tuple, kwargs: dict, backward: bool) -> list[torch.Tensor | None]:
    out = info.op(*args, **kwargs)
    if not backward:
        return [t.cpu() for t in _leaves(out)]
    inputs, outputs = _leaves((args, kwargs), grad=True), _leaves(out, grad=True)
    grads = torch.autograd.grad(sum(o.sum() for o in outputs), inputs, allow_unused=True)
    return [None if g is None else g.cpu() for g in grads]


def _same(ref: list, got: list) -> str:
    """'' where equal within float32 rounding, else what differs."""
    if len(ref) != len(got):
        return f"{len(got)} results, {len(ref)} expected"
    for r, g in zip(ref, got):
        if r is None or g is None:
            if (r is None) != (g is None):
                return "a gradient is missing on one side"
            continue
        r, g = (t.to_dense() if t.layout != torch.strided else t for t in (r, g))
        if r.shape != g.shape or r.dtype != g.dtype:
            return f"{g.dtype} {tuple(g.shape)}, {r.dtype} {tuple(r.shape)} expected"
        if r.dtype.is_floating_point or r.dtype.is_complex:
            if not torch.allclose(g, r, rtol=1e-4, atol=1e-4, equal_nan=True):
                return f"values differ by up to {(g - r).abs().nan_to_num().max().item():.3g}"
        elif not torch.equal(g, r):
            return "values differ"
    return ""


class _Seeded(TorchDispatchMode):
    """Records whether an aten op tagged ``nondeterministic_seeded`` ran (OpInfo's random ops seed themselves,
    so their CPU results do not change with the caller's seed)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.seen = self.seen or torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


def _random(info: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the op draws random numbers."""
    with _Seeded() as mode:
        _run(info, args, kwargs, backward=False)
    return mode.seen


def check(info: Any, samples: int, backward: bool) -> str:
    """'ok', 'random', 'skipped' or the failure."""
    try:
        found = list(info.sample_inputs("cpu", torch.float32, requires_grad=backward))[:samples]
    except Exception:  # an OpInfo that cannot make CPU samples here: nothing to compare
        return "skipped"
    compared = False
    for sample in found:
        args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
        if backward and not _leaves((args, kwargs), grad=True):
            continue
        try:
            ref = _run(info, args, kwargs, backward)
        except Exception:  # the CPU refuses this sample: nothing to compare
            continue
        if _random(info, args, kwargs):
            return "random"
        try:
            got = _run(info, *pytree.tree_map(lambda v: _moved(v, "sim"), (args, kwargs)), backward)
            torch.sim.synchronize()
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        why = _same(ref, got)
        if why:
            return why
        compared = True
    return "ok" if compared else "skipped"


def main() -> int:
    warnings.filterwarnings("ignore")  # the samples' own (degrees of freedom, reductions ...), twice each
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--json")
    args = parser.parse_args()
    import torchdevice_sim

    torchdevice_sim.load()
    from torch.testing._internal.common_methods_invocations import op_db

    rows: dict[str, dict[str, str]] = {}
    for info in op_db:
        if args.only and info.name not in args.only or not info.supports_dtype(torch.float32, "cpu"):
            continue
        rows[info.name] = {"forward": check(info, args.samples, backward=False),
                           "backward": check(info, args.samples, backward=True) if info.supports_autograd else "n/a"}
    counts: dict[str, int] = {}
    unexplained = []
    for name, row in rows.items():
        for side, result in row.items():
            kind = result if result in ("ok", "random", "skipped", "n/a") else "known" if name in KNOWN else "failed"
            counts[f"{side} {kind}"] = counts.get(f"{side} {kind}", 0) + 1
            if kind in ("known", "failed"):
                print(f"{name} ({side}): {result}" + (f" -- {KNOWN[name]}" if kind == "known" else ""))
            if kind == "failed":
                unexplained.append(name)
    print(f"{len(rows)} OpInfos, torch {torch.__version__}:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows, "counts": counts}, f, indent=1)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
