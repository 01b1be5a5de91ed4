"""Policy search (gmm_volunteer/optimisation/search.py): the optimisers on constructions
with a known optimum, the eq. 2 objective against a run's records, common random numbers,
the paired t-interval, and `gmmv tune` end to end on a tiny run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from gmm_volunteer.cli.commands import main
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.optimisation.search import (
    METHODS,
    minimise,
    paired_interval,
    policy_config,
    run_metrics,
    tune,
)

TARGET = np.array([3.0, -7.5])
BOUND = 10.0


def tiny(model, **extra) -> dict:
    return {
        "steps": 300, "seed": 1, "model": str(model), "scheduler": "weighted",
        "users": {"count": 30, "capacity": 0.5}, "server": {"capacity": 0.3},
        "requests": {"think_time": {"dist": "exponential", "mean": 8.0},
                     "patience": {"dist": "pareto", "scale": 40.0, "shape": 1.5}},
        **extra,
    }


@pytest.mark.parametrize("method", METHODS)
def test_minimise_finds_the_known_optimum(method):
    """A quadratic with its minimum at TARGET, plus a per-seed offset that common random
    numbers share across candidates (it moves the objective, not the argmin)."""
    if method != "random":
        pytest.importorskip(method)  # cma / optuna: the [optimise] extra
    offsets = np.random.default_rng(0).normal(size=4)

    def objective(x):
        return float(np.mean([np.sum((x - TARGET) ** 2) + c for c in offsets]))

    trials = 200 if method == "random" else 80
    found = minimise(objective, 2, BOUND, trials, method, seed=0)
    assert len(found.history) == trials
    assert found.value == min(v for _, v in found.history)
    # Exhaustive evaluation of a 5 x 5 grid of the box (spacing 5) gets at best to the
    # grid point nearest TARGET; the search must end in TARGET's own grid cell, within
    # half a spacing. For uniform random search the chance of no draw within that
    # radius is (1 - pi 2.5^2 / 20^2)^200 = 4e-5; CMA-ES and TPE converge far closer.
    grid = np.linspace(-BOUND, BOUND, 5)
    grid_best = min(objective(np.array([a, b])) for a in grid for b in grid)
    assert found.value < grid_best
    assert np.linalg.norm(found.x - TARGET) < 2.5


def test_minimise_refuses_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        minimise(lambda x: 0.0, 1, 1.0, 3, "nelder")
    with pytest.raises(ValueError, match="trials"):
        minimise(lambda x: 0.0, 1, 1.0, 0, "random")


def test_eq2_cost_from_the_records(synthetic_model):
    """eq2_cost against the latency increments recomputed from a run's record: a request
    started in s and last active in e adds one in each step s+1..e (D3); one still
    active at the end adds one in each step after its start."""
    cfg = policy_config(config_from_dict(tiny(synthetic_model)), "weighted", {"server_weight": 2.0}, seed=4)
    warmup = 50
    got = run_metrics(cfg, warmup)
    sim = Simulation(cfg)
    rec = sim.run(progress=False)
    T = rec.steps
    s, e = rec.request_start, rec.request_end
    running = sim.arrays.rq_start[sim.arrays.rq_list[: int(sim.arrays.n_rq[0])]]
    delta = np.array([np.sum((s < t) & (t <= e)) + np.sum(running < t) for t in range(T)])
    assert delta[warmup:].sum() > 0
    assert got["eq2_cost"] == delta[warmup:].sum() / (T - warmup)
    lat = rec.request_latency[(rec.request_outcome == 0) & (e >= warmup)]
    assert got["completed"] == lat.size > 0
    assert got["mean_latency"] == pytest.approx(lat.mean())
    assert got["p99_latency"] == pytest.approx(np.quantile(lat, 0.99))


def test_tune_uses_common_random_numbers(synthetic_model):
    """Every candidate runs on the same training seeds: the value the search records
    for its best point is the mean eq2 cost of independent runs of those weights on
    those seeds."""
    cfg = config_from_dict(tiny(synthetic_model))
    seeds = [0, 1]
    tuned = tune(cfg, seeds, 4, method="random", names=("server_weight", "wait_weight"), warmup=50)
    again = np.mean([run_metrics(policy_config(cfg, "weighted", tuned.weights, seed=s), 50)["eq2_cost"]
                     for s in seeds])
    assert tuned.train_value == again
    assert set(tuned.weights) == {"server_weight", "wait_weight"}
    assert tuned.train_value == min(v for _, v in tuned.search.history)


def test_paired_interval_is_the_t_interval():
    rng = np.random.default_rng(1)
    a, b = rng.normal(5, 1, 12), rng.normal(4, 1, 12)
    mean, lo, hi, n = paired_interval(a, b)
    d = a - b
    half = stats.t.ppf(0.975, 11) * d.std(ddof=1) / math.sqrt(12)
    assert n == 12 and mean == pytest.approx(d.mean())
    assert (lo, hi) == pytest.approx((d.mean() - half, d.mean() + half))
    # scipy's own interval for the mean of the differences
    assert (lo, hi) == pytest.approx(stats.ttest_1samp(d, 0).confidence_interval(0.95))
    # a seed where a metric is undefined (no completed request: NaN) is left out
    a[0] = np.nan
    assert paired_interval(a, b)[3] == 11


def test_gmmv_tune_end_to_end(synthetic_model, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps(tiny(synthetic_model)))
    out = tmp_path / "tune.json"
    code = main(["tune", str(cfg), "--method", "random", "--trials", "3", "--train-seeds", "0-1",
                 "--test-seeds", "5,6,7", "--warmup", "50", "--baselines", "centralized,uniform",
                 "--weights", "server_weight", "-o", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    assert "trial 3/3" in captured.err
    assert "paired differences" in captured.out and "centralized:" in captured.out
    data = json.loads(out.read_text())
    assert data["test_seeds"] == [5, 6, 7] and len(data["history"]) == 3
    assert set(data["runs"]) == {"weighted (tuned)", "centralized", "uniform"}
    # an existing output is not replaced without --force
    assert main(["tune", str(cfg), "--method", "random", "--trials", "1", "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
