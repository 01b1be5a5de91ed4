"""MobileNetV2 and ResNet-50 architectures (torch), exported to ONNX with random weights.

The layer structure follows the published architectures (ResNet-50: He et al. 2016,
bottleneck blocks [3, 4, 6, 3]; MobileNetV2: Sandler et al. 2018, inverted residuals
with the standard (t, c, n, s) table, width 1.0), 224x224 RGB input, 1000 classes.
The weights are random (seeded): these models measure the COST of inference (time,
memory, file size), not accuracy. Needs torch (CPU build); only used to build the files.
"""

from __future__ import annotations

from pathlib import Path


def _torch_modules():
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + idt)

    class ResNet50(nn.Module):
        def __init__(self, n_classes=1000):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2, 1),
            )
            layers, cin = [], 64
            for width, n, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
                for i in range(n):
                    layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, n_classes)

        def forward(self, x):
            x = self.pool(self.layers(self.stem(x)))
            return self.fc(torch.flatten(x, 1))

    def conv_bn(cin, cout, k, s, groups=1, act=True):
        mods = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            mods.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*mods)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            self.use_res = stride == 1 and cin == cout
            mods = []
            if t != 1:
                mods.append(conv_bn(cin, hidden, 1, 1))
            mods += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, act=False)]
            self.block = nn.Sequential(*mods)

        def forward(self, x):
            return x + self.block(x) if self.use_res else self.block(x)

    class MobileNetV2(nn.Module):
        def __init__(self, n_classes=1000):
            super().__init__()
            feats, cin = [conv_bn(3, 32, 3, 2)], 32
            for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
                for i in range(n):
                    feats.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            feats.append(conv_bn(cin, 1280, 1, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, n_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(torch.flatten(x, 1))

    return torch, {"resnet50": ResNet50, "mobilenet_v2": MobileNetV2}


def build_onnx(name: str, path: str | Path, seed: int = 0) -> Path:
    """Build architecture `name` with seeded random weights and export it to `path`."""
    torch, archs = _torch_modules()
    torch.manual_seed(seed)
    model = archs[name]().eval()
    # random but plausible BatchNorm statistics so activations stay finite
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(
        model, (x,), str(tmp), input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
        dynamo=False,
    )
    tmp.replace(path)
    return path
