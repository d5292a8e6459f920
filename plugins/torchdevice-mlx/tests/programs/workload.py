"""A CUDA-written training workload: an MLP, a CNN with BatchNorm and pooling, a tiny GPT with SDPA,
all trained with AdamW. Written the way CUDA programs are (device = "cuda", .cuda(), .to(device),
torch.cuda.* calls); prints one JSON line: every loss, the device memory growth of a 64 MiB tensor,
and the type of the program's tensors.

Run natively on the host with ``--device cpu``; through torchdevice with
``torchdevice run --backend mlx workload.py``.
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
if device == "cuda":
    assert torch.cuda.is_available()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 64),
                                 nn.SiLU(), nn.LayerNorm(64), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    # No bias on a conv that feeds BatchNorm (as real CNNs do): in training mode BatchNorm cancels
    # it, so its gradient is rounding noise that AdamW scales up to full lr-sized steps. Such a
    # bias then differs between any two CPUs (1e-2 after five steps, every other parameter within
    # 1e-6) and moves the running mean, so eval-mode predictions would compare noise.
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.AvgPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1, groups=2, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))

    def forward(self, x):
        return self.head(self.features(x))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.resid_dropout = nn.Dropout(0.1)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.1 if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(d, 4 * d), c_proj=nn.Linear(4 * d, d), drop=nn.Dropout(0.1)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.drop(m.c_proj(F.gelu(m.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab=64, ctx=32, d=48, heads=4, layers=2):
        super().__init__()
        self.ctx = ctx
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(ctx, d), drop=nn.Dropout(0.1),
            h=nn.ModuleList([Block(d, heads) for _ in range(layers)]), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def train_classifier(model, x, y, steps, **opt_kw):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, **opt_kw)
    criterion = nn.CrossEntropyLoss()
    losses = []
    model.train()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).float().mean().item()
    return losses, acc


def main():
    out = {}
    torch.manual_seed(1337)
    if device == "cuda":
        torch.cuda.manual_seed(1337)

    mlp = MLP().to(device)
    x = torch.randn(64, 32).to(device)
    y = torch.randint(0, 10, (64,), device=device)
    out["mlp"], out["mlp_acc"] = train_classifier(mlp, x, y, 6)

    cnn = CNN().cuda() if device == "cuda" else CNN()
    imgs = torch.randn(8, 3, 16, 16, device=device)
    labels = torch.randint(0, 10, (8,)).to(device, non_blocking=True)
    out["cnn"], out["cnn_acc"] = train_classifier(cnn, imgs, labels, 5)
    out["bn_running_mean"] = cnn.features[1].running_mean.sum().item()

    gpt = GPT().to(device)
    decay = [p for n, p in gpt.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in gpt.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    data = torch.randint(0, 64, (4, 33), device=device)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    losses = []
    for _ in range(5):
        _, loss = gpt(inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    out["gpt"] = losses
    gpt.eval()
    with torch.no_grad():
        logits, _ = gpt(data[:, :8])
        probs = F.softmax(logits[:, -1, :] / 0.8, dim=-1)
        out["gpt_next"] = torch.multinomial(probs, num_samples=1).view(-1).tolist()
        out["gpt_top"] = torch.topk(logits[:, -1, :], 3).indices.tolist()

    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        big = torch.empty(64 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
        big.fill_(1.0)
        torch.cuda.synchronize()
        out["mem_growth"] = torch.cuda.memory_allocated() - before
        out["max_mem"] = torch.cuda.max_memory_allocated()
        out["tensor_type"] = type(big).__name__
        del big
    print(json.dumps(out))


if __name__ == "__main__":
    main()
