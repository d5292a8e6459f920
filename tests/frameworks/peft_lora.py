"""A CUDA-written peft program: LoRA on a tiny transformers model, two training steps on ``cuda``,
``save_pretrained`` of the adapter (safetensors), the adapter reloaded with
``PeftModel.from_pretrained`` onto ``cuda`` (named, and inferred by peft), and the base model itself
saved as a safetensors checkpoint and reloaded with ``from_pretrained(..., device_map="cuda")``.
``--load-only`` only reloads what an earlier run saved and runs the forward.

Run through ``torchdevice run`` it is translated onto the target; ``--device cpu`` is its hand port
(the same program with every ``"cuda"`` written as ``"cpu"``), run natively as the reference. No hub
download: the model is built from a config with a fixed seed. Prints one JSON line.

    torchdevice run --backend cpu tests/frameworks/peft_lora.py --out OUT
    python tests/frameworks/peft_lora.py --device cpu --out OUT
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def base_model(device: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config()).to(device)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", help="the port passes cpu")
    parser.add_argument("--out", type=Path, required=True, help="folder for the adapter and the checkpoint")
    parser.add_argument("--load-only", action="store_true",
                        help="only reload what an earlier run saved in --out (base and adapter) and run the forward")
    parser.add_argument("--train-only", action="store_true",
                        help="stop after training: the numbers a port to a device safetensors cannot load onto gives")
    args = parser.parse_args()
    device = args.device
    if args.load_only:
        return load_only(args.out, device)
    seen: dict = {"cuda_available": torch.cuda.is_available()}

    # the base model as a safetensors checkpoint, reloaded with device_map onto the device
    base = base_model(device)
    base.save_pretrained(args.out / "base")  # safetensors by default
    reloaded_base = LlamaForCausalLM.from_pretrained(args.out / "base", device_map=device)
    seen["base_reload_device"] = str(next(reloaded_base.parameters()).device)
    seen["base_reload_is_cuda"] = next(reloaded_base.parameters()).is_cuda
    seen["base_reload_equal"] = all(torch.equal(a, b) for a, b in
                                    zip(base.state_dict().values(), reloaded_base.state_dict().values()))

    # LoRA: one training step on the device
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            lora_dropout=0.0, init_lora_weights="gaussian"))
    torch.manual_seed(1)
    ids = torch.randint(0, 64, (2, 16), device=device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(2):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    seen["losses"] = losses
    model.eval()
    with torch.no_grad():
        trained = model(input_ids=ids).logits
    if args.train_only:
        seen.update(logits=trained[0, :4, :4].cpu().tolist(), logits_sum=trained.double().sum().item())
        print(json.dumps(seen))
        return
    model.save_pretrained(args.out / "adapter")
    seen["adapter_files"] = sorted(p.name for p in (args.out / "adapter").iterdir())

    # the adapter reloaded onto a fresh base model on the device
    fresh = base_model(device)
    loaded = PeftModel.from_pretrained(fresh, args.out / "adapter", torch_device=device)
    loaded.eval()
    lora = {name: p for name, p in loaded.named_parameters() if "lora_" in name}
    seen["lora_devices"] = sorted({str(p.device) for p in lora.values()})
    seen["lora_is_cuda"] = all(p.is_cuda for p in lora.values())
    with torch.no_grad():
        again = loaded(input_ids=ids).logits
    seen["reloaded_equal"] = torch.equal(trained, again)
    seen["logits"] = again[0, :4, :4].cpu().tolist()
    seen["logits_sum"] = again.double().sum().item()
    # and as most programs write it: no device named, peft places the adapter on the device it infers
    # (``infer_device()``: "cuda" when torch.cuda.is_available())
    inferred = PeftModel.from_pretrained(base_model(device), args.out / "adapter").eval()
    with torch.no_grad():
        seen["inferred_equal"] = torch.equal(trained, inferred(input_ids=ids).logits)
    seen["inferred_devices"] = sorted({str(p.device) for name, p in inferred.named_parameters() if "lora_" in name})
    seen["lora_sums"] = {name: p.detach().double().sum().item() for name, p in sorted(lora.items())}
    print(json.dumps(seen))


def load_only(out: Path, device: str) -> None:
    base = LlamaForCausalLM.from_pretrained(out / "base", device_map=device)
    model = PeftModel.from_pretrained(base, out / "adapter").eval()
    torch.manual_seed(1)
    ids = torch.randint(0, 64, (2, 16), device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    print(json.dumps({"lora_is_cuda": all(p.is_cuda for name, p in model.named_parameters() if "lora_" in name),
                      "base_is_cuda": all(p.is_cuda for name, p in model.named_parameters() if "lora_" not in name),
                      "logits": logits[0, :4, :4].cpu().tolist(), "logits_sum": logits.double().sum().item()}))


if __name__ == "__main__":
    main()
