"""Hugging Face accelerate on the translation target.

``Accelerator(mixed_precision="fp16")`` turns AMP on only when
``self.device.type != "cpu"``: on a CPU target (where the translated
``cuda:0`` is the CPU) it silently trains in float32 with no loss scaling.
This integration gives a CUDA-written program what CUDA gives it: after
accelerate's own ``__init__``, an fp16 Accelerator whose device is the
translated GPU gets ``native_amp`` and accelerate's own ``GradScaler``
(``torch.amp.GradScaler("cuda")``, translated to the target), so
``accelerator.autocast()``, the prepared model's forward and
``accelerator.backward`` run float16 autocast and real loss scaling on the
target (:mod:`torchdevice.amp`). ``bf16`` already runs real bfloat16 autocast
on the target through accelerate's CPU path: nothing to adapt.

A program that asked for the CPU (``cpu=True``, ``ACCELERATE_USE_CPU``,
``TrainingArguments(use_cpu=True)``), or runs with
``TORCHDEVICE_REPORT_AVAILABLE=0``, keeps accelerate's CPU behaviour.
transformers' ``Trainer`` builds its Accelerator the same way, so
``TrainingArguments(fp16=True)`` is covered here too.
"""
from __future__ import annotations

import functools
from typing import Any

from . import Integration


class AccelerateIntegration(Integration):
    name = "accelerate"
    framework = "Hugging Face accelerate (Accelerator mixed precision), also under transformers.Trainer"
    modules = ("accelerate.accelerator",)

    def install(self, patcher: Any, target: Any, module: Any) -> None:
        if "cuda" not in target.sources:
            return
        import torch

        accelerator_cls = module.Accelerator
        distributed_type = module.DistributedType
        orig_init = patcher.get(accelerator_cls, "__init__")

        @functools.wraps(orig_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            orig_init(self, *args, **kwargs)
            state = self.state
            if (self.native_amp or state.mixed_precision != "fp16" or getattr(state, "_cpu", False)
                    or self.distributed_type in (distributed_type.DEEPSPEED, distributed_type.MEGATRON_LM)
                    or self.device.type != target.device_type or not torch.cuda.is_available()):
                return
            # what accelerate does for fp16 on a CUDA device, the scaler translated to the target
            self.native_amp = True
            scaler_kwargs = self.scaler_handler.to_kwargs() if self.scaler_handler is not None else {}
            if getattr(self, "is_fsdp2", False):
                self.scaler = module.get_fsdp2_grad_scaler(device="cuda", **scaler_kwargs)
            else:
                self.scaler = module.get_grad_scaler(self.distributed_type, **scaler_kwargs)

        patcher.set(accelerator_cls, "__init__", __init__)
