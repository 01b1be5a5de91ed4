"""ARMA blocks of the fitting pipeline (gmm_volunteer/fitting/arma.py; paper 2.2)."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.fitting.arma import (
    FULL_GRID,
    fit_series_block,
    fit_transform,
    join_segments,
    select_arma,
    simulate_arma,
    yeo_johnson_inverse,
)


def test_full_grid_is_the_papers():
    assert sorted(FULL_GRID) == sorted((p, q) for p in (1, 2, 5, 10) for q in (0, 1, 2, 5, 10))


def test_ar1_coefficient_recovered_within_asymptotic_se():
    # Asymptotic SE of the ML estimate of an AR(1) coefficient: sqrt((1 - phi^2) / n).
    # n = 4000, phi = 0.6 -> SE = 0.0126; we allow 4 SE (two-sided miss ~6e-5).
    phi, n = 0.6, 4000
    z = simulate_arma([phi], [], 1.0, n, np.random.default_rng(11))
    fit = select_arma(z, candidates=[(1, 0)])
    se = np.sqrt((1 - phi**2) / n)
    assert abs(fit.ar[0] - phi) < 4 * se
    # sigma^2 estimate: asymptotic SE of sigma ~ sigma / sqrt(2n) = 0.0112
    assert abs(fit.sigma - 1.0) < 4 / np.sqrt(2 * n)


def test_arma11_coefficients_recovered():
    # ARMA(1,1) asymptotic variances (Box & Jenkins): var(phi) = (1-phi^2)(1+phi*theta)^2 / ((phi+theta)^2 n),
    # var(theta) = (1-theta^2)(1+phi*theta)^2 / ((phi+theta)^2 n). 4 SE each.
    phi, theta, n = 0.7, 0.3, 5000
    z = simulate_arma([phi], [theta], 1.0, n, np.random.default_rng(5))
    fit = select_arma(z, candidates=[(1, 1)])
    common = (1 + phi * theta) ** 2 / ((phi + theta) ** 2 * n)
    assert abs(fit.ar[0] - phi) < 4 * np.sqrt((1 - phi**2) * common)
    assert abs(fit.ma[0] - theta) < 4 * np.sqrt((1 - theta**2) * common)


def test_aic_picks_ar2_on_a_clear_case():
    # Strong AR(2) (phi = 0.6, -0.5): AR(1) and ARMA(1,1) are badly misspecified and
    # lose by hundreds of AIC units at n = 3000.
    z = simulate_arma([0.6, -0.5], [], 1.0, 3000, np.random.default_rng(3))
    fit = select_arma(z, candidates=[(1, 0), (1, 1), (2, 0)])
    assert fit.order == (2, 0)
    assert set(fit.aic_grid) == {(1, 0), (1, 1), (2, 0)}
    assert min(fit.aic_grid[(1, 0)], fit.aic_grid[(1, 1)]) - fit.aic > 100


@pytest.mark.parametrize("lam", [-0.5, 0.0, 0.7, 1.0, 2.0, 2.6])
def test_yeo_johnson_inverse_undoes_scipy(lam):
    from scipy.stats import yeojohnson

    x = np.linspace(-4, 6, 201)
    np.testing.assert_allclose(yeo_johnson_inverse(yeojohnson(x, lmbda=lam), lam), x, atol=1e-9)


def test_transform_round_trip_and_standardization():
    rng = np.random.default_rng(0)
    x = rng.gamma(2.0, 3.0, size=5000)  # skewed: lam should move away from 1
    t, z = fit_transform(x)
    assert abs(np.mean(z)) < 1e-9 and abs(np.std(z, ddof=1) - 1) < 1e-9
    assert t.lam < 0.9
    np.testing.assert_allclose(t.inverse(z), x, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(t.forward(x), z, atol=1e-9)


def test_join_segments_puts_gaps_between_runs():
    joined = join_segments([np.ones(3), 2 * np.ones(2)], gap=4)
    assert len(joined) == 3 + 4 + 2
    assert np.isnan(joined[3:7]).all() and np.isfinite(joined[:3]).all()


def test_pooled_segments_recover_ar1():
    # 40 independent runs of 100 s each, AR(1) phi = 0.5, joined with gaps.
    # n = 4000 observations in total (minus 40 segment starts): SE ~ sqrt((1-phi^2)/n) = 0.0137, 4 SE.
    rng = np.random.default_rng(8)
    phi = 0.5
    segs = [simulate_arma([phi], [], 1.0, 100, rng) for _ in range(40)]
    blocks, _, fit, _ = fit_series_block(segs, candidates=[(1, 0)], mean=0.0, sd=1.0)
    assert blocks["arma"]["order"] == [1, 0]
    assert abs(fit.ar[0] - phi) < 4 * np.sqrt((1 - phi**2) / 4000)


def test_constant_series_is_white_noise_block():
    blocks, _, fit, _ = fit_series_block([np.full(50, 3.0)], candidates=[(1, 0), (2, 0)])
    assert blocks["arma"] == {"order": [1, 0], "ar": [0.0], "ma": [], "sigma": 0.0, "aic": None, "aic_grid": {}}
    assert blocks["yeo_johnson"]["z_sd"] > 0


@pytest.mark.slow
def test_full_grid_choice_reproduces_the_true_autocorrelation():
    # Whatever order AIC picks from the paper's 20 candidates, its implied ACF must match
    # the truth. Bartlett: SE of a sample autocorrelation ~ sqrt((1 + 2 sum rho_k^2) / n);
    # the model-based ACF is no noisier, so 4 such SE bound it (n = 1500).
    from statsmodels.tsa.arima_process import ArmaProcess

    phi, theta, n = 0.7, 0.4, 1500
    z = simulate_arma([phi], [theta], 1.0, n, np.random.default_rng(21))
    fit = select_arma(z, candidates=FULL_GRID)
    assert len(fit.aic_grid) >= 15  # nearly every candidate fitted
    true_acf = ArmaProcess([1, -phi], [1, theta]).acf(11)
    got = ArmaProcess(np.r_[1, -fit.ar], np.r_[1, fit.ma]).acf(11)
    tol = 4 * np.sqrt((1 + 2 * np.sum(true_acf[1:] ** 2)) / n)
    assert np.max(np.abs(got[1:] - true_acf[1:])) < tol


def test_yeo_johnson_inverse_saturates_outside_the_range():
    # lam = 3: negative inputs map into (-1, 0); lam = -1: positive inputs into [0, 1)
    with np.errstate(all="raise"):
        out = yeo_johnson_inverse(np.array([-1.5, -0.5, 0.5, 1.5]), 3.0)
    assert out[0] == -np.inf and np.isfinite(out[1:]).all()
    out = yeo_johnson_inverse(np.array([-0.5, 0.5, 1.5]), -1.0)
    assert out[2] == np.inf and np.isfinite(out[:2]).all()


def test_lambda_restricted_to_the_bijective_range():
    # Lognormal data: the unrestricted Yeo-Johnson MLE is negative (positives squeezed
    # into [0, -1/lam)); the restricted one sits on the boundary 0, where every real y
    # has a preimage, and it still beats every other lambda in [0, 2] on scipy's llf.
    from scipy.stats import yeojohnson_llf

    x = np.random.default_rng(4).lognormal(0.0, 1.2, size=4000)
    t, _ = fit_transform(x)
    assert t.lam_unconstrained < 0
    assert 0.0 <= t.lam < 0.01
    s = (x - t.mean) / t.sd
    assert all(yeojohnson_llf(t.lam, s) >= yeojohnson_llf(lam, s) for lam in np.linspace(0.02, 2, 50))
    far = t.inverse(np.array([-8.0, 8.0]))
    assert np.isfinite(far).all()


def test_single_second_runs_give_white_noise_not_cross_run_structure():
    # 200 runs of one value each, ordered by a strong trend across runs: no run holds two
    # consecutive seconds, so no autocorrelation can be measured -> white noise, sigma ~ 1
    # (z has unit variance by construction).
    segs = [np.array([np.sin(i / 5.0) + 0.1 * k]) for i, k in enumerate(np.random.default_rng(0).standard_normal(200))]
    blocks, _, fit, _ = fit_series_block(segs, candidates=[(1, 0), (2, 0)], mean=0.0, sd=1.0)
    assert blocks["arma"]["order"] == [1, 0] and blocks["arma"]["ar"] == [0.0] and blocks["arma"]["aic"] is None
    assert abs(fit.sigma - 1.0) < 1e-9


def test_candidates_need_within_run_pairs_at_their_longest_lag():
    # 40 runs of 3 s: 80 lag-1 pairs, 40 lag-2 pairs, none at lag 5 -> only orders with
    # max(p, q) <= 2 may be fitted (MIN_PAIRS = 30), whatever the requested grid.
    rng = np.random.default_rng(2)
    segs = [simulate_arma([0.5], [], 1.0, 3, rng) for _ in range(40)]
    _, _, fit, _ = fit_series_block(segs, candidates=[(1, 0), (2, 1), (5, 0), (10, 10)], mean=0.0, sd=1.0)
    assert set(fit.aic_grid) == {(1, 0), (2, 1)}
