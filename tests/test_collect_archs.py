"""The paper-scale architectures (gmm_volunteer/fitting/collect/archs_paper.py) are the
published ones: their parameter counts match the published counts to 0.01 M, and each
runs a forward pass with the output shape of its task. Needs torch (the `collect`
extra); slow (builds models of up to 469 M parameters)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["vit_b16", "vit_l16", "convnext_b", "convnext_l", "swin_b", "resnet101",
                                  "resnet152", "resnext101_32x32d", "deeplabv3_r101"])
def test_parameter_count_and_output_shape(name):
    torch = pytest.importorskip("torch")
    from gmm_volunteer.fitting.collect.archs_paper import INPUT_SIZE, PUBLISHED_PARAMS_M, build_model

    _, model = build_model(name)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    assert params == pytest.approx(PUBLISHED_PARAMS_M[name], abs=0.01)
    size = INPUT_SIZE.get(name, 224)
    with torch.no_grad():
        out = model(torch.randn(2, 3, size, size))
    assert tuple(out.shape) == ((2, 21, size, size) if name == "deeplabv3_r101" else (2, 1000))
    assert torch.isfinite(out).all()
