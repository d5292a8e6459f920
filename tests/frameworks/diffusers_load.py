"""diffusers' safetensors loader onto a CUDA device: a tiny UNet (built from a config, nothing downloaded)
saved with ``save_pretrained`` on the host, then ``UNet2DModel.from_pretrained(folder, device_map=DEVICE)``
(diffusers reads the safetensors file straight onto that device) and one forward pass.

``--device cuda`` is the CUDA-written program; ``--device cpu`` its hand port. Prints one JSON line: where
the reloaded weights are, whether they equal the saved ones, and the output.
"""
import argparse
import json
import tempfile

import torch
from diffusers import UNet2DModel

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
args = parser.parse_args()

torch.manual_seed(0)
unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1, block_out_channels=(4, 8),
                   norm_num_groups=2, down_block_types=("DownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "UpBlock2D"))
saved = {k: v.clone() for k, v in unet.state_dict().items()}
with tempfile.TemporaryDirectory() as folder:
    unet.save_pretrained(folder)
    reloaded = UNet2DModel.from_pretrained(folder, device_map=args.device)
devices = sorted({str(p.device) for p in reloaded.parameters()})
equal = all(torch.equal(v.cpu(), saved[k]) for k, v in reloaded.state_dict().items())
x = torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(1)).to(args.device)
with torch.no_grad():
    out = reloaded(x, timestep=3).sample
print(json.dumps({"devices": devices, "on_device": all(p.is_cuda for p in reloaded.parameters()),
                  "equal": equal, "out": [float(v) for v in out.reshape(-1)[:16].cpu()],
                  "out_sum": float(out.sum().cpu())}))
