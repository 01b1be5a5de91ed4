"""The default catalogue's random-weight architectures (gmm_volunteer/fitting/collect/archs.py),
written as ONNX graphs, are the published ones: counted as a framework counts them (each
folded convolution bias stands for a batch normalisation's scale and shift), their
parameters are the published counts exactly, and ONNX Runtime runs them with the
classifier's output. Needs onnx and onnxruntime (the `collect` extra, in `test`)."""

from __future__ import annotations

import numpy as np
import pytest

# torchvision's counts of the same configurations (ResNet50_Weights.IMAGENET1K_V1,
# MobileNet_V2_Weights.IMAGENET1K_V1 report these numbers of parameters)
PUBLISHED = {"resnet50": 25_557_032, "mobilenet_v2": 3_504_872}


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_published_parameter_count_and_a_finite_forward_pass(name):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import numpy_helper

    from gmm_volunteer.fitting.collect.archs import build_model

    model = build_model(name, seed=0)
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    gemm = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert len(gemm) == 1
    conv_weights = sum(weights[n.input[1]].size for n in convs)
    channels = sum(weights[n.input[2]].size for n in convs)  # one normalised channel per bias
    fc = sum(weights[x].size for x in gemm[0].input[1:])
    assert conv_weights + 2 * channels + fc == PUBLISHED[name]

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
    out = session.run(None, {"input": x})[0]
    assert out.shape == (2, 1000) and np.isfinite(out).all() and out.std() > 0


def test_same_seed_same_bytes_other_seed_other_weights():
    pytest.importorskip("onnx")
    from gmm_volunteer.fitting.collect.archs import build_model

    a, b, c = (build_model("mobilenet_v2", seed=s).SerializeToString() for s in (0, 0, 1))
    assert a == b and a != c and len(a) == len(c)
