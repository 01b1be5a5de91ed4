"""The shipped default bundle is what `gmmv fit traces/` makes of the shipped traces
(issue: "re-running the fit on the shipped traces reproduces it")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_refit_of_shipped_traces_reproduces_default_bundle(tmp_path):
    from fitting.fit import fit_bundle

    shipped = yaml.safe_load((ROOT / "configs/models/default/bundle.yaml").read_text())
    out = fit_bundle(ROOT / "traces", tmp_path / "b", report=False, created=shipped["created"])
    refit = yaml.safe_load((Path(out) / "bundle.yaml").read_text())
    assert refit == shipped


def test_shipped_bundle_is_fitted_and_valid():
    from gmm_volunteer.bundle import load_bundle

    b = load_bundle(ROOT / "configs/models/default")
    assert not b.provisional
    assert "fitted by `gmmv fit" in b.provenance
