"""Discrete-time hazard models (gmm_volunteer/fitting/hazard.py, hazard_select.py,
hazard_check.py; paper 2.2, ref. [23]; docs/model.md D32)."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.fitting.hazard import (
    PersonPeriod,
    covariates,
    design,
    duration_steps,
    fit_phase,
    hazard_probability,
    inverse_link,
    offset,
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


def _effective(fit, k):
    """Type k's coefficients of its terms: shared + its own deviation."""
    nt = len(fit.terms)
    return fit.params[1: 1 + nt] + fit.params[1 + nt + len(fit.fitted_types) - 1 + k * nt: 1 + nt + len(fit.fitted_types) - 1 + (k + 1) * nt]


def test_linear_hazard_recovered_within_4_se():
    # one type: the truth's raw slopes, translated to the standardized scale, are
    # recovered by the penalized fit within 4 standard errors of the unpenalized ML
    # (the ridge penalty of 1 against 3000 runs moves them by a small part of an SE)
    import statsmodels.api as sm

    rng = np.random.default_rng(42)
    raw = (-2.0, 0.03, 0.0, 0.35)  # no batch-size effect: linear in n and in log n alike
    pp = simulate_person_period(rng, 3000, raw, (0.0,))
    fit = fit_phase(pp, 1, 1, "band_in")
    assert fit.converged
    mean, sd = fit.mean, fit.sd
    a0, ac, an, al = raw
    # and the c and log(age + 1) slopes against the truth directly
    X = design(covariates(pp.c, pp.n, pp.age), pp.type_idx, [0], fit.terms, mean, sd)[:, :4]
    ml = sm.Logit(pp.event, X).fit(disp=0)
    eff = _effective(fit, 0)
    z = (np.concatenate([[fit.params[0]], eff]) - ml.params) / ml.bse
    assert np.all(np.abs(z) < 4), z
    truth_c, truth_l = ac * sd[0], al * sd[2]
    assert abs(eff[0] - truth_c) < 4 * ml.bse[1] and abs(eff[2] - truth_l) < 4 * ml.bse[3]


@pytest.mark.parametrize("form,link", [("paper", "logit"), ("paper", "cloglog"), ("work_fraction", "cloglog")])
def test_block_reproduces_the_fitted_probabilities(form, link):
    rng = np.random.default_rng(1)
    pp = simulate_person_period(rng, 800, (-1.5, 0.02, -0.05, 0.3), (0.0, 0.4))
    pp.work = 2.0 * pp.n
    fit = fit_phase(pp, 2, 2, "cpu", form, link)
    cov = covariates(pp.c, pp.n, pp.age, pp.work, form)
    X = design(cov, pp.type_idx, fit.fitted_types, fit.terms, fit.mean, fit.sd)
    direct = inverse_link(X @ fit.params + offset(cov, fit.mean, form), link)
    via_block = hazard_probability(fit.block, pp.c, pp.n, pp.age, pp.type_idx, pp.work)
    # the block is rounded to 6 significant digits: probabilities agree to ~1e-5
    np.testing.assert_allclose(via_block, direct, atol=1e-4)
    assert fit.block["type_coef"][0] == 0.0 and len(fit.block["type_coef"]) == 2
    assert len(fit.block["type_terms"]) == 2 and all(len(r) == len(fit.block["terms"]) for r in fit.block["type_terms"])


def test_type_slopes_differ_where_the_types_do():
    # the type enters every monomial: a type whose hazard falls with age and one whose
    # hazard rises get log-age slopes of opposite signs (one intercept shift could not)
    rng = np.random.default_rng(5)
    cols = {k: [] for k in ("run_id", "type_idx", "c", "n", "age", "event")}
    for r in range(1500):
        k = r % 2
        for age in range(100):
            eta = -1.0 + (1.2 if k == 0 else -1.2) * np.log(age + 1.0)
            ev = float(rng.random() < 1 / (1 + np.exp(-eta)))
            for key, v in zip(cols, (r, k, 50.0 + rng.normal(), 1.0 + r % 3, float(age), ev)):
                cols[key].append(v)
            if ev:
                break
    pp = PersonPeriod(**{k: np.array(v) for k, v in cols.items()})
    fit = fit_phase(pp, 1, 2, "cpu")
    l_slope = [(_effective(fit, k)[fit.terms.index((0, 0, 1))]) for k in (0, 1)]
    assert l_slope[0] > 0 > l_slope[1]


def test_type_that_always_ends_at_once_is_set_aside():
    # type 2 always completes in its first step (infinite effect): its rows are set
    # aside and its h is 1 whatever the covariates
    rng = np.random.default_rng(9)
    pp = simulate_person_period(rng, 1000, (-2.0, 0.03, -0.08, 0.35), (0.0, 0.5))
    m = 300
    extra = PersonPeriod(run_id=np.arange(m, dtype=float) + 1e6, type_idx=np.full(m, 2), c=rng.normal(50, 10, m),
                         n=rng.choice([1.0, 2.0, 5.0, 10.0], m), age=np.zeros(m), event=np.ones(m))
    both = PersonPeriod(*(np.concatenate([getattr(pp, f), getattr(extra, f)]) for f in ("run_id", "type_idx", "c", "n", "age", "event")))
    fit = fit_phase(both, 2, 3, "cpu")
    assert fit.immediate == [2] and fit.converged
    h = hazard_probability(fit.block, extra.c, extra.n, np.arange(m) % 7, extra.type_idx)
    assert h.min() > 1 - 1e-9


def test_phase_that_always_ends_at_once_gives_h_one():
    n = 200
    pp = PersonPeriod(run_id=np.arange(n, dtype=float), type_idx=np.zeros(n, int),
                      c=np.random.default_rng(0).normal(5, 1, n), n=np.tile([1.0, 5.0], n // 2),
                      age=np.zeros(n), event=np.ones(n))
    fit = fit_phase(pp, 2, 1, "band_out")
    h = hazard_probability(fit.block, pp.c, pp.n, pp.age, pp.type_idx)
    assert fit.immediate == [0] and fit.block["terms"] == []
    assert h.min() > 1 - 1e-12


def test_powers_beyond_the_distinct_values_are_dropped():
    # batch sizes {1, 5}: (log n)^2 is an affine function of log n -> only linear zn terms
    rng = np.random.default_rng(4)
    pp = simulate_person_period(rng, 600, (-1.5, 0.02, -0.05, 0.3), (0.0,))
    pp.n[:] = np.where(pp.run_id % 2 == 0, 1.0, 5.0)
    fit = fit_phase(pp, 3, 1, "cpu")
    assert (0, 1, 0) in fit.terms and all(t[1] <= 1 for t in fit.terms)
    assert (1, 1, 1) in fit.terms  # interactions with zn stay


def test_degree_chosen_by_the_sizes_left_out():
    # a hazard cubic in log(age + 1) with types alike: leaving each batch size out in
    # turn, degree 3 predicts the left-out runs better than degree 1 (held-out
    # log-likelihood), and fit_hazard's choice is the best of the candidates
    from types import SimpleNamespace

    from gmm_volunteer.fitting.hazard_select import leave_one_size_out

    rng = np.random.default_rng(11)
    cols = {k: [] for k in ("run_id", "type_idx", "c", "n", "age", "event")}
    for r in range(2000):
        n = float(rng.choice([1, 2, 5, 10]))
        for age in range(60):
            la = np.log(age + 1.0)
            eta = -3.0 + 2.5 * (la - 1.5) ** 3 + 0.1 * np.log(n)
            ev = float(rng.random() < 1 / (1 + np.exp(-eta)))
            for key, v in zip(cols, (r, 0, 50.0 + rng.normal(), n, float(age), ev)):
                cols[key].append(v)
            if ev:
                break
    pp = PersonPeriod(**{k: np.array(v) for k, v in cols.items()})
    traces = SimpleNamespace(catalog=[{"name": "a"}])
    ll = {q: leave_one_size_out(traces, pp, "download", q, "paper", "logit") for q in (1, 3)}
    assert ll[3] > ll[1] + 10


def _shipped(name):
    from gmm_volunteer.fitting.traces import load_traces
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle

    traces = {"default": "traces", "paper-scale": "traces/paper-scale"}[name]
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    return load_bundle(packaged_bundle(name)), load_traces(root / traces)


# What the shipped fits fail, as docs/model.md D32 and D38 report it: any other failure, or
# one of these fixed, changes this list and the docs with it. Paper-scale's are cells of
# its quota/ collections (one run each but swin_b's at 200 %): at the 50 % quota the
# measured work of a batch is 1.18 x (median) its work at full CPU, which the
# work-fraction form, whose work does not depend on the CPU, cannot foresee; the others
# are single runs that ended just past a step boundary or whose work strayed from the
# mean of the full-CPU runs (D38).
KNOWN_FAILURES = {
    "default": [],
    "paper-scale": [
        "ppocr_det at 10, quota/cpu100", "ppocr_det at 50, quota/cpu100", "resnet101 at 10, quota/cpu100",
        "resnet101 at 50, quota/cpu100", "resnet152 at 10, quota/cpu100", "resnet50 at 20, quota/cpu100",
        "vit_b16 at 5, quota/cpu100", "vit_l16 at 20, quota/cpu100", "swin_b at 50, quota/cpu200",
        "convnext_b at 2, quota/cpu50", "convnext_b at 10, quota/cpu50", "convnext_b at 20, quota/cpu50",
        "convnext_l at 1, quota/cpu50", "convnext_l at 2, quota/cpu50", "convnext_l at 5, quota/cpu50",
        "deeplabv3_r101 at 1, quota/cpu50", "deeplabv3_r101 at 2, quota/cpu50", "deeplabv3_r101 at 5, quota/cpu50",
        "ppocr_det at 2, quota/cpu50", "ppocr_rec at 20, quota/cpu50", "resnet101 at 10, quota/cpu50",
        "resnet152 at 5, quota/cpu50", "resnext101_32x32d at 1, quota/cpu50", "resnext101_32x32d at 2, quota/cpu50",
        "resnext101_32x32d at 20, quota/cpu50", "swin_b at 2, quota/cpu50", "swin_b at 5, quota/cpu50",
        "swin_b at 20, quota/cpu50", "vit_l16 at 2, quota/cpu50", "vit_l16 at 5, quota/cpu50",
        "vit_l16 at 10, quota/cpu50", "vit_l16 at 20, quota/cpu50",
    ],
}


@pytest.mark.parametrize("name", ["default", "paper-scale"])
def test_shipped_execution_hazards_pass_their_checks_but_the_listed_cells(name):
    """docs/model.md D32, D38, issue 48: every measured cell within max(0.5 step, 15 %) (but
    the failures listed above), every batch up to 64 ends, mean steps never fall as the
    batch grows (to 128, beyond the data) or as the CPU is halved and quartered."""
    from gmm_volunteer.fitting.hazard_check import hazard_checks

    bundle, traces = _shipped(name)
    checks = {c["check"].split(" ")[0] + c["check"].split(" ")[-1]: c for c in hazard_checks(bundle, traces)}
    assert len(checks) == 4
    measured = next(c for c in checks.values() if c["check"].startswith("measured"))
    assert [f.split(" (")[0].split(":")[0] for f in measured["failures"]] == KNOWN_FAILURES[name]
    # subtasks/'s cells (70 on paper-scale) and, on paper-scale, quota/'s 84 + 84 + 70
    assert measured["examined"] == {"default": 30, "paper-scale": 70 + 84 + 84 + 70}[name]
    for c in checks.values():
        if c is not measured:
            assert c["passed"], c


def test_checks_catch_a_hazard_that_falls_with_size():
    # a hazard that falls steeply with log age and rises with the batch size (the way
    # 0.8.8's fits failed: long batches practically never end, larger ones end sooner);
    # the checks must say so
    import copy

    from gmm_volunteer.fitting.hazard_check import hazard_checks

    bundle, _ = _shipped("paper-scale")
    bad = copy.deepcopy(bundle)
    ex = bad.hazard.phases["execution"]
    ex.form, ex.link, ex.terms, ex.coef, ex.type_terms = "paper", "logit", [(0, 0, 1), (0, 1, 0)], [-8.0, 3.0], None
    ex.intercept, ex.type_coef = -2.0, [0.0] * len(ex.type_coef)
    failed = {c["check"] for c in hazard_checks(bad) if not c["passed"]}
    assert any(c.startswith("every batch") for c in failed)
    assert any("grows" in c for c in failed)


@pytest.mark.parametrize("name", ["default", "paper-scale"])
def test_shipped_hazard_blocks_are_refitted_from_their_traces(name, tmp_path):
    """`python -m gmm_volunteer.fitting.refit_hazard` on a copy of a shipped bundle and its
    traces writes the shipped hazard block again, digit for digit (the fit is
    deterministic), and `--no-write` writes nothing."""
    import shutil

    import yaml

    from gmm_volunteer.fitting.refit_hazard import main
    from gmm_volunteer.io.bundlefiles import packaged_bundle

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    traces = root / {"default": "traces", "paper-scale": "traces/paper-scale"}[name]
    copy = tmp_path / name
    shutil.copytree(packaged_bundle(name), copy)
    (copy / "report" / "hazard.md").unlink()
    before = (copy / "bundle.yaml").read_bytes()
    assert main([str(copy), str(traces), "--no-write"]) in (0, 3)  # 3: a check fails (D32)
    assert (copy / "bundle.yaml").read_bytes() == before and not (copy / "report" / "hazard.md").exists()
    main([str(copy), str(traces)])
    shipped = yaml.safe_load((packaged_bundle(name) / "bundle.yaml").read_text())
    assert yaml.safe_load((copy / "bundle.yaml").read_text())["hazard"] == shipped["hazard"]


def test_refit_hazard_refuses_bad_arguments_before_any_work(tmp_path, capsys):
    from gmm_volunteer.fitting.refit_hazard import main

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "traces", "--form", "aft"])
    assert exc.value.code == 2
    assert main([str(tmp_path / "nowhere"), "traces"]) == 2
    assert "refit_hazard:" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
