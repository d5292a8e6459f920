"""Saving a model that lives on MLX: safetensors and ``save_pretrained``.

An MLXTensor has no host storage, so safetensors (and every ``save_pretrained`` on it) failed with
"Attempted to access the data pointer on an invalid python storage". Each test runs one program natively
on the CPU and translated onto mlx from the same seed, and compares what it saved: the same names (tied
weights kept once, as natively) and identical values, reloaded.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchdevice
from torchdevice.testing import router_sandbox
from torchdevice_mlx.tensor import MLXTensor

safetensors_torch = pytest.importorskip("safetensors.torch")


def _has(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _assert_same(native: dict[str, torch.Tensor], translated: dict[str, torch.Tensor]) -> None:
    assert sorted(translated) == sorted(native)
    for name, value in native.items():
        assert torch.equal(translated[name], value), name


def _tied(device: str) -> nn.Module:
    model = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 4), nn.Linear(6, 10, bias=False))
    model[2].weight = model[0].weight  # tied, as an LM head to its embedding
    return model.to(device)


def test_save_file_and_save_model_write_native_files(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        model = _tied(device)
        if device == "cuda":
            assert isinstance(model[0].weight, MLXTensor)
        safetensors_torch.save_model(model, str(folder / "model.safetensors"))
        x = torch.randn(4, 5, device=device)
        safetensors_torch.save_file({"x": x, "cols": x[:, 1:3].contiguous(), "t": x.t().contiguous()},
                                    str(folder / "plain.safetensors"))
        blob = safetensors_torch.save({"x2": x * 2})
        loaded = safetensors_torch.load_file(str(folder / "model.safetensors"))
        loaded.update(safetensors_torch.load_file(str(folder / "plain.safetensors")))
        loaded.update(safetensors_torch.load(blob))
        return loaded

    native, translated = native_and_mlx(program, tmp_path)
    assert "2.weight" not in native and "0.weight" in native  # save_model kept one of the tied pair
    _assert_same(native, translated)


def test_shared_tensors_are_refused_as_natively(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        with pytest.raises(RuntimeError, match="share memory"):
            safetensors_torch.save_file(_tied(device).state_dict(), str(folder / "x.safetensors"))
        x = torch.randn(3, 4, device=device)
        with pytest.raises(RuntimeError, match="share memory"):  # a row slice is a view sharing x's storage
            safetensors_torch.save_file({"x": x, "rows": x[1:]}, str(folder / "y.safetensors"))
        return {}

    native_and_mlx(program, tmp_path)


def test_load_file_onto_the_device_roundtrips(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        model = _tied(device)
        safetensors_torch.save_model(model, str(folder / "m.safetensors"))
        loaded = safetensors_torch.load_file(str(folder / "m.safetensors"), device=device)
        if device == "cuda":
            assert all(isinstance(v, MLXTensor) for v in loaded.values())
        return {k: v.cpu() for k, v in loaded.items()}

    _assert_same(*native_and_mlx(program, tmp_path))


def test_integration_is_mlx_only_and_undone() -> None:
    original = safetensors_torch.storage_ptr
    with router_sandbox(), torchdevice.use("cpu"), torchdevice.patched():
        assert safetensors_torch.storage_ptr is original
    with router_sandbox(), torchdevice.use("mlx"), torchdevice.patched():
        assert safetensors_torch.storage_ptr is not original
    assert safetensors_torch.storage_ptr is original


def _tiny_gpt2(device: str) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).to(device)


@pytest.mark.skipif(not _has("transformers"), reason="transformers is not installed")
def test_transformers_save_pretrained(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    from transformers import GPT2LMHeadModel

    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        model = _tiny_gpt2(device)
        assert model.lm_head.weight is model.transformer.wte.weight
        model.save_pretrained(folder)
        saved = safetensors_torch.load_file(str(folder / "model.safetensors"))
        reloaded = GPT2LMHeadModel.from_pretrained(folder).to(device)
        for name, value in model.state_dict().items():
            assert torch.equal(reloaded.state_dict()[name].cpu(), value.cpu()), name
        return saved

    _assert_same(*native_and_mlx(program, tmp_path))


@pytest.mark.skipif(not (_has("transformers") and _has("peft")), reason="transformers and peft are not installed")
def test_peft_save_pretrained(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=2, target_modules=["c_attn"], init_lora_weights=False, fan_in_fan_out=True)
        model = get_peft_model(_tiny_gpt2("cpu"), config).to(device)
        model.save_pretrained(folder)
        return safetensors_torch.load_file(str(folder / "adapter_model.safetensors"))

    native, translated = native_and_mlx(program, tmp_path)
    assert native
    _assert_same(native, translated)


@pytest.mark.skipif(not _has("diffusers"), reason="diffusers is not installed")
def test_diffusers_save_pretrained(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        from diffusers import UNet2DModel

        unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1, block_out_channels=(4, 8),
                           norm_num_groups=2, down_block_types=("DownBlock2D", "DownBlock2D"),
                           up_block_types=("UpBlock2D", "UpBlock2D")).to(device)
        unet.save_pretrained(folder)
        reloaded = UNet2DModel.from_pretrained(folder)
        return {k: v.cpu() for k, v in reloaded.state_dict().items()}

    _assert_same(*native_and_mlx(program, tmp_path))


@pytest.mark.skipif(not _has("accelerate"), reason="accelerate is not installed")
def test_accelerate_save_model(tmp_path: Path, native_and_mlx: Callable[..., Any]) -> None:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    def program(device: str, folder: Path) -> dict[str, torch.Tensor]:
        AcceleratorState._reset_state(True)  # one Accelerator per run: the native one, then the translated one
        accelerator = Accelerator()
        model = accelerator.prepare(_tied("cpu"))
        if device == "cuda":
            assert isinstance(model[0].weight, MLXTensor)
        accelerator.save_model(model, folder)
        return safetensors_torch.load_file(str(folder / "model.safetensors"))

    try:
        native, translated = native_and_mlx(program, tmp_path)
    finally:
        AcceleratorState._reset_state(True)
    assert "2.weight" not in native
    _assert_same(native, translated)
