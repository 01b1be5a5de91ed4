"""Lloyd-Max scalar quantization (Lloyd 1982), on an empirical sample.

Used to choose representative bandwidth levels from the resource trace (paper 2.2:
subtask-data downloads are measured at Lloyd-Max quantized inbound-bandwidth levels).
"""

from __future__ import annotations

import numpy as np


def lloyd_max(samples, n_levels: int, iters: int = 200, tol: float = 1e-10):
    """Minimum mean-squared-error quantizer of `samples` with `n_levels` levels.

    Alternates the two optimality conditions until the levels move less than
    `tol` (relative to the sample range) or `iters` iterations have run:
      thresholds = midpoints between neighbouring levels (nearest-neighbour cells),
      levels     = mean of the samples in each cell (centroids).
    Starts from the equal-probability quantizer (levels at the (i + 0.5)/n quantiles).
    A cell that becomes empty keeps its previous level.

    Returns `(levels, thresholds)`: sorted float arrays of length n and n - 1.
    When the samples have fewer distinct values than `n_levels`, the distinct values
    themselves are returned (an exact quantizer with fewer levels).
    """
    x = np.asarray(samples, dtype=float).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise ValueError("lloyd_max: no finite samples")
    if n_levels < 1:
        raise ValueError("lloyd_max: n_levels must be >= 1")
    uniq = np.unique(x)
    if uniq.size <= n_levels:
        levels = uniq.astype(float)
        return levels, (levels[:-1] + levels[1:]) / 2.0
    x = np.sort(x)
    levels = np.quantile(x, (np.arange(n_levels) + 0.5) / n_levels)
    if np.any(np.diff(levels) <= 0):
        # heavy ties: start from spread-out distinct values instead
        levels = np.quantile(uniq, (np.arange(n_levels) + 0.5) / n_levels)
    span = float(x[-1] - x[0]) or 1.0
    csum = np.concatenate([[0.0], np.cumsum(x)])
    for _ in range(max(int(iters), 1)):
        thresholds = (levels[:-1] + levels[1:]) / 2.0
        # cell i = [thresholds[i-1], thresholds[i]); x sorted -> sums via cumulative sums
        edges = np.concatenate([[0], np.searchsorted(x, thresholds, side="left"), [x.size]])
        counts = np.diff(edges)
        sums = csum[edges[1:]] - csum[edges[:-1]]
        new = np.where(counts > 0, sums / np.maximum(counts, 1), levels)
        new = np.sort(new)
        moved = float(np.max(np.abs(new - levels)))
        levels = new
        if moved <= tol * span:
            break
    thresholds = (levels[:-1] + levels[1:]) / 2.0
    return levels, thresholds


def distortion(samples, levels) -> float:
    """Mean squared error of quantizing `samples` to the nearest of `levels`."""
    x = np.asarray(samples, dtype=float).ravel()
    lv = np.asarray(levels, dtype=float)
    return float(np.mean(np.min((x[:, None] - lv[None, :]) ** 2, axis=1)))
