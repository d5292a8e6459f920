"""A tiny diffusers pipeline (built from a config, nothing downloaded) run with
``enable_model_cpu_offload()``, the call that needs an accelerator: diffusers finds it through
``torch.accelerator`` (``TorchDeviceBackend._detect_device_type``).

``--no-offload``: the same pipeline without offloading (the native CPU reference, where diffusers
finds no accelerator). Prints one JSON line: the accelerator diffusers found, where the model was
while the pipeline ran and after, and the image.
"""
import json
import sys

import torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

torch.manual_seed(0)
unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                   block_out_channels=(8, 16), norm_num_groups=4,
                   down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"))
pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10))
seen = []
unet.register_forward_pre_hook(lambda module, args: seen.append(str(args[0].device)))
offload = "--no-offload" not in sys.argv
if offload:
    pipe.enable_model_cpu_offload()
image = pipe(batch_size=1, num_inference_steps=3, generator=torch.Generator().manual_seed(0), output_type="np").images
print(json.dumps({
    "offload": offload,
    "accelerator": str(torch.accelerator.current_accelerator()) if torch.accelerator.is_available() else None,
    "execution_device": str(pipe._execution_device),
    "unet_ran_on": sorted(set(seen)),
    "unet_after": str(next(unet.parameters()).device),
    "image": [float(v) for v in image.reshape(-1)[:32]],
    "image_sum": float(image.sum()),
}))
