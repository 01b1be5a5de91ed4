"""MobileNetV2 and ResNet-50 written directly as ONNX graphs, with random weights.

The layer structure follows the published architectures (ResNet-50: He et al. 2016,
bottleneck blocks [3, 4, 6, 3]; MobileNetV2: Sandler et al. 2018, inverted residuals
with the standard (t, c, n, s) table, width 1.0), 224x224 RGB input, 1000 classes.
The weights are random (seeded): these models measure the COST of inference (time,
memory, file size), not accuracy.

The graphs are the inference graphs a framework exports for these networks in eval mode:
each convolution with its batch normalisation folded into the convolution's weights and
bias (what an exporter's constant folding does), ReLU (ResNet) or ReLU6 as Clip(0, 6)
(MobileNetV2), residual Adds, global average pooling, Flatten, Gemm; opset 17, a dynamic
batch axis. Built with the `onnx` package alone, so the default catalogue needs no deep
learning framework (the subtask traces in traces/subtasks were measured on files of the
same graphs exported from torch: the same operators, shapes and parameter count, other
random values). The paper-scale architectures (`archs_paper.py`) still need torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPSET = 17
N_CLASSES = 1000


class _Graph:
    """Accumulates nodes and initializers; each layer returns the name of its output."""

    def __init__(self, seed: int):
        self.g = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0
        self.clip: list[str] = []  # the bounds of every Clip (ReLU6), made at the first relu6

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def _init(self, kind: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name(kind)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
             pad: int | None = None) -> str:
        """Conv with its batch normalisation folded in: weights of a uniform fan-in
        initialisation scaled by 1/sqrt(running var), bias -running mean/sqrt(running var),
        the running statistics drawn like the exporter's source did (mean U(-0.1, 0.1),
        var U(0.5, 1.5)), so activations stay finite."""
        fan_in = cin // groups * k * k
        bound = 1.0 / np.sqrt(fan_in)
        w = self.g.uniform(-bound, bound, (cout, cin // groups, k, k))
        mean = self.g.uniform(-0.1, 0.1, cout)
        scale = 1.0 / np.sqrt(self.g.uniform(0.5, 1.5, cout) + 1e-5)
        pad = k // 2 if pad is None else pad
        return self.node("Conv", [x, self._init("w", w * scale[:, None, None, None]), self._init("b", -mean * scale)],
                         kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=groups,
                         dilations=[1, 1])

    def relu6(self, x: str) -> str:
        if not self.clip:
            self.clip = [self._init("min", np.array(0.0)), self._init("max", np.array(6.0))]
        return self.node("Clip", [x, *self.clip])

    def head(self, x: str, cin: int) -> str:
        """Global average pooling, Flatten, the classifier (Gemm with transposed weights)."""
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        bound = 1.0 / np.sqrt(cin)
        w = self._init("fc_w", self.g.uniform(-bound, bound, (N_CLASSES, cin)))
        b = self._init("fc_b", self.g.uniform(-bound, bound, N_CLASSES))
        return self.node("Gemm", [x, w, b], alpha=1.0, beta=1.0, transB=1)


def _resnet50(gr: _Graph, x: str) -> str:
    x = gr.node("Relu", [gr.conv(x, 3, 64, 7, 2, pad=3)])
    x = gr.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=0,
                dilations=[1, 1])
    cin = 64
    for width, n, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(n):
            s, cout = (stride if i == 0 else 1), width * 4
            idt = x if (s == 1 and cin == cout) else gr.conv(x, cin, cout, 1, s, pad=0)
            y = gr.node("Relu", [gr.conv(x, cin, width, 1, pad=0)])
            y = gr.node("Relu", [gr.conv(y, width, width, 3, s)])
            y = gr.conv(y, width, cout, 1, pad=0)
            x, cin = gr.node("Relu", [gr.node("Add", [y, idt])]), cout
    return gr.head(x, cin)


def _mobilenet_v2(gr: _Graph, x: str) -> str:
    x, cin = gr.relu6(gr.conv(x, 3, 32, 3, 2)), 32
    for t, c, n, stride in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                            (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            s, hidden = (stride if i == 0 else 1), cin * t
            y = x if t == 1 else gr.relu6(gr.conv(x, cin, hidden, 1))
            y = gr.relu6(gr.conv(y, hidden, hidden, 3, s, groups=hidden))
            y = gr.conv(y, hidden, c, 1)
            x, cin = (gr.node("Add", [x, y]) if s == 1 and cin == c else y), c
    return gr.head(gr.relu6(gr.conv(x, cin, 1280, 1)), 1280)


ARCHS = {"resnet50": _resnet50, "mobilenet_v2": _mobilenet_v2}


def build_model(name: str, seed: int = 0):
    """The ONNX ModelProto of architecture `name` with seeded random weights."""
    from onnx import TensorProto, checker, helper

    gr = _Graph(seed)
    ARCHS[name](gr, "input")
    gr.nodes[-1].output[0] = "logits"  # the classifier's output is the graph's
    graph = helper.make_graph(
        gr.nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", N_CLASSES])],
        initializer=gr.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                              producer_name="gmm-volunteer")
    checker.check_model(model)
    return model


def build_onnx(name: str, path: str | Path, seed: int = 0) -> Path:
    """Build architecture `name` with seeded random weights and write it to `path`."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    onnx.save(build_model(name, seed), str(tmp))
    tmp.replace(path)
    return path
