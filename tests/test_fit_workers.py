"""`gmmv fit --workers 2` (gmm_volunteer/fitting/fit.py): the allocation and consumption
series fitted side by side in two processes give the same bundle, byte for byte, as one
process, and the progress of the joint stage counts up to its total."""

from __future__ import annotations

import pytest

from gmm_volunteer.fitting.fit import fit_bundle
from gmm_volunteer.fitting.synthetic import SyntheticSpec, write_synthetic_traces

SPEC = SyntheticSpec(duration_s=600, n_types=2, batch_sizes=(1, 5), reps=3, download_reps=1)
GRID = ((1, 0), (2, 0), (1, 1))
CREATED = "2026-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("fitw")
    write_synthetic_traces(root / "traces", SPEC)
    return root


def _fit(traces, name, workers):
    stages, progress = [], []
    out = fit_bundle(traces / "traces", traces / name, candidates=GRID, degrees=(1,), report=False,
                     created=CREATED, log=stages.append, progress=lambda d, t, share: progress.append((d, t)),
                     workers=workers)
    return (out / "bundle.yaml").read_bytes(), stages, progress


@pytest.mark.slow  # two fits of the synthetic traces: about a CPU minute
def test_two_workers_give_the_same_bundle_and_count_to_the_end(traces):
    one, stages1, _ = _fit(traces, "one", 1)
    two, stages2, progress = _fit(traces, "two", 2)
    assert two == one
    assert any(s.startswith("fitting allocation and consumption series in 2 processes") for s in stages2)
    assert not any("in 2 processes" in s for s in stages1)
    totals = {t for _, t in progress}
    assert len(totals) == 1
    done = [d for d, _ in progress]
    assert done == sorted(done) and done[-1] == totals.pop()
