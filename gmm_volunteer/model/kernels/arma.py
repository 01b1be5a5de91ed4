"""ARMA sampling, Yeo-Johnson inversion and IDW interpolation (paper 2.2).

Allocations and consumptions share one generative block: an ARMA(p, q) sample z_t is
de-standardized, passed through the inverse Yeo-Johnson transform and rescaled with the
node- or level-specific mean and sd (docs/formats.md, "ARMA building block").
"""

import numpy as np
from numba import njit

from gmm_volunteer.model.kernels.jit import kernel


@njit(cache=True, inline="always")
def arma_next(hist, a, pos, ar, ma, k, r, p, q, yo, ym, eo, em, eps):
    """Draw z_t of the ARMA(p, q) model with coefficients ar[k, r, :p], ma[k, r, :q]
    whose history sits in row a of `hist`; step t is `pos`. Return z_t.

    z_t = sum_i ar_i z_{t-1-i} + eps + sum_j ma_j eps_{t-1-j}, eps ~ N(0, sigma^2) given
    by the caller. The z values are a ring at hist[a, yo + (slot & ym)], the innovations
    one at hist[a, eo + (slot & em)]; ring lengths are powers of two >= p and >= q
    (`params.consumption_rings`). Everything is indexed in place: slicing a coefficient
    row per call costs more than the arithmetic.
    """
    z = eps
    for i in range(p):
        z += ar[k, r, i] * hist[a, yo + ((pos - 1 - i) & ym)]
    for j in range(q):
        z += ma[k, r, j] * hist[a, eo + ((pos - 1 - j) & em)]
    if p > 0:
        hist[a, yo + (pos & ym)] = z
    if q > 0:
        hist[a, eo + (pos & em)] = eps
    return z


@njit(cache=True, inline="always")
def yeo_johnson_inverse(y, lam):
    """Inverse Yeo-Johnson transform. The branches for lam in {0, 1, 2} (where one side
    is the identity, a log or a square root) avoid a general power: the fitted allocation
    models mostly have lam = 2 or 0 (lam is fitted within [0, 2], docs/fitting.md)."""
    if y >= 0.0:
        if lam == 1.0:  # identity: the common case of an untransformed series
            return y
        if lam == 2.0:
            return np.sqrt(2.0 * y + 1.0) - 1.0
        if abs(lam) < 1e-12:
            return np.exp(y) - 1.0
        base = y * lam + 1.0
        if base <= 0.0:  # outside the transform's range for lam < 0: saturate
            base = 1e-12
        return base ** (1.0 / lam) - 1.0
    if abs(lam - 2.0) < 1e-12:
        return 1.0 - np.exp(-y)
    if lam == 0.0:
        return 1.0 - np.sqrt(1.0 - 2.0 * y)
    if lam == 1.0:
        return y
    base = 1.0 - y * (2.0 - lam)
    if base <= 0.0:
        base = 1e-12
    return 1.0 - base ** (1.0 / (2.0 - lam))


@njit(cache=True, inline="always")
def arma_value(z, zm, zsd, lam, mean, sd):
    """Map an ARMA sample to the original scale: mean + sd * YJ^-1(zm + zsd * z)."""
    return mean + sd * yeo_johnson_inverse(zm + zsd * z, lam)


@njit(cache=True, inline="always")
def idw_weights(x, knots, n, power, out):
    """Inverse-distance weights of `x` over knots[:n] into out[:n]; exact at a knot."""
    for i in range(n):
        d = abs(x - knots[i])
        if d < 1e-12:
            for k in range(n):
                out[k] = 0.0
            out[i] = 1.0
            return
        out[i] = 1.0 / (d * d) if power == 2.0 else 1.0 / d**power
    s = 0.0
    for i in range(n):
        s += out[i]
    for i in range(n):
        out[i] /= s


@kernel
def batch_level_statistics(levels, n_levels, level_kind, st_mean, st_sd, idw_power, batch_kind, n_max):
    """IDW-interpolated scaling statistics of the batch-size stages for every batch size
    1..n_max, as (mean, sd) arrays [stage, subtask type, size, resource].

    Same arithmetic as the per-sample interpolation in `consumption.step_consumption`, so looking
    a batch's statistics up here gives the same numbers without the interpolation."""
    n_st, n_types, n_res, _ = st_mean.shape
    mean = np.zeros((n_st, n_types, n_max + 1, n_res))
    sd = np.zeros((n_st, n_types, n_max + 1, n_res))
    w = np.empty(levels.shape[1])
    for s in range(n_st):
        if level_kind[s] != batch_kind:
            continue
        nl = n_levels[s]
        for n in range(1, n_max + 1):
            q = min(max(float(n), levels[s, 0]), levels[s, nl - 1])
            idw_weights(q, levels[s], nl, idw_power, w)
            for m in range(n_types):
                for r in range(n_res):
                    a = 0.0
                    b = 0.0
                    for l in range(nl):
                        a += w[l] * st_mean[s, m, r, l]
                        b += w[l] * st_sd[s, m, r, l]
                    mean[s, m, n, r] = a
                    sd[s, m, n, r] = b
    return mean, sd

