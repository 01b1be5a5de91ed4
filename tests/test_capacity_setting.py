"""Cheapest autoscaler setting (issue 11 item 5; docs/experiments.md section 6): the
search on constructed evaluators whose answer is known, the option and range checks,
the command's bad input, and one small real simulation."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml

from gmm_volunteer.experiments.capacity_setting import (
    Setting,
    find_setting,
    parse_range,
    resolve_setting,
)
from gmm_volunteer.run.config import config_from_dict

SEEDS = 3
RHO = Setting("autoscaler_options.rho_target", ("rho_target",), integer=False)


def constructed(feasible, cost, seed_noise=(0.0, 0.3, -0.2), calls=None):
    """An evaluator with a known verdict and cost curve: hours per seed = cost(x) plus a
    per-seed offset that is the same at every x (as common random numbers make it)."""

    def evaluate(x):
        if calls is not None:
            calls.append(x)
        hours = cost(x) + np.asarray(seed_noise[:SEEDS])
        return hours, feasible(x), {}, 0.0

    return evaluate


def test_feasibility_threshold_with_decreasing_cost():
    """Feasible iff x <= 0.55, cost falls with x: the answer is the largest feasible x,
    within the refinement's gap (tol x range) below 0.55."""
    lo, hi, tol = 0.1, 0.9, 0.01
    res = find_setting(constructed(lambda x: x <= 0.55, lambda x: 10 - 8 * x), RHO, lo, hi,
                       grid_points=5, tol=tol, max_evaluations=40)
    gap = tol * (hi - lo)
    assert res.best is not None and 0.55 - gap <= res.best.value <= 0.55
    assert not res.stopped_by_budget
    assert [e.phase for e in res.path[:5]] == ["grid"] * 5
    assert [e.value for e in res.path[:5]] == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])
    cheaper = [e for e in res.path if e.cost[0] < res.best.cost[0]]
    assert cheaper and not any(e.feasible for e in cheaper)
    # the evaluated neighbour above is infeasible and within the gap: the boundary is shown
    below, above = res.bracket()
    assert above is not None and above > 0.55 and above - res.best.value <= gap + 1e-12
    assert res.verdict_changes() == 1


def test_non_monotone_feasibility_and_cost():
    """Feasible on two islands, [0.2, 0.35] and [0.6, 0.7]; cost 1 + (x - 0.65)^2 has its
    minimum inside the second island. Nothing monotone: the grid finds the islands, the
    refinement the minimum (within its gap: the true minimum of a convex cost lies
    between the evaluated neighbours of the cheapest evaluated value)."""
    tol = 0.005
    feasible = lambda x: 0.2 <= x <= 0.35 or 0.6 <= x <= 0.7  # noqa: E731
    res = find_setting(constructed(feasible, lambda x: 1 + (x - 0.65) ** 2), RHO, 0.0, 1.0,
                       grid_points=9, tol=tol, max_evaluations=60)
    assert res.best is not None and abs(res.best.value - 0.65) <= tol
    assert res.verdict_changes() >= 3  # meets, misses, meets, misses along the values
    assert "not monotone" in res.text()


def test_paired_differences_cancel_the_common_seed_noise():
    """Per-seed offsets common to every value (common random numbers) leave each cost's
    interval wide but the paired difference to the answer exact."""
    res = find_setting(constructed(lambda x: x <= 0.5, lambda x: 10 - 8 * x, seed_noise=(0.0, 3.0, -3.0)),
                       RHO, 0.0, 1.0, grid_points=3, tol=0.5, max_evaluations=3)
    assert res.best.value == 0.5
    first = res.path[0]  # x = 0
    m, lo, hi = res.paired_difference(first)
    assert m == pytest.approx(4.0) and lo == pytest.approx(4.0) and hi == pytest.approx(4.0)
    assert first.cost[2] - first.cost[1] > 10  # the cost alone: t(0.975, 2) x sd(0, 3, -3) / sqrt 3 x 2


def test_integer_option_hits_the_exact_threshold():
    """An integer option (e.g. max_units): feasible iff x >= 7, cost rising with x; the
    refinement halves integer gaps down to 1, so the answer is 7 exactly."""
    calls = []
    units = Setting("autoscaler_options.max_units", ("max_units",), integer=True)
    res = find_setting(constructed(lambda x: x >= 7, lambda x: float(x), calls=calls), units, 1, 20,
                       grid_points=3, max_evaluations=30)
    assert 7 not in calls[:3]  # the grid (1, 10, 20) misses it: the refinement finds it
    assert res.best.value == 7
    assert all(float(c).is_integer() for c in calls) and len(calls) == len(set(calls))


def test_nothing_feasible_and_the_budget():
    res = find_setting(constructed(lambda x: False, lambda x: 1.0), RHO, 0.1, 0.9, grid_points=4)
    assert res.best is None and len(res.path) == 4 and "meets the targets" in res.text()
    res = find_setting(constructed(lambda x: x <= 0.55, lambda x: 10 - 8 * x), RHO, 0.1, 0.9,
                       grid_points=5, tol=1e-4, max_evaluations=7)
    assert res.stopped_by_budget and len(res.path) == 7 and "budget" in res.text()


# -- the option and the range ------------------------------------------------------------


def _cfg(model, **kw):
    data = {"steps": 60, "seed": 0, "model": str(model), "users": {"count": 10},
            "server": {"capacity": 2.0}}
    data.update(kw)
    return config_from_dict(data)


def test_resolve_setting(synthetic_model):
    cfg = _cfg(synthetic_model, autoscaler="capacity_rule")
    assert resolve_setting(cfg, "autoscaler_options.rho_target") == RHO
    assert resolve_setting(cfg, "autoscaler_options.monitor.period").integer
    assert not resolve_setting(cfg, "autoscaler_options.work_per_request").integer  # float | None
    with pytest.raises(ValueError, match="did you mean 'rho_target'"):
        resolve_setting(cfg, "autoscaler_options.rho_targt")
    with pytest.raises(ValueError, match="autoscaler_options.monitor.lagg: .*did you mean 'lag'"):
        resolve_setting(cfg, "autoscaler_options.monitor.lagg")
    with pytest.raises(ValueError, match="not a numeric option"):
        resolve_setting(cfg, "autoscaler_options.monitor")
    with pytest.raises(ValueError, match="name an option of the autoscaler"):
        resolve_setting(cfg, "server.capacity")
    with pytest.raises(ValueError, match="not a numeric option"):
        resolve_setting(_cfg(synthetic_model, autoscaler="reactive"), "autoscaler_options.metric")
    with pytest.raises(ValueError, match="'fixed' does not scale"):
        resolve_setting(_cfg(synthetic_model), "autoscaler_options.rho_target")


def test_parse_range():
    assert parse_range("0.3:0.9", RHO) == (0.3, 0.9) and parse_range("0.3,0.9", RHO) == (0.3, 0.9)
    units = Setting("autoscaler_options.max_units", ("max_units",), integer=True)
    assert parse_range("1.5:8.2", units) == (2, 8)
    for bad, needle in [("0.9:0.3", "empty range"), ("0.5:0.5", "empty range"), ("x:1", "LO:HI"),
                        ("0.5", "LO:HI"), ("nan:1", "finite")]:
        with pytest.raises(ValueError, match=needle):
            parse_range(bad, RHO)
    with pytest.raises(ValueError, match="fewer than two"):
        parse_range("3.2:3.8", units)


# -- the command -------------------------------------------------------------------------


def _write(tmp_path, model, **kw):
    data = {"steps": 60, "seed": 0, "model": str(model), "users": {"count": 10},
            "server": {"capacity": 2.0}, "autoscaler": "capacity_rule"}
    data.update(kw)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("args, named", [
    (["--setting", "autoscaler_options.rho_targt", "--range", "0.3:0.9"], "did you mean 'rho_target'"),
    (["--setting", "autoscaler_options.ewma_weight", "--range", "0.3:0.9"], "--setting"),
    (["--setting", "autoscaler_options.work_per_request", "--range", "0.3:0.2"], "--range '0.3:0.2': empty range"),
    (["--setting", "autoscaler_options.rho_target", "--range", "0.3:1.5"], "--range 0.3:1.5"),
    (["--setting", "autoscaler_options.rho_target"], "--range"),
    (["--range", "0.3:0.9"], "--setting"),
    (["--setting", "autoscaler_options.rho_target", "--range", "0.3:0.9", "--vector"], "--vector"),
    (["--setting", "autoscaler_options.rho_target", "--range", "0.3:0.9", "--grid-points", "1"], "--grid-points"),
    (["--setting", "autoscaler_options.rho_target", "--range", "0.3:0.9", "--set", "autoscaler=fixed"],
     "--setting: the config's autoscaler 'fixed' does not scale"),
    (["--setting", "autoscaler_options.metric", "--range", "0.3:0.9", "--set", "autoscaler=reactive"],
     "--setting: autoscaler_options.metric: not a numeric option"),
])
def test_bad_setting_input_exits_2_and_writes_nothing(synthetic_model, tmp_path, capsys, args, named):
    from gmm_volunteer.cli.commands import main

    path = _write(tmp_path, synthetic_model)
    assert main(["capacity", str(path), "--p99", "10s", "-o", str(tmp_path / "out" / "s"), *args]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_refuses_to_replace_a_foreign_file(synthetic_model, tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    path = _write(tmp_path, synthetic_model)
    foreign = tmp_path / "s.json"
    foreign.write_text('{"precious": 1}\n')
    assert main(["capacity", str(path), "--p99", "10s", "-o", str(tmp_path / "s"),
                 "--setting", "autoscaler_options.rho_target", "--range", "0.3:0.9"]) == 2
    assert "s.json" in capsys.readouterr().err and foreign.read_text() == '{"precious": 1}\n'


# -- a small real simulation -------------------------------------------------------------


def test_real_capacity_rule_with_a_demand_step(synthetic_model, tmp_path, capsys):
    """capacity_rule on 100 users for 600 steps, demand tripled over steps 200-400, all work
    on the server (centralized). A higher rho_target buys fewer units, so the cheap end
    misses the targets and the expensive end meets them; the answer must be feasible,
    cheaper evaluated values must miss, and its cost must be what the runs' recorded
    capacity says (recomputed here from the engine's records, not from the search)."""
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.experiments.capacity import evaluate_records, parse_targets
    from gmm_volunteer.run.engine import simulate

    path = _write(tmp_path, synthetic_model, steps=600, users={"count": 100}, scheduler="centralized",
                  requests={"think_time": {"dist": "exponential", "mean": 10.0}},
                  demand={"surges": [{"start": 200, "duration": 200, "factor": 3.0}]},
                  autoscaler_options={"period": 5, "provisioning_delay": 10, "cooldown": 30, "unit": 0.5,
                                      "monitor": {"period": 5, "lag": 0, "window": 30}})
    targets = ["15s", "heavy5=40s", "heavy10=40s"]
    out = tmp_path / "res" / "s"
    rc = main(["capacity", str(path), *sum((["--p99", t] for t in targets), []), "--quantile", "0.9",
               "--seeds", "3", "--setting", "autoscaler_options.rho_target", "--range", "0.2:1.0",
               "--grid-points", "5", "--tol", "0.05", "--max-evaluations", "9", "-o", str(out), "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    summary = json.loads(out.with_suffix(".json").read_text())
    with out.with_suffix(".csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == summary["evaluations"] == len(summary["path"])
    best = summary["best"]
    row = next(r for r in rows if r["best"] == "True")
    assert float(row["value"]) == best["value"] and row["feasible"] == "True"
    for k in ("light5", "light10", "heavy5", "heavy10"):
        assert float(row[f"{k}_lower_bound"]) >= 0.9, text
    cheaper = [r for r in rows if float(r["capacity_hours"]) < best["capacity_hours"]]
    assert cheaper and all(r["feasible"] == "False" for r in cheaper), text
    # The grid's ends: the setting took effect (rho 0.2 needs more capacity than rho 1).
    hours = {float(r["value"]): float(r["capacity_hours"]) for r in rows}
    assert hours[0.2] > hours[1.0]

    # Independent recomputation of the answer's cost and verdict from the engine.
    from gmm_volunteer.run.config import load_config

    cfgs = [load_config(path, [f"autoscaler_options.rho_target={best['value']}", f"seed={s}"]) for s in range(3)]
    records = [simulate(c, progress=False) for c in cfgs]
    cfg = cfgs[0]
    base_cpu = float(cfg.base_profile.cpu)
    per_seed = [float(np.asarray(r.dedicated_capacity, np.float64)[:, 2].sum()) / base_cpu / 3600 for r in records]
    assert best["capacity_hours"] == pytest.approx(np.mean(per_seed), rel=1e-12)
    ev = evaluate_records(records, best["value"], parse_targets(targets), list(records[0].request_type_names),
                          0.9, 0.95)
    assert ev.feasible
