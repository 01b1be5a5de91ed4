"""Discrete-time hazard models (gmm_volunteer/fitting/hazard.py; paper 2.2, ref. [23])."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.fitting.hazard import (
    PersonPeriod,
    duration_steps,
    fit_phase,
    hazard_probability,
    select_hazard,
    terms_for_degree,
)


def simulate_person_period(rng, n_runs, raw, type_effect, interaction=0.0, max_age=200):
    """Person-period rows from a known logistic hazard in raw covariates.

    logit h = a0 + ac*c + an*n + al*log(age+1) + interaction*(c-50)/10*log(age+1) + type_effect[k]
    c ~ N(50, 10) each step, n drawn per run from {1, 2, 5, 10}, k uniform over types.
    """
    a0, ac, an, al = raw
    cols = {k: [] for k in ("run_id", "type_idx", "c", "n", "age", "event")}
    for r in range(n_runs):
        k = int(rng.integers(len(type_effect)))
        n = float(rng.choice([1, 2, 5, 10]))
        for age in range(max_age):
            c = rng.normal(50.0, 10.0)
            la = np.log(age + 1.0)
            eta = a0 + ac * c + an * n + al * la + interaction * (c - 50) / 10 * la + type_effect[k]
            ev = float(rng.random() < 1 / (1 + np.exp(-eta)))
            for key, v in zip(cols, (r, k, c, n, float(age), ev)):
                cols[key].append(v)
            if ev:
                break
    return PersonPeriod(**{k: np.array(v) for k, v in cols.items()})


def test_terms_match_the_spec_order():
    assert terms_for_degree(1) == [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    assert terms_for_degree(2) == [
        (1, 0, 0), (0, 1, 0), (0, 0, 1), (2, 0, 0), (1, 1, 0), (1, 0, 1), (0, 2, 0), (0, 1, 1), (0, 0, 2)
    ]  # fmt: skip
    assert len(terms_for_degree(3)) == 19  # 3 + 6 + 10 monomials


def test_duration_steps():
    np.testing.assert_array_equal(duration_steps([0.0, 0.2, 1.0, 1.0001, 2.5]), [1, 1, 1, 2, 3])


def test_linear_hazard_recovered_within_4_se():
    rng = np.random.default_rng(42)
    raw = (-2.0, 0.03, -0.08, 0.35)
    types = (0.0, 0.5, -0.6)
    pp = simulate_person_period(rng, 3000, raw, types)
    fit = fit_phase(pp, 1, 3, "band_in")
    assert not fit.regularized
    # the fit works in standardized covariates: translate the truth to that scale
    mean, sd = fit.mean, fit.sd
    a0, ac, an, al = raw
    truth = np.array(
        [a0 + ac * mean[0] + an * mean[1] + al * mean[2], ac * sd[0], an * sd[1], al * sd[2], types[1], types[2]]
    )
    # params: intercept, zc, zn, zl, type1, type2 (type 0 is the reference)
    z = (fit.params - truth) / fit.bse
    assert np.all(np.abs(z) < 4), z


def test_block_reproduces_the_fitted_probabilities():
    import statsmodels.api as sm

    rng = np.random.default_rng(1)
    pp = simulate_person_period(rng, 800, (-1.5, 0.02, -0.05, 0.3), (0.0, 0.4))
    fit = fit_phase(pp, 2, 2, "cpu")
    from gmm_volunteer.fitting.hazard import design

    X = design(pp.covariates(), pp.type_idx, 2, fit.terms, fit.mean, fit.sd)
    direct = sm.Logit(pp.event, X).fit(disp=0).predict(X)
    via_block = hazard_probability(fit.block, pp.c, pp.n, pp.age, pp.type_idx)
    # the block is rounded to 6 significant digits: probabilities agree to ~1e-5
    np.testing.assert_allclose(via_block, direct, atol=1e-4)
    assert fit.block["type_coef"][0] == 0.0 and len(fit.block["type_coef"]) == 2
    assert len(fit.block["coef"]) == len(fit.block["terms"]) == 9


def test_degree_selection_finds_an_interaction():
    # A strong c x log(age+1) interaction needs degree 2; degree 1 misses it.
    rng = np.random.default_rng(7)
    pps = {
        ph: simulate_person_period(rng, 1500, (-2.0, 0.0, -0.05, 0.3), (0.0, 0.3), interaction=1.2)
        for ph in ("download", "execution", "upload")
    }
    block, diag = select_hazard(pps, 2, degrees=(1, 2))
    assert block["degree"] == 2
    assert diag["mean_aic"][1] - diag["mean_aic"][2] > 20


def test_degree_one_kept_when_the_truth_is_linear():
    # AIC penalizes the 6 extra degree-2 terms by 12 units; with a linear truth the
    # likelihood gain is ~chi2(6)/2, so degree 2 wins only with probability ~6%: fixed seed.
    rng = np.random.default_rng(3)
    pps = {ph: simulate_person_period(rng, 1500, (-2.0, 0.02, -0.05, 0.3), (0.0, 0.3)) for ph in ("download", "execution", "upload")}
    block, _ = select_hazard(pps, 2, degrees=(1, 2))
    assert block["degree"] == 1


def test_phase_that_always_ends_at_once_gives_h_one():
    # every run ends in its first step: the ML intercept is +inf; the block says h = 1
    n = 200
    pp = PersonPeriod(
        run_id=np.arange(n, dtype=float),
        type_idx=np.zeros(n, int),
        c=np.random.default_rng(0).normal(5, 1, n),
        n=np.tile([1.0, 5.0], n // 2),
        age=np.zeros(n),
        event=np.ones(n),
    )
    fit = fit_phase(pp, 2, 1, "band_out")
    h = hazard_probability(fit.block, pp.c, pp.n, pp.age, pp.type_idx)
    assert fit.immediate == [0] and fit.block["terms"] == []
    assert h.min() > 1 - 1e-12


def test_type_that_always_ends_at_once_is_set_aside():
    # type 2 always completes in its first step (infinite ML effect); types 0 and 1 follow
    # a known linear hazard, which must still be recovered by ML within 4 SE.
    rng = np.random.default_rng(9)
    raw = (-2.0, 0.03, -0.08, 0.35)
    pp = simulate_person_period(rng, 2000, raw, (0.0, 0.5))
    m = 300
    extra = PersonPeriod(
        run_id=np.arange(m, dtype=float) + 1e6,
        type_idx=np.full(m, 2),
        c=rng.normal(50, 10, m),
        n=rng.choice([1.0, 2.0, 5.0, 10.0], m),
        age=np.zeros(m),
        event=np.ones(m),
    )
    both = PersonPeriod(*(np.concatenate([getattr(pp, f), getattr(extra, f)]) for f in PersonPeriod.__dataclass_fields__))
    fit = fit_phase(both, 1, 3, "cpu")
    assert fit.immediate == [2] and not fit.regularized
    mean, sd = fit.mean, fit.sd
    a0, ac, an, al = raw
    truth = np.array([a0 + ac * mean[0] + an * mean[1] + al * mean[2], ac * sd[0], an * sd[1], al * sd[2], 0.5])
    assert np.all(np.abs((fit.params - truth) / fit.bse) < 4)
    h = hazard_probability(fit.block, extra.c, extra.n, extra.age, extra.type_idx)
    assert h.min() > 1 - 1e-6


def test_constant_covariate_terms_dropped():
    rng = np.random.default_rng(2)
    pp = simulate_person_period(rng, 500, (-1.5, 0.02, 0.0, 0.3), (0.0,))
    pp.n[:] = 4.0
    fit = fit_phase(pp, 2, 1, "cpu")
    assert all(t[1] == 0 for t in fit.block["terms"])
    assert fit.block["covariate_sd"][1] == pytest.approx(1.0)


def test_powers_beyond_the_distinct_values_are_dropped():
    # batch sizes {1, 5}: zn^2 is an affine function of zn -> only linear zn terms
    rng = np.random.default_rng(4)
    pp = simulate_person_period(rng, 600, (-1.5, 0.02, -0.05, 0.3), (0.0,))
    pp.n[:] = np.where(pp.run_id % 2 == 0, 1.0, 5.0)
    fit = fit_phase(pp, 3, 1, "cpu")
    assert not fit.regularized
    assert (0, 1, 0) in fit.terms and all(t[1] <= 1 for t in fit.terms)
    assert (1, 1, 1) in fit.terms  # interactions with zn stay
