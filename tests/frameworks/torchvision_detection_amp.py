"""torchvision's Faster R-CNN trained with float16 mixed precision, written for an NVIDIA GPU (run unmodified
by sim's truth run).

    python torchvision_detection_amp.py [--steps 2]

``fasterrcnn_mobilenet_v3_large_fpn`` (no weights downloaded, 3 classes, images resized to 128) trains under
``torch.autocast("cuda", float16)`` with a ``GradScaler``: its ``roi_align`` gets a float16 feature map and
float32 boxes, which torchvision's ``AutocastCUDA`` kernel casts to one type (without it the op refuses the
mix). Images and boxes come from a seeded host generator. Prints each step's losses and, in eval mode, the
number of detections and the trained weights' sum. The region proposals sampled for training are drawn
from the GPU's generator.
"""
import sys

import torch
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 2
assert torch.cuda.is_available(), "written for NVIDIA GPUs"
device = torch.device("cuda")
torch.manual_seed(0)
model = fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None, num_classes=3, min_size=128,
                                          max_size=128).to(device)
host = torch.Generator().manual_seed(1)
images = torch.rand(steps, 2, 3, 128, 128, generator=host)
corners = torch.rand(steps, 2, 3, 2, generator=host) * 64
boxes = torch.cat([corners, corners + 16 + torch.rand(steps, 2, 3, 2, generator=host) * 48], dim=-1)
labels = torch.randint(1, 3, (steps, 2, 3), generator=host)

optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
model.train()
for step in range(steps):
    batch = [image.to(device) for image in images[step]]
    targets = [{"boxes": b.to(device), "labels": label.to(device)} for b, label in zip(boxes[step], labels[step])]
    with torch.autocast("cuda", dtype=torch.float16):
        losses = model(batch, targets)
        loss = sum(losses.values())
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"step {step}: " + ", ".join(f"{name} {value.item():.6f}" for name, value in sorted(losses.items())))
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    found = model([image.to(device) for image in images[0]])
print(f"detections {[len(f['boxes']) for f in found]}, scale {scaler.get_scale()}, "
      f"weight sum {sum(float(p.detach().double().sum()) for p in model.parameters()):.6f}")
