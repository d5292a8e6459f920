"""Hugging Face transformers on the translation target.

``Trainer`` already takes its CUDA path under translation:
``TrainingArguments`` picks ``cuda:0`` (the target's device) because
``torch.cuda.is_available()`` is True, and ``n_gpu`` is the translated
``torch.cuda.device_count()``. Its mixed precision (``fp16=True``,
``bf16=True``) is accelerate's, adapted by the ``accelerate`` integration.

What this integration adapts is the one question transformers answers from
the CUDA *build* rather than the device: ``is_torch_tf32_available()``
requires ``torch.version.cuda``, so ``TrainingArguments(tf32=True)`` raised
"--tf32 requires Ampere or a newer GPU arch" on every translated run. Under
translation it is answered from the translated capability (TF32 where the
device is Ampere-class, 8.0 and up, as ``torch.cuda.get_device_capability()``
reports it), and ``tf32=True`` then sets torch's fp32 matmul precision hint as
on a GPU. Modules that copied the function keep a wrapper that answers as
transformers does again once translation is off.
"""
from __future__ import annotations

import functools
from typing import Any

from . import Integration, current_target

_NAME = "is_torch_tf32_available"


class TransformersIntegration(Integration):
    name = "transformers"
    framework = "Hugging Face transformers (Trainer, TrainingArguments(tf32=True))"
    modules = ("transformers.utils", "transformers.training_args")

    def __init__(self) -> None:
        self._wrapped: dict[int, Any] = {}  # id(original) -> its wrapper, one per original

    def _wrapper(self, original: Any, target: Any) -> Any:
        if getattr(original, "__torchdevice_original__", None) is not None:
            return original  # already ours (a module that copied it from a patched one)
        if id(original) not in self._wrapped:

            @functools.wraps(original)
            def is_torch_tf32_available() -> bool:
                import torch

                current = current_target()
                if current is None or "cuda" not in current.sources:
                    return original()
                if not torch.cuda.is_available():
                    return False
                return torch.cuda.get_device_capability(torch.cuda.current_device())[0] >= 8

            is_torch_tf32_available.__torchdevice_original__ = original  # type: ignore[attr-defined]
            self._wrapped[id(original)] = is_torch_tf32_available
        return self._wrapped[id(original)]

    def install(self, patcher: Any, target: Any, module: Any) -> None:
        if "cuda" not in target.sources:
            return
        namespaces = [module]
        if module.__name__ == "transformers.utils":
            import_utils = getattr(module, "import_utils", None)
            if import_utils is not None:
                namespaces.append(import_utils)
        for namespace in namespaces:
            original = vars(namespace).get(_NAME)
            if callable(original):
                patcher.set(namespace, _NAME, self._wrapper(original, target))
