"""Heavier computer-vision architectures for the paper-scale catalogue (paper 3.1).

The paper instantiates subtasks with "established computer-vision models" heavy enough
that its base profile (2.5 GB, 200 % CPU) lies "slightly above the largest measured
average subtask consumption at batch size 2". These are the published architectures,
written in plain torch (no torchvision or timm: their compiled operators need not
match the installed torch), with seeded random weights: they measure the COST of
inference (time, CPU, memory, file size), not accuracy.

  vit_b16, vit_l16      Vision Transformer B/16 and L/16 (Dosovitskiy et al. 2021), 224x224
  convnext_b, convnext_l  ConvNeXt-B and -L (Liu et al. 2022), 224x224
  swin_b                Swin Transformer B, window 7 (Liu et al. 2021), 224x224
  resnet101, resnet152  ResNet-101/-152 (He et al. 2016), 224x224
  resnext101_32x32d     ResNeXt-101 32x32d (Xie et al. 2017; the width Mahajan et al. 2018
                        trained on 940M Instagram images), 224x224
  deeplabv3_r101        DeepLabV3 with a dilated ResNet-101 (output stride 8) and ASPP
                        (Chen et al. 2017), 21 classes, 520x520

Parameter counts are checked against the reference ones in `PUBLISHED_PARAMS_M`
(tests/test_collect_archs.py and the trace README).
"""

from __future__ import annotations

# millions, as in the reference implementations of the same configurations (torchvision;
# DeepLabV3 without its auxiliary training head; ResNeXt-101 32x32d as the WSL-Images hub
# model defines it, torchvision's ResNet with groups=32, width_per_group=32: 468.53 M,
# where the WSL-Images README table says 466 M)
PUBLISHED_PARAMS_M = {
    "vit_b16": 86.57, "vit_l16": 304.33, "convnext_b": 88.59, "convnext_l": 197.77,
    "swin_b": 87.77, "resnet101": 44.55, "resnet152": 60.19, "deeplabv3_r101": 58.63,
    "resnext101_32x32d": 468.53,
}
INPUT_SIZE = {"deeplabv3_r101": 520}  # others 224


def _modules():
    import torch
    from torch import nn
    from torch.nn import functional as F

    # ------------------------------------------------------------------ ViT
    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.scale = heads, (dim // heads) ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x, bias=None):
            n, c = x.shape[1], x.shape[2]
            qkv = self.qkv(x).reshape(-1, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            attn = (qkv[0] * self.scale) @ qkv[1].transpose(-2, -1)
            if bias is not None:
                attn = attn + bias
            out = attn.softmax(-1) @ qkv[2]
            return self.proj(out.transpose(1, 2).reshape(-1, n, c))

    class Mlp(nn.Sequential):
        def __init__(self, dim, hidden):
            super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    class VitBlock(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
            self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self, dim, depth, heads, patch=16, size=224, n_classes=1000):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
            self.blocks = nn.Sequential(*[VitBlock(dim, heads) for _ in range(depth)])
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, n_classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            return self.head(self.norm(self.blocks(x))[:, 0])

    # ------------------------------------------------------------------ ConvNeXt
    class LayerNorm2d(nn.LayerNorm):
        """LayerNorm over channels of an NCHW tensor."""

        def forward(self, x):
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class ConvNeXtBlock(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.mlp = Mlp(dim, 4 * dim)
            self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

        def forward(self, x):
            y = self.mlp(self.norm(self.dw(x).permute(0, 2, 3, 1))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self, dims, depths=(3, 3, 27, 3), n_classes=1000):
            super().__init__()
            layers = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
            for i, (d, n) in enumerate(zip(dims, depths)):
                if i:
                    layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
                layers += [ConvNeXtBlock(d) for _ in range(n)]
            self.features = nn.Sequential(*layers)
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
            self.head = nn.Linear(dims[-1], n_classes)

        def forward(self, x):
            return self.head(self.norm(self.features(x).mean((2, 3))))

    # ------------------------------------------------------------------ Swin
    class WindowAttention(Attention):
        def __init__(self, dim, heads, ws):
            super().__init__(dim, heads)
            self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
            c = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
            rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (ws - 1)
            self.register_buffer("index", rel[..., 0] * (2 * ws - 1) + rel[..., 1], persistent=False)

        def forward(self, x, mask=None):
            bias = self.table[self.index.reshape(-1)].reshape(x.shape[1], x.shape[1], -1).permute(2, 0, 1)
            if mask is not None:  # (nW, N, N): windows of one image share it
                nw = mask.shape[0]
                bias = (bias[None, None] + mask[None, :, None]).reshape(1, nw, -1, x.shape[1], x.shape[1])
                n, c = x.shape[1], x.shape[2]
                qkv = self.qkv(x).reshape(-1, nw, n, 3, self.heads, c // self.heads).permute(3, 0, 1, 4, 2, 5)
                attn = (qkv[0] * self.scale) @ qkv[1].transpose(-2, -1) + bias
                out = (attn.softmax(-1) @ qkv[2]).permute(0, 1, 3, 2, 4).reshape(-1, n, c)
                return self.proj(out)
            return super().forward(x, bias)

    class SwinBlock(nn.Module):
        def __init__(self, dim, heads, res, ws, shift):
            super().__init__()
            if res <= ws:  # the window covers the map: no shift (as in the reference code)
                ws, shift = res, 0
            self.res, self.ws, self.shift = res, ws, shift
            self.norm1, self.attn = nn.LayerNorm(dim), WindowAttention(dim, heads, ws)
            self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, 4 * dim)
            mask = None
            if shift:
                img = torch.zeros(1, res, res, 1)
                cnt = 0
                for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                    for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                        img[:, h, w, :] = cnt
                        cnt += 1
                win = self._partition(img).squeeze(-1)
                mask = win[:, None, :] - win[:, :, None]
                mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
            self.register_buffer("mask", mask, persistent=False)

        def _partition(self, x):
            r, ws, c = self.res, self.ws, x.shape[-1]
            x = x.reshape(-1, r // ws, ws, r // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
            return x.reshape(-1, ws * ws, c)

        def forward(self, x):  # x: (B, res*res, C)
            r, ws, c = self.res, self.ws, x.shape[-1]
            y = self.norm1(x).reshape(-1, r, r, c)
            if self.shift:
                y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
            y = self.attn(self._partition(y), self.mask)
            y = y.reshape(-1, r // ws, r // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, r, r, c)
            if self.shift:
                y = torch.roll(y, (self.shift, self.shift), (1, 2))
            x = x + y.reshape(-1, r * r, c)
            return x + self.mlp(self.norm2(x))

    class PatchMerging(nn.Module):
        def __init__(self, dim, res):
            super().__init__()
            self.res = res
            self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

        def forward(self, x):
            r, c = self.res, x.shape[-1]
            x = x.reshape(-1, r, r, c)
            x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
            return self.reduction(self.norm(x.reshape(-1, (r // 2) ** 2, 4 * c)))

    class Swin(nn.Module):
        def __init__(self, dim=128, depths=(2, 2, 18, 2), heads=(4, 8, 16, 32), ws=7, size=224, n_classes=1000):
            super().__init__()
            self.patch, self.patch_norm = nn.Conv2d(3, dim, 4, 4), nn.LayerNorm(dim)
            layers, res = [], size // 4
            for i, (n, h) in enumerate(zip(depths, heads)):
                layers += [SwinBlock(dim, h, res, ws, 0 if j % 2 == 0 else ws // 2) for j in range(n)]
                if i < len(depths) - 1:
                    layers.append(PatchMerging(dim, res))
                    dim, res = dim * 2, res // 2
            self.layers = nn.Sequential(*layers)
            self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, n_classes)

        def forward(self, x):
            x = self.patch_norm(self.patch(x).flatten(2).transpose(1, 2))
            return self.head(self.norm(self.layers(x)).mean(1))

    # ------------------------------------------------------------------ ResNet / DeepLabV3
    class Bottleneck(nn.Module):
        """ResNet bottleneck; with groups > 1 the ResNeXt block (Xie et al. 2017)."""

        def __init__(self, cin, planes, stride, dilation=1, groups=1, width_per_group=64):
            super().__init__()
            cout, width = planes * 4, planes * width_per_group // 64 * groups
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, dilation, dilation, groups=groups, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            y = F.relu(self.bn1(self.conv1(x)))
            y = F.relu(self.bn2(self.conv2(y)))
            return F.relu(self.bn3(self.conv3(y)) + idt)

    class ResNetBody(nn.Module):
        """Stem and the four stages; `dilate` replaces the strides of stages 3 and 4 by
        dilation (output stride 8, as DeepLabV3 uses it)."""

        def __init__(self, blocks, dilate=False, groups=1, width_per_group=64):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin, dil = [], 64, 1
            for i, (width, n) in enumerate(zip((64, 128, 256, 512), blocks)):
                stride = 1 if i == 0 else 2
                prev = dil
                if dilate and i >= 2:
                    dil, stride = dil * stride, 1
                for j in range(n):
                    layers.append(Bottleneck(cin, width, stride if j == 0 else 1, prev if j == 0 else dil,
                                             groups, width_per_group))
                    cin = width * 4
            self.layers = nn.Sequential(*layers)

        def forward(self, x):
            return self.layers(self.stem(x))

    class ResNet(nn.Module):
        def __init__(self, blocks, n_classes=1000, **kw):
            super().__init__()
            self.body, self.fc = ResNetBody(blocks, **kw), nn.Linear(2048, n_classes)

        def forward(self, x):
            return self.fc(self.body(x).mean((2, 3)))

    def cbr(cin, cout, k=1, dil=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, padding=dil * (k // 2), dilation=dil, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU())

    class DeepLabV3(nn.Module):
        def __init__(self, n_classes=21, rates=(12, 24, 36)):
            super().__init__()
            self.body = ResNetBody((3, 4, 23, 3), dilate=True)
            self.aspp = nn.ModuleList([cbr(2048, 256)] + [cbr(2048, 256, 3, r) for r in rates])
            self.pool = cbr(2048, 256)
            self.project = nn.Sequential(cbr(5 * 256, 256), nn.Dropout(0.5))
            self.head = nn.Sequential(cbr(256, 256, 3, 1), nn.Conv2d(256, n_classes, 1))

        def forward(self, x):
            size = x.shape[-2:]
            f = self.body(x)
            pooled = F.interpolate(self.pool(f.mean((2, 3), keepdim=True)), size=f.shape[-2:],
                                   mode="bilinear", align_corners=False)
            y = self.project(torch.cat([m(f) for m in self.aspp] + [pooled], 1))
            return F.interpolate(self.head(y), size=size, mode="bilinear", align_corners=False)

    return torch, {
        "vit_b16": lambda: ViT(768, 12, 12), "vit_l16": lambda: ViT(1024, 24, 16),
        "convnext_b": lambda: ConvNeXt((128, 256, 512, 1024)),
        "convnext_l": lambda: ConvNeXt((192, 384, 768, 1536)),
        "swin_b": lambda: Swin(),
        "resnet101": lambda: ResNet((3, 4, 23, 3)), "resnet152": lambda: ResNet((3, 8, 36, 3)),
        "resnext101_32x32d": lambda: ResNet((3, 4, 23, 3), groups=32, width_per_group=32),
        "deeplabv3_r101": lambda: DeepLabV3(),
    }


NAMES = tuple(PUBLISHED_PARAMS_M)


def build_model(name: str, seed: int = 0):
    """(torch, model in eval mode with seeded random weights and plausible BN statistics)."""
    torch, archs = _modules()
    torch.manual_seed(seed)
    model = archs[name]().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return torch, model


def build_onnx(name: str, path, seed: int = 0):
    """Build architecture `name` and export it to ONNX at `path` (batch axis dynamic)."""
    from pathlib import Path

    torch, model = build_model(name, seed)
    size = INPUT_SIZE.get(name, 224)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    with torch.no_grad():
        torch.onnx.export(
            model, (torch.randn(1, 3, size, size),), str(tmp), input_names=["input"], output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17, dynamo=False,
        )
    tmp.replace(path)
    return path


def parameter_counts(names=NAMES) -> dict[str, float]:
    """Parameters (millions) of each architecture as built here."""
    out = {}
    for n in names:
        _, model = build_model(n)
        out[n] = sum(p.numel() for p in model.parameters()) / 1e6
    return out


if __name__ == "__main__":  # python -m gmm_volunteer.fitting.collect.archs_paper: counts vs published
    for n, m in parameter_counts().items():
        print(f"{n}: {m:.2f} M parameters (published {PUBLISHED_PARAMS_M[n]:.2f} M)")
