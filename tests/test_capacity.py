"""Capacity search (paper eq. 3) on a fake simulator whose answer is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmm_volunteer.experiments.capacity import (
    evaluate_records,
    find_capacity,
    parse_duration,
    parse_targets,
)
from gmm_volunteer.run.config import load_config
from gmm_volunteer.io.runrecord import RunRecord

from helpers import TYPE_NAMES, write_tiny_grid

N_REQUESTS = 200_000
# Type k's latency is floor(X), X ~ Exponential(mean = SCALE[k] / capacity), so
# P(latency <= tau) = P(X < tau + 1) = 1 - exp(-(tau + 1) * capacity / SCALE[k]) and the
# smallest capacity with P >= 0.99 is  SCALE[k] * ln(100) / (tau + 1).
SCALE = {"light5": 100.0, "light10": 100.0, "heavy5": 150.0, "heavy10": 300.0}


def exact_capacity(tau: float, scale: float, q: float = 0.99) -> float:
    return scale * math.log(1.0 / (1.0 - q)) / (tau + 1.0)


def fraction_met(tau: float, scale: float, capacity: float) -> float:
    return 1.0 - math.exp(-(tau + 1.0) * capacity / scale)


def exponential_simulate(cfg, progress=False, calls=None, types=("light5",)):
    cap = float(cfg.server.capacity)
    rng = np.random.default_rng(int(cfg.seed))
    if calls is not None:
        calls.append((cap, int(cfg.seed)))
    per = N_REQUESTS // len(types)
    rtype = np.repeat([TYPE_NAMES.index(t) for t in types], per).astype(np.int8)
    scale = np.array([SCALE[TYPE_NAMES[k]] for k in rtype])
    latency = np.floor(rng.exponential(scale / cap)).astype(np.int64)
    n = rtype.size
    steps = 4
    z5 = np.zeros((steps, 5), np.float32)
    return RunRecord(
        request_user=np.ones(n, np.int32), request_type=rtype,
        request_start=np.zeros(n, np.int64), request_end=latency,
        request_outcome=np.zeros(n, np.int8),
        online_users=np.zeros(steps, np.int32), active_requests=np.zeros(steps, np.int32),
        server_allocation=z5, server_consumption=z5, user_consumption=z5,
        subtask_events=np.zeros((steps, 2, 5), np.int32),
        completed_work=np.zeros((steps, 2), np.float32),
        request_type_names=TYPE_NAMES, attrs={},
    )


@pytest.fixture
def cfg(tmp_path):
    grid = write_tiny_grid(tmp_path)  # writes base.yaml and a bundle directory
    return load_config(grid.parent / "base.yaml")


def _tolerance(tau, scale, capacity, seeds):
    # Noise of the per-seed fraction: sd = sqrt(p (1 - p) / N) with N requests per type
    # and seed. The t lower bound sits t_{0.95, n-1} * sd / sqrt(n) below the mean, and
    # a chance 'meets' needs a noise excursion of that size; five sds in the fraction,
    # turned into capacity through dP/dm = (tau + 1) / scale * exp(-(tau + 1) m / scale),
    # bounds both effects with a huge margin for chance.
    n_per_type = N_REQUESTS
    p = 0.99
    sd = math.sqrt(p * (1 - p) / n_per_type)
    slope = (tau + 1.0) / scale * (1.0 - p)
    return 5 * sd / slope


def test_finds_the_known_capacity(cfg):
    tau, seeds = 10.0, [0, 1, 2, 3]
    truth = exact_capacity(tau, SCALE["light5"])  # 41.87
    calls = []
    res = find_capacity(
        cfg, {"*": tau}, seeds=seeds, lo=1.0, hi=100.0, rel_tol=0.02, log=None,
        run_fn=lambda c, progress=False: exponential_simulate(c, progress, calls),
    )
    tol = _tolerance(tau, SCALE["light5"], truth, seeds)
    assert truth - tol <= res.capacity <= truth * 1.02 + tol, (res.capacity, truth, tol)
    # The search path brackets the answer: the largest failing candidate is below it.
    fails = [e.capacity for e in res.path if not e.feasible]
    assert fails and max(fails) < res.capacity and res.capacity / max(fails) <= 1.02 + 1e-12
    # Common random numbers: every candidate ran exactly the same seeds.
    by_cap = {}
    for cap, seed in calls:
        by_cap.setdefault(cap, []).append(seed)
    assert all(s == seeds for s in by_cap.values())
    assert len(by_cap) == len(res.path)
    assert "smallest server capacity meeting the targets" in res.text()


def test_per_type_targets_the_hardest_type_decides(cfg):
    types = ("light5", "heavy10")
    targets = {"light5": 10.0, "heavy10": 20.0}
    truth = max(exact_capacity(targets[t], SCALE[t]) for t in types)  # heavy10: 65.8
    res = find_capacity(
        cfg, targets, seeds=[0, 1, 2], rel_tol=0.02, log=None,
        run_fn=lambda c, progress=False: exponential_simulate(c, progress, types=types),
    )
    tol = _tolerance(20.0, SCALE["heavy10"], truth, 3) * math.sqrt(2)  # half the requests each
    assert truth - tol <= res.capacity <= truth * 1.02 + tol
    last = res.path[-1].rows
    assert set(last) == set(types)


def test_range_ends(cfg):
    run = lambda c, progress=False: exponential_simulate(c, progress)  # noqa: E731
    res = find_capacity(cfg, {"*": 10.0}, seeds=[0, 1], lo=1, hi=20, log=None, run_fn=run)
    assert res.capacity is None and len(res.path) == 1 and not res.path[0].feasible
    assert "not met" in res.text()
    res = find_capacity(cfg, {"*": 10.0}, seeds=[0, 1], lo=60, hi=100, log=None, run_fn=run)
    assert res.capacity == 60 and len(res.path) == 2


def test_lower_bound_is_the_student_t_bound_over_seeds():
    recs = []

    class C:  # the minimum of a config the fake simulator reads
        def __init__(self, seed):
            self.seed = seed
            self.server = type("S", (), {"capacity": 40.0})()

    for s in range(4):
        recs.append(exponential_simulate(C(s)))
    ev = evaluate_records(recs, 40.0, {"light5": 10.0}, TYPE_NAMES, 0.99, 0.95)
    fr = np.array([np.mean(r.request_latency <= 10) for r in recs])
    expected = fr.mean() - 2.3533634348018264 * fr.std(ddof=1) / 2.0  # t_{0.95, 3}
    tau, frac, lb, qv, n = ev.rows["light5"]
    assert lb == pytest.approx(expected, rel=1e-12)
    assert frac == pytest.approx(fr.mean()) and n == 4 * N_REQUESTS
    assert ev.feasible == (expected >= 0.99)
    assert abs(frac - fraction_met(10.0, 100.0, 40.0)) < 5 * math.sqrt(0.01 / (4 * N_REQUESTS))


def test_target_parsing():
    assert parse_duration("10s") == 10 and parse_duration("2min") == 120 and parse_duration("1h") == 3600
    assert parse_targets(["10s"]) == {"*": 10.0}
    assert parse_targets(["light5=10s", "heavy10=0.5m"]) == {"light5": 10.0, "heavy10": 30.0}
    for bad in (["ten"], ["x=10parsecs"], ["=10s"], ["10s", "20s"], []):
        with pytest.raises(ValueError):
            parse_targets(bad)


def test_unknown_request_type_is_named(cfg):
    with pytest.raises(ValueError, match="unknown request type 'huge'"):
        find_capacity(cfg, {"huge": 10.0}, seeds=[0], log=None,
                      run_fn=lambda c, progress=False: exponential_simulate(c))


def test_mistyped_request_type_gets_a_suggestion(cfg):
    with pytest.raises(ValueError, match="unknown request type 'ligth5' in targets; did you mean 'light5'"):
        find_capacity(cfg, {"ligth5": 10.0}, seeds=[0], log=None,
                      run_fn=lambda c, progress=False: exponential_simulate(c))


def test_fewer_than_three_seeds_warn(cfg):
    import warnings

    from gmm_volunteer.experiments.intervals import FewSeedsWarning

    run = lambda c, progress=False: exponential_simulate(c)  # noqa: E731
    with pytest.warns(FewSeedsWarning, match="Student-t lower bound over 2 seeds"):
        find_capacity(cfg, {"light5": 10.0}, seeds=[0, 1], lo=20, hi=80, rel_tol=0.5, log=None, run_fn=run)
    with pytest.warns(FewSeedsWarning, match="lower bound over 1 seed: it is a Clopper-Pearson bound"):
        find_capacity(cfg, {"light5": 10.0}, seeds=[0], lo=20, hi=80, rel_tol=0.5, log=None, run_fn=run)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewSeedsWarning)
        find_capacity(cfg, {"light5": 10.0}, seeds=[0, 1, 2], lo=20, hi=80, rel_tol=0.5, log=None, run_fn=run)


def test_capacity_cli_bad_target_exits_2(cfg, tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    assert main(["capacity", str(tmp_path / "base.yaml"), "--p99", "soon"]) == 2
    assert "--p99" in capsys.readouterr().err


def test_miss_only_because_of_the_bound_is_named():
    from gmm_volunteer.experiments.capacity import CapacityResult, Evaluation

    bound = Evaluation(5.0, False, {"light5": (10.0, 0.995, 0.985, 9.0, 3000)})
    text = bound.line(0.99, 0.95)
    assert "MISS (bound)" in text and "--seeds" in text
    real = Evaluation(5.0, False, {"light5": (10.0, 0.98, 0.97, 12.0, 3000)})
    assert "MISS " in real.line(0.99, 0.95) and "(bound)" not in real.line(0.99, 0.95)
    ok = Evaluation(9.0, True, {"light5": (10.0, 0.999, 0.995, 5.0, 3000)})
    assert "ok" in ok.line(0.99, 0.95) and "MISS" not in ok.line(0.99, 0.95)
    mixed = Evaluation(5.0, False, {"light5": (10.0, 0.995, 0.985, 9.0, 3000),
                                    "heavy10": (30.0, 0.98, 0.97, 40.0, 3000)})
    assert bound.bound_only(0.99) and not mixed.bound_only(0.99) and not ok.bound_only(0.99)
    assert "add seeds" in CapacityResult(None, [bound], 0.99, 0.95, {}).text().splitlines()[-1]
    assert "add seeds" not in CapacityResult(None, [mixed], 0.99, 0.95, {}).text().splitlines()[-1]


def test_a_search_stopped_by_its_budget_says_so_with_its_interval(cfg):
    run = lambda c, progress=False: exponential_simulate(c, progress)  # noqa: E731
    short = find_capacity(cfg, {"*": 10.0}, seeds=[0, 1, 2], lo=1.0, hi=100.0, rel_tol=0.05,
                          max_evaluations=6, log=None, run_fn=run)
    assert len(short.path) == 6 and short.budget_stopped
    misses = max(e.capacity for e in short.path if not e.feasible)
    assert short.low == misses and short.capacity / short.low > 1.05
    last = short.text().splitlines()[-1]
    assert f"in [{short.low:.3f}, {short.capacity:.3f}]x" in last
    assert "stopped at its budget of 6 evaluations" in last and "5%" in last
    done = find_capacity(cfg, {"*": 10.0}, seeds=[0, 1, 2], lo=1.0, hi=100.0, rel_tol=0.05,
                         max_evaluations=20, log=None, run_fn=run)
    assert not done.budget_stopped and done.capacity / done.low <= 1.05
    assert "budget" not in done.text() and "within 5%" in done.text().splitlines()[-1]


def test_planned_evaluations_counts_the_ends_and_the_halvings():
    from gmm_volunteer.experiments.capacity import planned_evaluations

    # [1, 100] to 5 %: log(100) / log(1.05) = 94.4 -> 7 halvings, plus both ends
    assert planned_evaluations(1.0, 100.0, 0.05, 20) == 9
    assert planned_evaluations(1.0, 100.0, 0.05, 6) == 6
    assert planned_evaluations(1.0, 1.01, 0.05, 20) == 2


def test_a_lower_bound_of_a_probability_stays_in_0_1():
    from gmm_volunteer.experiments.capacity import _lower_bound

    spread = np.array([0.0, 0.0, 1.0])  # the t-bound of far-apart seeds is far below 0
    assert _lower_bound(spread, 1, 3, 0.95) == 0.0
    assert _lower_bound(np.array([1.0, 1.0, 1.0]), 3, 3, 0.95) == 1.0
