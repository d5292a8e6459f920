"""``torch.cuda.tunable`` (TunableOp, GEMM kernel tuning of CUDA/ROCm BLAS libraries): its queries answer False,
its settings are refused (rows ``"tunable.<name>"``, patched in ``torch.cuda.tunable`` only).

torch's own functions call ``torch._C._cuda_tunableop_*``, which a build without CUDA lacks (an AttributeError)."""
from __future__ import annotations

from typing import Any, Callable

from ..router import Target
from .rules import TRANSLATED, declared
from .table import declare_unsupported, fronts

_QUERIES = ("tunable.is_enabled", "tunable.tuning_is_enabled", "tunable.record_untuned_is_enabled")


@fronts(_QUERIES, declared(TRANSLATED, "False: TunableOp tunes CUDA/ROCm BLAS kernels, which the {backend} backend "
                                       "does not run, so it is never on"))
def build_query(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def query() -> bool:
        return False

    query.__name__ = query.__qualname__ = name
    return query


declare_unsupported(
    tuple(f"tunable.{name}" for name in (
        "enable", "tuning_enable", "record_untuned_enable", "set_max_tuning_duration", "get_max_tuning_duration",
        "set_max_tuning_iterations", "get_max_tuning_iterations", "set_filename", "get_filename", "get_results",
        "get_validators", "read_file", "tune_gemm_in_file", "mgpu_tune_gemm_in_file", "set_rotating_buffer_size",
        "get_rotating_buffer_size", "set_numerical_check_tolerances")),
    "TunableOp tunes CUDA/ROCm BLAS kernels, which the {backend} backend does not run: leave it off "
    "(torch.{ns}.tunable.is_enabled() is False; PYTORCH_TUNABLEOP_ENABLED has no effect there)")
