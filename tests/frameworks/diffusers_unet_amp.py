"""diffusers' UNet2DModel trained with mixed precision in channels_last, written for an NVIDIA GPU (run
unmodified by sim's truth run).

    python diffusers_unet_amp.py [--steps 3]

A tiny ``UNet2DModel`` with attention blocks (built from its config, nothing downloaded) is trained as a
DDPM noise predictor: ``torch.autocast("cuda", float16)`` with a ``GradScaler``, then a fresh copy with
``torch.autocast("cuda", bfloat16)``, both in ``channels_last`` (group_norm, conv and attention on
channels_last inputs). Images, noise and timesteps come from a seeded host generator, as diffusers'
pipelines take one. Prints each step's loss, the scaler's scale and the trained weights' sum (the output's
layout on stderr).
"""
import copy
import sys

import torch
import torch.nn.functional as F
from diffusers import UNet2DModel

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3
assert torch.cuda.is_available(), "written for NVIDIA GPUs"
device = torch.device("cuda")
torch.manual_seed(0)
template = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
                       norm_num_groups=4, attention_head_dim=4,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"))
host = torch.Generator().manual_seed(1)
images = torch.randn(steps, 4, 3, 16, 16, generator=host)
noises = torch.randn(steps, 4, 3, 16, 16, generator=host)
timesteps = torch.randint(0, 1000, (steps, 4), generator=host)
alphas = torch.linspace(0.999, 0.01, 1000)

for dtype in (torch.float16, torch.bfloat16):
    unet = copy.deepcopy(template).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype is torch.float16)
    for step in range(steps):
        a = alphas[timesteps[step]].view(-1, 1, 1, 1)
        noisy = (a.sqrt() * images[step] + (1 - a).sqrt() * noises[step]).to(device, non_blocking=True)
        noisy = noisy.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=dtype):
            predicted = unet(noisy, timesteps[step].to(device)).sample
            loss = F.mse_loss(predicted.float(), noises[step].to(device))
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"{str(dtype).removeprefix('torch.')} step {step}: loss {loss.item():.6f} ({predicted.dtype})")
        # the output's layout is the device's convolution's (cuDNN: channels_last; torch's model of a
        # PrivateUse1 device: contiguous), so it is not among the numbers compared
        print(f"channels_last output: {predicted.is_contiguous(memory_format=torch.channels_last)}", file=sys.stderr)
    weights = sum(float(p.detach().double().sum()) for p in unet.parameters())
    print(f"{str(dtype).removeprefix('torch.')}: scale {scaler.get_scale() if scaler.is_enabled() else 1.0}, "
          f"weight sum {weights:.6f}")
