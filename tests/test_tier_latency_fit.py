"""LA-IMR's router law per (subtask type, tier) (issue 51 item 3; docs/model.md D41):
the fit recovers known parameters, and the router predicts with the calibrated law."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmm_volunteer.experiments.tier_latency_fit import evaluate, fit_law, fit_pairs
from gmm_volunteer.policies.routing import D_PRED_ROUTER, D_RATE, D_REAL, D_SUBTYPE, D_TIER, TIER_NAMES
from test_seed_fidelity import _run

TRUE = (0.6, 1.2, 1.5)


def _synthetic(n, seed, law=TRUE, sd=0.2):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.05, 2.0, n)
    a, b, g = law
    return x, a + b * x ** g + rng.normal(0.0, sd, n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_parameters_within_standard_errors(seed):
    """2,000 points with noise sd 0.2: each estimate within 4 of its standard errors of
    the truth (a normal estimate falls outside with probability 6e-5; three
    parameters over three seeds, 6e-4 in all), and the standard errors are those of a
    fit of this size (each below 0.1, where a wrong model's would not be small)."""
    x, y = _synthetic(2000, seed)
    est, se = fit_law(x, y)
    for v, s, true in zip(est, se, TRUE):
        assert math.isfinite(s) and 0 < s < 0.1
        assert abs(v - true) < 4 * s, (est, se)


def test_fit_needs_points_and_drops_non_positive_rates():
    with pytest.raises(ValueError, match="at least 4"):
        fit_law([0.0, 0.0, 1.0, 2.0, np.nan], [1, 2, 3, 4, 5])


def test_pairs_fitted_and_evaluated_per_subtask_type_and_tier():
    """Two pairs with their own laws: each pair's fit finds its own law (within 4 of its
    standard errors), a pair with too few decisions gets none, and the held-out error of
    noise-free data under the true law is near 0."""
    x1, y1 = _synthetic(1500, 5)
    law2 = (2.0, 0.3, 0.8)
    x2, y2 = _synthetic(1500, 6, law2)
    rows = np.concatenate([
        np.column_stack([np.zeros_like(x1), np.full_like(x1, TIER_NAMES.index("cloud")), x1, y1]),
        np.column_stack([np.ones_like(x2), np.full_like(x2, TIER_NAMES.index("edge")), x2, y2]),
        np.array([[1.0, 0.0, 0.5, 3.0]] * 10),  # (1, local): 10 decisions, below min_points
    ])
    laws = fit_pairs(rows, min_points=50)
    assert [(law["subtask_type"], law["tier"]) for law in laws] == [(0, "cloud"), (1, "edge")]
    for law, true in zip(laws, (TRUE, law2)):
        for k, v in zip(("alpha", "beta", "gamma"), true):
            assert abs(law[k] - v) < 4 * law["se"][k]
    xt = np.linspace(0.1, 2.0, 50)
    clean = np.column_stack([np.zeros(50), np.full(50, 2.0), xt, TRUE[0] + TRUE[1] * xt ** TRUE[2]])
    out = evaluate(laws, clean, "test", ["a", "b"])
    assert len(out) == 1 and out[0]["subtask"] == "a" and out[0]["error"] < 0.05


def test_router_predicts_with_the_calibrated_law(synthetic_model):
    """A run of the la_imr router with a law for (subtask type 0, cloud): its logged
    prediction of every such decision is alpha + beta x^gamma at the logged rate per
    server x, and the other pairs keep the single law (predictions that differ)."""
    law = {"subtask_type": 0, "tier": "cloud", "alpha": 0.4, "beta": 0.7, "gamma": 1.3}
    rec = _run(synthetic_model, "la_imr", {"beta": 2.0, "gamma": 0.5, "budget_s": 0.5, "tier_laws": [law]},
               steps=150, users=20, server=2)
    d = np.asarray(rec.policy_series["decision"][1])
    cloud0 = (d[:, D_TIER] == 2) & (d[:, D_SUBTYPE] == 0)
    assert cloud0.sum() >= 5
    want = law["alpha"] + law["beta"] * d[cloud0, D_RATE] ** law["gamma"]
    np.testing.assert_allclose(d[cloud0, D_PRED_ROUTER], want, rtol=1e-12)
    other = ~cloud0 & np.isfinite(d[:, D_PRED_ROUTER])
    assert other.any()
    assert np.isfinite(d[:, D_REAL]).any()


def test_router_refuses_a_law_for_an_unknown_subtask_type(synthetic_model, tmp_path, capsys):
    """Before any work: the run's preflight exits 2 naming the key, and writes nothing."""
    import yaml

    from gmm_volunteer.cli.commands import main

    law = {"subtask_type": 99, "tier": "cloud", "alpha": 0.4, "beta": 0.7, "gamma": 1.3}
    with pytest.raises(ValueError, match="tier_laws.0.subtask_type: 99"):
        _run(synthetic_model, "la_imr", {"tier_laws": [law]}, steps=5, users=3)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"steps": 5, "model": str(synthetic_model), "users": {"count": 3},
                                   "server": {"capacity": 1}, "scheduler": "la_imr",
                                   "scheduler_options": {"tier_laws": [law]}}))
    out = tmp_path / "out.zarr"
    assert main(["run", str(cfg), "-o", str(out), "-q"]) == 2
    assert "tier_laws.0.subtask_type: 99" in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_bad_input_before_any_run(tmp_path, capsys):
    from gmm_volunteer.experiments.tier_latency_fit import main

    out = tmp_path / "laws.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["missing.yaml", "-o", str(out), "--table", str(tmp_path / "t.md")])
    assert exc.value.code == 2 and "--operation-table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["missing.yaml", "-o", str(out), "--train", "500:0"])
    assert exc.value.code == 2 and "500:0" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("server: {allocation: nowhere}\n")
    assert main([str(bad), "-o", str(out)]) == 2
    assert "allocation" in capsys.readouterr().err
    assert not out.exists()
