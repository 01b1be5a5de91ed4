"""The kernels' samplers against their closed forms (DESIGN.md section 6).

Normals: the ziggurat's draws against N(0, 1) (KS test, moments, tail probabilities).
ARMA: an AR(1) with coefficient phi has lag-k autocorrelation phi^k; the sample
autocorrelation of n values has standard error about sqrt((1 - phi^2) / n) at lag 1
(Bartlett), and we allow 5 of them. The work a phase needs and the progress it makes
are checked in tests/test_work.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from gmm_volunteer.model.kernels.arma import arma_next, idw_weights, yeo_johnson_inverse
from gmm_volunteer.model.rng import fill_normals, normal


@njit
def _ar_series(phi, theta, n, seed):
    st = np.array([np.uint64(seed)] * 8, dtype=np.uint64)
    hist = np.zeros((1, 2))  # rings of length 1: z at column 0, innovation at column 1
    ar = np.array([[[phi]]])
    ma = np.array([[[theta]]])
    q = 1 if theta != 0.0 else 0
    out = np.empty(n)
    for t in range(n):
        out[t] = arma_next(hist, 0, t, ar, ma, 0, 0, 1, q, 0, 0, 1, 0, normal(st, 0))
    return out


@njit
def _normals(n, seed):
    st = np.array([np.uint64(seed)] * 8, dtype=np.uint64)
    out = np.empty(n)
    for i in range(n):
        out[i] = normal(st, 0)
    return out


def test_normal_sampler_is_standard_normal():
    """Ziggurat normals: Kolmogorov-Smirnov, first four moments, and the tail beyond the
    ziggurat's base strip (R = 3.654, where its separate tail sampler takes over)."""
    from scipy import stats

    n = 1_000_000
    x = _normals(n, 2024)
    assert stats.kstest(x, "norm").pvalue > 1e-3
    # Standard errors of the sample moments of N(0, 1): mean 1/sqrt(n), variance
    # sqrt(2/n), skewness sqrt(6/n), excess kurtosis sqrt(24/n); 5 SE each.
    assert abs(x.mean()) < 5 / math.sqrt(n)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(stats.skew(x)) < 5 * math.sqrt(6 / n)
    assert abs(stats.kurtosis(x)) < 5 * math.sqrt(24 / n)
    for a in (1.0, 2.0, 3.0, 3.6541528853610088, 4.0):
        p = 2 * stats.norm.sf(a)
        assert abs(np.mean(np.abs(x) > a) - p) < 5 * math.sqrt(p * (1 - p) / n), a
    # Symmetric: positive and negative values equally often (binomial SE 0.5 / sqrt(n)).
    assert abs(np.mean(x > 0) - 0.5) < 5 * 0.5 / math.sqrt(n)


@njit
def _normals_block(n, seed):
    st = np.array([np.uint64(seed)] * 8, dtype=np.uint64)
    out = np.empty(n)
    fill_normals(st, 0, out, n)
    return out, st


def test_block_normals_are_the_single_draws():
    """`fill_normals` (allocation and consumption draw their innovations in blocks) gives
    exactly the values of successive `normal` calls and leaves the stream where they do,
    across the ziggurat's rejections (a few thousand in a million draws)."""
    n = 1_000_003
    block, st_block = _normals_block(n, 99)
    st = np.array([np.uint64(99)] * 8, dtype=np.uint64)
    single = _normals(n, 99)
    np.testing.assert_array_equal(block, single)
    _ = _single_state(st, n)
    np.testing.assert_array_equal(st_block, st)


@njit
def _single_state(st, n):
    for _ in range(n):
        normal(st, 0)
    return st


def acf(x, k):
    x = x - x.mean()
    return float(np.dot(x[:-k], x[k:]) / np.dot(x, x))


@pytest.mark.parametrize("phi", [0.3, 0.8, -0.5])
def test_ar1_sampler_autocorrelation(phi):
    n = 200_000
    x = _ar_series(phi, 0.0, n, 17)
    se = math.sqrt((1 - phi**2) / n)
    assert abs(acf(x, 1) - phi) < 5 * se
    # Unit innovations: stationary variance 1 / (1 - phi^2), sd of the estimate ~ var * sqrt(2 (1+phi^2)/((1-phi^2) n))
    var = 1 / (1 - phi**2)
    assert abs(x.var() - var) < 5 * var * math.sqrt(2 * (1 + phi**2) / ((1 - phi**2) * n))


def test_ma1_sampler_autocorrelation():
    # MA(1): rho_1 = theta / (1 + theta^2), rho_2 = 0.
    # Bartlett: var r1 = (1 - 3 rho^2 + 4 rho^4) / n, var r2 = (1 + 2 rho^2) / n; 5 SE each.
    theta, n = 0.6, 200_000
    rho = theta / (1 + theta**2)
    x = _ar_series(0.0, theta, n, 5)
    assert abs(acf(x, 1) - rho) < 5 * math.sqrt((1 - 3 * rho**2 + 4 * rho**4) / n)
    assert abs(acf(x, 2)) < 5 * math.sqrt((1 + 2 * rho**2) / n)


def test_yeo_johnson_inverse_roundtrip():
    from scipy.stats import yeojohnson

    xs = np.linspace(-3, 5, 41)
    for lam in (-0.5, 0.0, 0.7, 1.0, 2.0, 2.5):
        ys = yeojohnson(xs, lmbda=lam)
        back = np.array([yeo_johnson_inverse(y, lam) for y in ys])
        np.testing.assert_allclose(back, xs, atol=1e-9)


def test_idw_exact_at_knots_and_convex():
    knots = np.array([1.0, 2.0, 5.0, 10.0])
    w = np.empty(4)
    for i, k in enumerate(knots):
        idw_weights(k, knots, 4, 2.0, w)
        assert w[i] == 1.0 and w.sum() == 1.0
    idw_weights(3.0, knots, 4, 2.0, w)
    assert np.all(w > 0) and abs(w.sum() - 1) < 1e-12 and w.argmax() == 1
