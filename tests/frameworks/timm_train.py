"""timm models trained the way timm's ``train.py`` trains them on an NVIDIA GPU, with float16 AMP in
channels_last (run unmodified by sim's truth run).

    python timm_train.py [--steps 3]

For a ResNet and a ViT (``resnet18``, ``vit_tiny_patch16_224`` at 32x32; no weights downloaded): timm's
``create_optimizer_v2`` (AdamW), its ``SoftTargetCrossEntropy`` over ``Mixup``'s mixed labels, and its
``NativeScaler`` (a ``GradScaler`` with gradient clipping), under ``torch.autocast("cuda", float16)``, with
the model and batches in channels_last. Images and labels come from a seeded host generator; mixup draws
from numpy's, seeded. Prints each step's loss and the trained weights' sum.
"""
import sys

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.utils import NativeScaler

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3
assert torch.cuda.is_available(), "written for NVIDIA GPUs"
device = torch.device("cuda")
host = torch.Generator().manual_seed(1)
images = torch.randn(steps, 8, 3, 32, 32, generator=host)
labels = torch.randint(0, 10, (steps, 8), generator=host)

for name, extra in (("resnet18", {}), ("vit_tiny_patch16_224", {"img_size": 32, "patch_size": 8})):
    torch.manual_seed(0)
    np.random.seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **extra).to(device)
    model = model.to(memory_format=torch.channels_last)
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05)
    mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=0.1, num_classes=10)
    criterion = SoftTargetCrossEntropy()
    loss_scaler = NativeScaler()
    model.train()
    for step in range(steps):
        x, y = images[step].to(device), labels[step].to(device)
        x, y = mixup(x, y)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
        print(f"{name} step {step}: loss {loss.item():.6f}")
    torch.cuda.synchronize()
    print(f"{name}: weight sum {sum(float(p.detach().double().sum()) for p in model.parameters()):.6f}")
