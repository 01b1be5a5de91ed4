"""The progress of `gmmv fit` counts every ARMA candidate of a series once, fitted or
ruled out, so a stage's counter ends at its total (it stopped at 63 of 99 when short
runs ruled candidates out without a fit)."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.fitting.arma import MIN_PAIRS, QUICK_GRID, candidate_progress, fit_series_block


def _ticks(segments) -> int:
    seen = []
    with candidate_progress(seen.append):
        fit_series_block(segments, QUICK_GRID)
    return sum(seen)


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
    assert _ticks(segments) == len(set(QUICK_GRID)), what
