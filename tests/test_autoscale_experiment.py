"""The autoscaler experiment's pieces (issue 11 items 3-4; docs/experiments.md section 7):
grid `per_value` overrides, the LA-IMR latency fit and its held-out evaluation, the
SLO-minute count, and `gmmv report` on a small sweep over autoscalers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
import yaml

from gmm_volunteer.experiments import latency_fit
from gmm_volunteer.experiments.autoscale_report import violation_minutes
from gmm_volunteer.policies.autoscalers.la_imr import erlang_c_wait
from gmm_volunteer.experiments.sweep import GridError, load_grid, run_sweep


def _grid(tmp_path, model, per_value, steps=240, seeds=2):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({
        "steps": steps, "model": str(model), "users": {"count": 40}, "server": {"capacity": 4.0},
        "scheduler": "centralized", "requests": {"think_time": {"dist": "exponential", "mean": 20.0}},
        "demand": {"surges": [{"start": 60, "duration": 60, "factor": 4.0}]}}))
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": "base.yaml", "grid": {"autoscaler": ["fixed", "capacity_rule"]},
                                    "seeds": seeds, "output": str(tmp_path / "out"), "per_value": per_value}))
    return grid


CR = {"autoscaler": {"capacity_rule": {"autoscaler_options": {"max_units": 8, "period": 5, "cooldown": 30}}}}


def test_per_value_overrides_go_with_their_value(tmp_path, synthetic_model):
    g = load_grid(_grid(tmp_path, synthetic_model, CR))
    runs = {r.coords["autoscaler"]: r.config for r in g.runs() if r.coords["seed"] == 0}
    assert runs["fixed"].autoscaler_options == {}
    assert runs["capacity_rule"].autoscaler_options == {"max_units": 8, "period": 5, "cooldown": 30}


@pytest.mark.parametrize("per_value, needle", [
    ({"autoscalr": {}}, "per_value.autoscalr: not a grid key; did you mean 'autoscaler'?"),
    ({"autoscaler": {"la_imr": {}}}, "per_value.autoscaler.la_imr: not one of the grid's values"),
    ({"autoscaler": {"capacity_rule": {"autoscaler": "fixed"}}}, "per_value.autoscaler.capacity_rule.autoscaler"),
    ({"autoscaler": {"capacity_rule": {"autoscaler_options": {"rho": 1}}}}, "autoscaler_options.rho"),
    ({"autoscaler": ["x"]}, "per_value.autoscaler: must be a mapping"),
])
def test_bad_per_value_names_the_key(tmp_path, synthetic_model, per_value, needle):
    with pytest.raises(GridError) as exc:
        load_grid(_grid(tmp_path, synthetic_model, per_value))
    assert needle in str(exc.value)


def _point(units, load, split, lam, latency, r=1.0):
    return latency_fit.Point(units=units, load=load, split=split, arrival_rate=lam, per_unit_rate=lam / units,
                             work_per_request=r, utilization=lam * r / (2.0 * units), mean_latency=latency,
                             p99_latency=math.nan, erlang_wait=erlang_c_wait(units, lam, 2.0 / r))


def test_fit_recovers_the_model_and_reports_held_out_error():
    """Latencies made by the model LA-IMR evaluates (alpha + beta x^gamma + W_q) are fitted
    back exactly on the training points and predicted exactly on held-out ones; a model
    that is wrong off the training range shows its error there."""
    a, b, g = 1.5, 2.0, 1.3
    pts = []
    for split, lams in (("train", (1.0, 2.0, 3.0, 4.0)), ("test", (5.0, 6.0))):
        for n in (4, 8):
            w = erlang_c_wait(n, lams[0], 2.0)
            pts += [_point(n, lam, split, lam, a + b * (lam / n) ** g + erlang_c_wait(n, lam, 2.0)) for lam in lams]
            assert w >= 0
    params, pts = latency_fit.fit_and_evaluate(pts)
    assert params["alpha"] == pytest.approx(a, rel=1e-4) and params["gamma"] == pytest.approx(g, rel=1e-4)
    assert max(abs(p.relative_error) for p in pts) < 1e-4
    # held-out latencies 50 % above the law: the test error says so, the training one does not
    for p in pts:
        if p.split == "test":
            p.mean_latency *= 1.5
    params, pts = latency_fit.fit_and_evaluate(pts)
    err = latency_fit.error_summary(pts)
    assert err["train"]["max_abs_relative_error"] < 1e-4
    assert err["test"]["mean_abs_relative_error"] == pytest.approx(1 / 3, rel=1e-3)
    assert "| test | 8 | 6 |" in latency_fit.table(pts)


def test_fit_command_runs_and_rejects_bad_input(tmp_path, synthetic_model, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"model": str(synthetic_model), "users": {"count": 30}, "scheduler": "centralized",
                                   "requests": {"think_time": {"dist": "exponential", "mean": 20.0}}}))
    out = tmp_path / "fit.yaml"
    assert latency_fit.main([str(cfg), "-o", str(out), "--units", "2", "4", "--train-loads", "0.5", "1",
                             "--test-loads", "2", "--steps", "400", "--warmup", "100", "--unit", "4"]) == 0
    res = yaml.safe_load(out.read_text())
    assert set(res["autoscaler_options"]) == {"alpha", "beta", "gamma"}
    assert [p["split"] for p in res["points"]].count("test") == 2
    assert "predicted (s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        latency_fit.main([str(cfg), "-o", str(out), "--units", "0"])
    assert exc.value.code == 2 and "--units" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("users: {cuont: 3}\n")
    assert latency_fit.main([str(bad), "-o", str(tmp_path / "x.yaml")]) == 2
    assert "users.cuont" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


def test_violation_minutes_count_minutes_whose_p99_exceeds_tau():
    # minute 0: 100 requests of 1 s; minute 1: 98 of 1 s and 2 of 100 s (P99 > 30 s);
    # minute 3: one request of 31 s; minute 2: nothing ended (not a violation)
    end = np.r_[np.full(100, 30), np.full(100, 90), [200]]
    lat = np.r_[np.ones(100), np.ones(98), [100, 100], [31]]
    one_type = ("request_type", "request")  # the store's layout, one request type
    store = xr.Dataset({"request_end": (one_type, end[None]), "request_latency": (one_type, lat[None]),
                        "request_count": ("request_type", [end.size])})
    assert violation_minutes(store, tau=30.0) == 2.0
    assert violation_minutes(store, tau=200.0) == 0.0


def test_report_of_a_sweep_over_autoscalers(tmp_path, synthetic_model):
    from gmm_volunteer.cli.commands import main

    grid = _grid(tmp_path, synthetic_model, CR)
    report = run_sweep(load_grid(grid), serial=True)
    assert report.ok
    html_path = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(html_path)]) == 0
    text = html_path.read_text()
    assert "Capacity and P99 latency over the run" in text and "data:image/png;base64," in text
    assert "capacity_rule - fixed" in text and "minutes in SLO violation" in text and "P99 light5 (s)" in text


def test_the_report_rebuilds_the_runs_demand_with_its_bursts(tmp_path, synthetic_model):
    from gmm_volunteer.experiments.autoscale_report import demand_series
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation
    from gmm_volunteer.io.results import open_result, write_result

    law = {"alpha": 1.2, "low": 20, "high": 100}
    cfg = config_from_dict({"steps": 300, "seed": 4, "model": str(synthetic_model), "users": {"count": 20},
                            "server": {"capacity": 2.0},
                            "demand": {"daily": {"kind": "sinusoid"}, "start_hour": 6.0,
                                       "bursts": {"rate": 30.0, "factor": {**law, "low": 2, "high": 3},
                                                  "duration": law}}})
    sim = Simulation(cfg)
    write_result(sim.run(progress=False), tmp_path / "r.zarr")
    np.testing.assert_allclose(np.cumsum(demand_series(open_result(tmp_path / "r.zarr"))), sim.arrays.dm_cum[1:])
