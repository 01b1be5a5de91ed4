"""Inverse distance weighting (paper 2.2, "Resource consumption", ref. [22]).

The simulator interpolates consumption statistics over bandwidth or batch-size levels
with its own compiled version; this one serves the fitting code (filling unmeasured
levels) and the tests that pin the behaviour: exact at the knots, a weighted mean of
the knot values elsewhere.
"""

from __future__ import annotations

import numpy as np


def idw(x_query, x_knots, values, power: float = 2.0) -> np.ndarray:
    """Interpolate `values` given at `x_knots` to `x_query`.

    x_knots: shape (K,) or (K, d); x_query: scalar, (M,) or (M, d) matching;
    values: shape (K,) or (K, ...). Returns shape (M, ...) (or (...) for a scalar
    query). At a knot the knot's value is returned exactly (mean of coincident knots).
    """
    knots = np.asarray(x_knots, float)
    vals = np.asarray(values, float)
    if knots.ndim == 1:
        knots = knots[:, None]
    scalar = np.ndim(x_query) == 0
    q = np.atleast_1d(np.asarray(x_query, float))
    if q.ndim == 1:
        q = q[:, None] if knots.shape[1] == 1 else q[None, :]
    if knots.shape[0] == 0 or vals.shape[0] != knots.shape[0]:
        raise ValueError(f"need one value per knot: {knots.shape[0]} knots, {vals.shape[0]} values")
    if power <= 0:
        raise ValueError("power must be > 0")
    dist = np.sqrt(((q[:, None, :] - knots[None, :, :]) ** 2).sum(axis=-1))  # (M, K)
    exact = dist == 0.0
    with np.errstate(divide="ignore"):
        w = np.where(exact, 0.0, dist ** (-power))
    hit = exact.any(axis=1)
    w[hit] = exact[hit].astype(float)
    w /= w.sum(axis=1, keepdims=True)
    out = np.tensordot(w, vals, axes=(1, 0))
    return out[0] if scalar else out
