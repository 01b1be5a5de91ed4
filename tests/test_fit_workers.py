"""`gmmv fit --workers 2` (gmm_volunteer/fitting/fit.py): each series' ARMA candidates
fitted side by side in two processes give the same bundle, byte for byte, as one
process, each stage's progress counts up to its total, and the workers run with one BLAS
thread."""

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
                     created=CREATED, log=stages.append,
                     progress=lambda d, t, share: progress.append((stages[-1], d, t, share)), workers=workers)
    return (out / "bundle.yaml").read_bytes(), stages, progress


@pytest.mark.slow  # two fits of the synthetic traces: about a CPU minute
def test_two_workers_give_the_same_bundle_and_count_to_the_end(traces):
    one, stages1, _ = _fit(traces, "one", 1)
    two, stages2, progress = _fit(traces, "two", 2)
    assert two == one
    assert sum("fitted in 2 processes" in s for s in stages2) == 2  # the allocation and consumption stages
    assert not any("processes" in s for s in stages1)
    for stage in {s for s, *_ in progress}:
        counts = [(d, t, share) for s, d, t, share in progress if s == stage]
        assert len({t for _, t, _ in counts}) == 1, stage
        assert [d for d, _, _ in counts] == sorted(d for d, _, _ in counts) and counts[-1][0] == counts[-1][1], stage
        assert counts[-1][2] == 1.0, stage  # the whole expected work done at the end


def test_the_workers_get_one_blas_thread_in_their_environment(monkeypatch):
    """The thread variables are 1 while the workers start (threadpoolctl alone left their
    BLAS multi-threaded: ten times the CPU), and as they were afterwards."""
    import os

    from gmm_volunteer.fitting.determinism import THREAD_VARIABLES, one_thread_in_children

    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with one_thread_in_children():
        assert all(os.environ[name] == "1" for name in THREAD_VARIABLES)
    assert os.environ["OMP_NUM_THREADS"] == "4" and "OPENBLAS_NUM_THREADS" not in os.environ
