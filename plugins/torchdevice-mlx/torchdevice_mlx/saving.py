"""Saving MLX tensors with libraries that read torch's storage: safetensors, and ``save_pretrained`` on it.

An :class:`~torchdevice_mlx.tensor.MLXTensor` has no host storage (its data is an ``mx.array``):
``tensor.untyped_storage().data_ptr()`` raises "Attempted to access the data pointer on an invalid
python storage" and ``tensor.data_ptr()`` is 0. safetensors reads both -- to find tensors sharing
storage (tied weights) and to copy the bytes out -- so ``safetensors.torch.save_file``/``save``/
``save_model`` of a model on the device failed, and with them transformers', peft's and diffusers'
``save_pretrained`` (``torch.save`` works: an MLXTensor pickles as a host tensor).

The integration :class:`SafetensorsIntegration` (declared by the mlx backend's
``torchdevice_integrations`` hook, active while translating to ``mlx``) adapts ``safetensors.torch``
when it is imported:

* what it writes (``_flatten_as_ptr``, ``_flatten`` in older releases) and how ``save_model`` finds
  shared names (``_remove_duplicate_names``) get the tensors through :func:`host_tensors`: each MLX
  tensor becomes a host tensor over **one host copy per MLX base**, at the tensor's own size, stride
  and storage offset, so tensors sharing an MLX base share host storage exactly as they would
  natively (``save_model`` keeps one of a tied pair, ``save_file`` refuses shared ones, as natively);
* ``storage_ptr``/``storage_size`` (what transformers and peft key shared tensors on) answer for an
  MLX tensor with its base's identity (``id`` of the base tensor: one key per storage, distinct from
  every live host allocation) and its base's byte size -- in safetensors and in the libraries that copied
  or re-implemented them (transformers, huggingface_hub's shard splitter, peft and accelerate's
  ``id_tensor_storage``): :data:`ADAPTED` lists them. A library with its own copy not listed there still
  fails on MLX tensors.

Loading needs nothing: ``load_file(path, device="cuda")`` and ``from_pretrained`` place the loaded
host tensors on the device through translation.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from .tensor import MLXTensor

#: safetensors' torch module, the first the integration adapts (all are in :data:`ADAPTED`)
MODULE = "safetensors.torch"


def _base(tensor: MLXTensor) -> MLXTensor:
    """The MLX tensor whose data ``tensor`` views (itself for a base)."""
    return tensor._base_t if tensor._base_t is not None else tensor


def _storage_bytes(tensor: MLXTensor) -> int:
    """The bytes of the storage ``tensor`` views: its base's."""
    base = _base(tensor)
    return base.numel() * base.element_size()


def host_alias(tensor: MLXTensor, bases: dict[int, torch.Tensor]) -> torch.Tensor:
    """A host tensor with ``tensor``'s values over the host copy of its base kept in ``bases`` (made once per
    base): same size, stride and storage offset as ``tensor``, so aliasing is what torch's would be."""
    base = _base(tensor)
    if tensor.dtype != base.dtype:  # a dtype view (view(torch.int32) ...): its own copy, not an alias
        return cast(MLXTensor, tensor.detach()).torch_cpu()
    host = bases.get(id(base))
    if host is None:
        host = bases[id(base)] = cast(MLXTensor, base.detach()).torch_cpu()
    if tensor is base:
        return host
    return host.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())


def host_tensors(tensors: Mapping[str, Any]) -> Any:
    """``tensors`` with every MLX tensor replaced by its :func:`host_alias` (one host copy per MLX base);
    ``tensors`` itself when it holds none (or is not a mapping: safetensors' own errors then apply)."""
    if not isinstance(tensors, Mapping) or not any(isinstance(v, MLXTensor) for v in tensors.values()):
        return tensors
    bases: dict[int, torch.Tensor] = {}
    return {k: host_alias(v, bases) if isinstance(v, MLXTensor) else v for k, v in tensors.items()}


def _storage_key(tensor: Any) -> int | None:
    return id(_base(tensor)) if isinstance(tensor, MLXTensor) else None


def _taking_host_tensors(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original(tensors, ...)`` given :func:`host_tensors` of its first argument."""

    @functools.wraps(original)
    def wrapper(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        return original(host_tensors(tensors), *args, **kwargs)

    return wrapper


def _storage_ptr(original: Callable[[torch.Tensor], int]) -> Callable[[torch.Tensor], int]:
    @functools.wraps(original)
    def storage_ptr(tensor: torch.Tensor) -> int:
        key = _storage_key(tensor)
        return original(tensor) if key is None else key

    return storage_ptr


def _storage_size(original: Callable[[torch.Tensor], int]) -> Callable[[torch.Tensor], int]:
    @functools.wraps(original)
    def storage_size(tensor: torch.Tensor) -> int:
        if isinstance(tensor, MLXTensor):
            return _storage_bytes(tensor)
        return original(tensor)

    return storage_size


def _storage_id(original: Callable[[torch.Tensor], tuple]) -> Callable[[torch.Tensor], tuple]:
    """``id_tensor_storage`` (``(device, storage pointer, storage bytes)``) answering for MLX tensors."""

    @functools.wraps(original)
    def id_tensor_storage(tensor: torch.Tensor) -> tuple:
        if isinstance(tensor, MLXTensor):
            return tensor.device, id(_base(tensor)), _storage_bytes(tensor)
        return original(tensor)

    return id_tensor_storage


_HOST = _taking_host_tensors
#: module -> {function name: how its wrapper is made}: safetensors' own (what it writes, how save_model finds
#: shared names, its storage queries) and the libraries that copied or re-implemented its storage queries
#: at import to key tied weights on (transformers, huggingface_hub's shard splitter under save_pretrained,
#: peft, accelerate); a module is adapted when it has been imported
ADAPTED: dict[str, dict[str, Callable[[Any], Callable[..., Any]]]] = {
    MODULE: {"_flatten_as_ptr": _HOST, "_flatten": _HOST, "_remove_duplicate_names": _HOST,
             "storage_ptr": _storage_ptr, "storage_size": _storage_size},
    "transformers.pytorch_utils": {"storage_ptr": _storage_ptr, "storage_size": _storage_size},
    "huggingface_hub.serialization._torch": {"storage_ptr": _storage_ptr, "get_torch_storage_size": _storage_size},
    "peft.utils.other": {"id_tensor_storage": _storage_id},
    "peft.utils": {"id_tensor_storage": _storage_id},
    "peft.peft_model": {"id_tensor_storage": _storage_id},
    "accelerate.utils.modeling": {"id_tensor_storage": _storage_id},
    "accelerate.utils.other": {"id_tensor_storage": _storage_id},
    "accelerate.utils": {"id_tensor_storage": _storage_id},
}


class SafetensorsIntegration:
    """Makes ``safetensors.torch`` and the libraries in :data:`ADAPTED` save MLX tensors (see the module
    docstring); it changes nothing unless the target is the mlx backend."""

    name = "mlx-safetensors"
    framework = ("safetensors' save_file/save/save_model and save_pretrained (transformers, peft, diffusers) "
                 "of MLX tensors")
    modules = tuple(ADAPTED)

    def __init__(self) -> None:
        #: id(original function) -> (it, its wrapper): one wrapper per original, wherever it was copied
        self._wrappers: dict[int, tuple[Callable[..., Any], Callable[..., Any]]] = {}

    def _wrapper(self, original: Callable[..., Any], make: Callable[[Any], Callable[..., Any]]) -> Callable[..., Any]:
        entry = self._wrappers.get(id(original))
        if entry is None:
            wrapper = make(original)
            wrapper.__torchdevice_original__ = original  # type: ignore[attr-defined]
            entry = self._wrappers[id(original)] = (original, wrapper)
        return entry[1]

    def install(self, patcher: Any, target: Any, module: Any) -> None:
        if getattr(target, "name", None) != "mlx":
            return
        for name, make in ADAPTED.get(module.__name__, {}).items():
            found = getattr(module, name, None)
            if callable(found) and getattr(found, "__torchdevice_original__", None) is None:  # not already ours
                patcher.set(module, name, self._wrapper(found, make))


#: the one instance the backend declares (the same object on every call, so its wrappers stay the same)
INTEGRATION = SafetensorsIntegration()
