"""Truth test of the MLX lowerings against torch's own OpInfo database.

Every OpInfo whose ATen op has a lowering in :data:`~torchdevice_mlx.lowerings.LOWERINGS`
(matched by name, plus :data:`EXTRA` for ``nn.functional`` ops that reach lowered ATen ops)
is run on its float32 CPU samples twice -- natively and with MLX-backed inputs -- and the
outputs compared (``rtol=atol=1e-4``); where the OpInfo supports autograd, the gradients of
the inputs are compared too. A sample that fell back to the host for any op is recorded.

Regenerate the table (needs ``pip install expecttest``), then the matrix that includes it::

    python -m torchdevice_mlx.opinfo plugins/torchdevice-mlx/torchdevice_mlx/OPS.md
    torchdevice matrix --write docs/compatibility.md
"""
from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .conversion import fallback_counts
from .lowerings import LOWERINGS
from .tensor import MLXTensor

if TYPE_CHECKING:
    from torch.testing._internal.opinfo.core import OpInfo

EXTRA = ("nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d", "nn.functional.embedding",
         "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
         "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
         "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
         "nn.functional.batch_norm", "nn.functional.group_norm", "nn.functional.pad",
         "nn.functional.scaled_dot_product_attention", "nn.functional.linear", "nn.functional.softplus",
         "nn.functional.leaky_relu", "nn.functional.hardtanh", "nn.functional.elu",
         "softmax", "log_softmax", "matmul", "reshape", "div", "max", "min", "__getitem__", "take_along_dim",
         "masked_fill", "narrow", "split", "chunk", "unbind", "diagonal", "as_strided", "unfold", "movedim",
         "repeat", "roll", "einsum", "outer", "dot", "mv", "linalg.vector_norm", "norm", "nan_to_num",
         "addmv", "index_add", "index_copy", "index_fill", "argsort", "msort", "max_pool2d_with_indices_backward")
MAX_SAMPLES = 6
#: Ops whose output is uninitialised memory: nothing to compare.
UNCOMPARABLE = {"empty_like", "new_empty", "empty", "new_empty_strided", "empty_strided"}
#: Factories: their samples take no tensor, so nothing would run in MLX (their lowerings serve captured graphs,
#: checked by the torch.compile tests).
UNCOMPARABLE |= {"arange", "full", "zeros", "ones", "scalar_tensor"}
#: Variants whose samples read storage outside the input tensor (a view into a larger host storage):
#: an MLX tensor made from such an input holds that tensor's elements only, so nothing to compare
#: (as_strided outside an MLX tensor's own storage raises).
UNCOMPARABLE_VARIANTS = {"as_strided.partial_views"}


@dataclass
class Row:
    op: str
    how: str  # "lowered": the ATen op has an MLX lowering; "composite": torch decomposes it into ops that do
    samples: int
    forward: str  # "pass", "FAIL: ...", "error: ..."
    backward: str
    fallbacks: str  # ops that fell back on these samples ("" when all ran in MLX)


def lowered_names() -> set[str]:
    return {op.overloadpacket.__name__ for op in LOWERINGS if hasattr(op, "overloadpacket")}


def selected_opinfos(names: list[str] | None = None) -> list[OpInfo]:
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db

    if not frozen and torch.backends.flags_frozen():
        # torch's test utilities freeze torch.backends flags on import (for torch's own suite);
        # leave the process as it was
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True

    wanted = set(names) if names else lowered_names() | set(EXTRA)
    wanted -= UNCOMPARABLE
    return [op for op in op_db if op.name in wanted and row_name(op) not in UNCOMPARABLE_VARIANTS]


def row_name(opinfo: OpInfo) -> str:
    return opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")


def _to_mlx(x: Any) -> Any:
    return MLXTensor.from_torch(x.detach()).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x


def _host(x: Any) -> Any:
    return x.torch_cpu() if isinstance(x, MLXTensor) else x


def _grads(opinfo: OpInfo, sample: Any, convert: Callable[[Any], Any]) -> tuple[Any, tuple[torch.Tensor, ...] | None]:
    inp = tree_map(convert, sample.input)
    args = tree_map(convert, sample.args)
    kwargs = tree_map(convert, sample.kwargs)
    out = opinfo(inp, *args, **kwargs)
    leaves = [t for t in tree_flatten(inp)[0] + tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
    leaves = [t for t in leaves if t.requires_grad]
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs or not leaves:
        return out, None
    total = reduce(operator.add, (o.float().sum() for o in outs))
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return out, grads


def check(opinfo: OpInfo) -> Row:
    before = fallback_counts()
    fwd, bwd, n = "pass", ("pass" if opinfo.supports_autograd else "n/a"), 0
    try:
        samples = list(opinfo.sample_inputs("cpu", torch.float32, requires_grad=opinfo.supports_autograd))
    except Exception as exc:  # noqa: BLE001 -- the database cannot build samples here: say so in the table
        return Row(row_name(opinfo), _how(opinfo), 0, f"error: samples ({type(exc).__name__})", "n/a", "")
    for sample in samples[:MAX_SAMPLES]:
        n += 1
        try:
            want, want_g = _grads(opinfo, sample, lambda x: x)
        except Exception:  # noqa: BLE001, S112 -- torch itself refuses this sample: nothing to compare
            continue
        try:
            got, got_g = _grads(opinfo, sample, _to_mlx)
            torch.testing.assert_close(tree_map(_host, got), want, rtol=1e-4, atol=1e-4, equal_nan=True,
                                       check_device=False)
        except Exception as exc:  # noqa: BLE001 -- any failure is a FAIL row in the table
            fwd = f"FAIL: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
            bwd = "n/a"
            break
        if want_g is not None and bwd == "pass":
            try:
                for a, b in zip(want_g, got_g or ()):
                    if a is not None:
                        torch.testing.assert_close(_host(b), a, rtol=1e-4, atol=1e-4, check_device=False)
            except Exception as exc:  # noqa: BLE001 -- any failure is a FAIL row in the table
                bwd = f"FAIL: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    after = fallback_counts()
    fell = sorted(k for k in after if after[k] != before.get(k, 0))
    return Row(row_name(opinfo), _how(opinfo), n, fwd, bwd, ", ".join(fell))


def check_float64(opinfo: OpInfo) -> str:
    """``"pass"`` when every float64 sample's output on MLX-backed inputs equals torch's within float64
    precision (``rtol=1e-10, atol=1e-12``), a ``"FAIL: ..."`` line otherwise, ``"n/a"`` without float64
    samples. MLX computes some float64 kernels at float32 precision; those must run on the host."""
    if torch.float64 not in opinfo.supported_dtypes("cpu"):
        return "n/a"
    try:
        samples = list(opinfo.sample_inputs("cpu", torch.float64))[:MAX_SAMPLES]
    except Exception:  # noqa: BLE001 -- the database cannot build samples here
        return "n/a"
    for sample in samples:
        try:
            want = opinfo(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001, S112 -- torch itself refuses this sample: nothing to compare
            continue
        try:
            got = opinfo(_to_mlx(sample.input), *tree_map(_to_mlx, sample.args), **tree_map(_to_mlx, sample.kwargs))
            torch.testing.assert_close(tree_map(_host, got), want, rtol=1e-10, atol=1e-12, equal_nan=True,
                                       check_device=False)
        except Exception as exc:  # noqa: BLE001 -- any failure is a FAIL
            return f"FAIL: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    return "pass"


def _how(opinfo: OpInfo) -> str:
    name = (getattr(opinfo, "aten_name", None) or opinfo.name).split(".")[-1]
    return "lowered" if name in lowered_names() else "composite"


def table(rows: list[Row]) -> str:
    lines = [
        "## mlx: ATen ops in MLX, checked against torch's OpInfo database",
        "",
        (
            "Generated by `python -m torchdevice_mlx.opinfo plugins/torchdevice-mlx/torchdevice_mlx/OPS.md` "
            f"(torch {torch.__version__}, mlx[cpu] on Linux: not hardware-verified on Metal or MLX-CUDA); do not "
            f"edit. Each op's first {MAX_SAMPLES} float32 OpInfo samples run on MLX-backed tensors and on torch "
            "CPU, outputs (forward) and input gradients (backward) compared at rtol=atol=1e-4. *Lowered*: the "
            "ATen op has an MLX lowering; *composite*: torch rewrites it (CompositeImplicit kernel or "
            "decomposition) into ops that have one. *Host fallbacks*: ATen ops that ran on torch CPU for those "
            "samples (empty: everything ran in MLX). Every other op falls back to the host, counted "
            "(`torchdevice run --report`)."
        ),
        "",
        "| op | in MLX | samples | forward | backward | host fallbacks |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| `{r.op}` | {r.how} | {r.samples} | {r.forward} | {r.backward} | {r.fallbacks} |")
    passed = sum(r.forward == "pass" for r in rows)
    backward = sum(r.backward == "pass" for r in rows)
    lines += ["", f"{passed}/{len(rows)} ops pass forward, {backward} pass backward (the others have no gradient "
              "to check)."]
    return "\n".join(lines) + "\n"



def main(argv: list[str]) -> int:
    rows = [check(op) for op in selected_opinfos()]
    text = table(rows)
    if argv:
        with open(argv[0], "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
