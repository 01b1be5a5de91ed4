"""The shipped bundles are what `gmmv fit` makes of the shipped traces (issue: "re-running
the fit on the shipped traces reproduces it"): `default` from traces/, `paper-scale` from
traces/paper-scale/."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("bundle, traces", [("default", "traces/"), ("paper-scale", "traces/paper-scale")])
def test_refit_of_shipped_traces_reproduces_the_bundle(tmp_path, bundle, traces):
    """Run exactly the documented command, single-threaded BLAS (multi-threaded
    reductions may change the last digits of the optimizer's path) and the shipped
    creation time, then compare the whole bundle."""
    shipped = yaml.safe_load((ROOT / "gmm_volunteer/bundles" / bundle / "bundle.yaml").read_text())
    epoch = calendar.timegm(time.strptime(shipped["created"], "%Y-%m-%dT%H:%M:%SZ"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               SOURCE_DATE_EPOCH=str(epoch))
    out = tmp_path / "b"
    subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "fit", traces, "-o", str(out), "--no-report"],
                   cwd=ROOT, env=env, check=True)
    refit = yaml.safe_load((out / "bundle.yaml").read_text())
    assert refit == shipped


@pytest.mark.parametrize("bundle", ["default", "paper-scale"])
def test_shipped_bundle_is_fitted_and_valid(bundle):
    from gmm_volunteer.io.bundlefiles import load_bundle

    b = load_bundle(ROOT / "gmm_volunteer/bundles" / bundle)
    assert not b.provisional
    assert "fitted by `gmmv fit" in b.provenance
