"""Class 9 of issue "Hardening II": `gmmv fit` gives the same bundle run to run.

Two fits in separate processes (as a user runs them) must give bundles with the same
digest. `SOURCE_DATE_EPOCH` fixes the `created` stamp, which is part of the digest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gmm_volunteer.fitting.synthetic import SyntheticSpec, write_synthetic_traces
from gmm_volunteer.io.bundle import bundle_digest, load_bundle

REPO = Path(__file__).resolve().parent.parent


def _fit_twice(traces: Path, tmp_path: Path, *extra: str) -> list[str]:
    env = dict(os.environ, SOURCE_DATE_EPOCH="1767225600")
    digests = []
    for k in range(2):
        out = tmp_path / f"bundle{k}"
        proc = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "fit", str(traces), "-o", str(out),
                               "--no-report", "-q", *extra], env=env, capture_output=True, text=True,
                              timeout=3600)
        assert proc.returncode == 0, proc.stderr
        digests.append(bundle_digest(load_bundle(out)))
    return digests


@pytest.mark.slow  # two fits: about 6 CPU-minutes
def test_class9_two_fits_of_the_same_traces_have_one_digest(tmp_path):
    traces = tmp_path / "traces"
    write_synthetic_traces(traces, SyntheticSpec(duration_s=900, n_types=3, batch_sizes=(1, 5), reps=3,
                                                 download_reps=1))
    first, second = _fit_twice(traces, tmp_path, "--quick")
    assert first == second


@pytest.mark.slow
def test_class9_two_quick_fits_of_the_shipped_traces_have_one_digest(tmp_path):
    first, second = _fit_twice(REPO / "traces", tmp_path, "--quick")
    assert first == second
