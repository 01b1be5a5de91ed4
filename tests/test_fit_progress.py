"""The progress of `gmmv fit` counts every ARMA candidate of a series once, fitted or
ruled out, so a stage's counter ends at its total (it stopped at 63 of 99 when short
runs ruled candidates out without a fit)."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.fitting.arma import (MIN_PAIRS, QUICK_GRID, candidate_progress, candidate_work, fit_series_block,
                                       grid_work)


def _ticks(segments) -> tuple[int, int, int]:
    """Candidates decided, and the work (`arma.candidate_work`) reported fitted and skipped."""
    seen = []
    with candidate_progress(seen.append):
        fit_series_block(segments, QUICK_GRID)
    return sum(d.n for d in seen), sum(d.fitted for d in seen), sum(d.skipped for d in seen)


@pytest.mark.parametrize("what, segments", [
    # long enough for every candidate: all are fitted
    ("all fitted", [np.random.default_rng(1).normal(size=MIN_PAIRS + 40)]),
    # runs of 3 values: only lag-1 candidates have MIN_PAIRS pairs 1 apart
    ("some ruled out", [np.random.default_rng(2).normal(size=3) for _ in range(MIN_PAIRS)]),
    # runs of 2 values, too few: every candidate ruled out, white noise
    ("all ruled out", [np.random.default_rng(3).normal(size=2) for _ in range(3)]),
    ("constant", [np.full(MIN_PAIRS + 40, 5.0)]),
])
def test_every_candidate_is_counted_once(what, segments):
    """... and its work (the time-left estimate's weight) once, as fitted or as skipped:
    a candidate ruled out leaves the stage's expected work."""
    n, fitted, skipped = _ticks(segments)
    assert n == len(set(QUICK_GRID)), what
    assert fitted + skipped == grid_work(QUICK_GRID), what
    assert (fitted == 0) == (what in ("all ruled out", "constant")) and (skipped == 0) == (what == "all fitted"), what


def test_candidate_work_follows_the_filter_s_cost():
    assert candidate_work(5, 2) == 40 and candidate_work(2, 1) == 8 and candidate_work(1, 0) == 2

