"""The seeds' own statistics (gmm_volunteer/experiments/seed_metrics.py; issue 22 item 5)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gmm_volunteer.experiments import seed_metrics as sm


def test_requests_pair_on_user_and_ordinal_when_completed_in_both():
    """The n-th request of a user is the same request in both runs, whatever its start."""
    a = {"user": np.array([1, 1, 2, 3, 2]), "start": np.array([5, 9, 5, 7, 8]),
         "completed": np.array([True, True, True, False, False])}
    b = {"user": np.array([3, 2, 1, 1, 2]), "start": np.array([8, 6, 11, 4, 9]),
         "completed": np.array([True, True, True, True, True])}
    ia, ib = sm.pair_requests(a, b)
    pairs = sorted(zip(a["user"][ia], a["start"][ia], b["user"][ib], b["start"][ib]))
    # user 1: a's (5, 9) are b's (4, 11); user 2: a's first (5) is b's first (6), a's second
    # did not complete; user 3's only request did not complete in a
    assert pairs == [(1, 5, 1, 4), (1, 9, 1, 11), (2, 5, 2, 6)]


def test_bca_interval_matches_the_normal_theory_width():
    """n = 2,000 differences N(-1, 2^2): the 95 % interval's half-width should be about
    1.96 x 2 / sqrt(n) = 0.0877. The bootstrap estimates the sd with relative error about
    1 / sqrt(2 n) = 1.6 % and 4,000 resamples add about 2 % of Monte Carlo error on a
    2.5 % quantile; tolerance 10 %, several times both."""
    rng = np.random.default_rng(7)
    n = 2000
    d = rng.normal(-1.0, 2.0, n)
    r = sm.paired_difference(d, n_resamples=4000, seed=1)
    half = (r["ci_high"] - r["ci_low"]) / 2
    assert half == pytest.approx(1.96 * d.std(ddof=1) / math.sqrt(n), rel=0.10)
    assert r["ci_low"] < r["mean"] < r["ci_high"] and r["mean"] == pytest.approx(d.mean())
    assert r["t"] < 0 and r["p_one_sided"] < 1e-6


def test_stratifying_by_phase_removes_the_between_phase_spread():
    """Phases with means -3 and +3 (sd 1, 500 each): unstratified, the bootstrap sees
    sd ~ sqrt(1 + 9) = 3.2; stratified, only the within-phase sd 1 (sizes fixed), so the
    interval is about 3.2 times narrower; asserted at 2 times."""
    rng = np.random.default_rng(3)
    d = np.concatenate([rng.normal(-3, 1, 500), rng.normal(3, 1, 500)])
    phase = np.repeat([0, 1], 500)
    flat = sm.paired_difference(d, n_resamples=2000, seed=2)
    strat = sm.paired_difference(d, phase, n_resamples=2000, seed=2)
    assert (flat["ci_high"] - flat["ci_low"]) > 2 * (strat["ci_high"] - strat["ci_low"])
    assert strat["phases"] == 2 and strat["mean"] == pytest.approx(d.mean())


def test_phase_of_start():
    assert list(sm.phase_of(np.array([0, 99, 100, 250, 400]), [100, 250])) == [0, 0, 1, 2, 2]


def test_tail_by_level_and_large_tasks():
    out = sm.tail_by_level({1: [np.arange(1, 101.0), np.arange(1, 101.0) * 2]}, q=0.5)
    assert out[1]["p"] == pytest.approx((50.5 + 101.0) / 2)
    assert out[1]["p_sd"] == pytest.approx(np.std([50.5, 101.0], ddof=1))
    assert out[1]["max"] == 200.0
    assert list(sm.large_types(np.array([1.0, 5.0, 2.0, 9.0]))) == [1, 3]
    s = sm.queue_aware_summary(np.array([1.0, 2.0, 10.0, 20.0]), np.array([0, 0, 1, 1]), np.array([1]))
    assert s["mean"] == pytest.approx(8.25) and s["n_large"] == 2
    assert s["p95_large"] == pytest.approx(np.quantile([10.0, 20.0], 0.95))


def test_sweep_tables_from_the_run_stores(tmp_path):
    """The seed-statistics and ASRB-paired tables of a real (tiny) sweep agree with the
    statistics computed here directly from the run stores' request records."""
    import yaml

    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.experiments.combine import open_combined
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.io.results import open_result
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    root = Path(__file__).parent.parent
    write_bundle(synthetic_bundle(), tmp_path / "bundle")
    spec = {"base": str(root / "configs/quickstart.yaml"),
            "grid": {"scheduler": ["asrb", "qedgeproxy"]}, "seeds": 2,
            "set": {"steps": 400, "users.count": 60, "model": str(tmp_path / "bundle")},
            "output": str(tmp_path / "out")}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(tmp_path / "grid.yaml"), "--serial", "--quiet"]) == 0
    ds = open_combined(tmp_path / "out")
    ds.attrs["results_dir"] = str(tmp_path / "out")

    def records(sched, seed):
        name = str(ds["run_name"].sel(scheduler=sched, seed=seed).values)
        return sm.request_arrays(open_result(next((tmp_path / "out" / "runs").glob(f"{name}*"))))

    stats = sm.statistics_table(ds)
    lat = np.concatenate([r["latency"][r["completed"]] for r in (records("asrb", 0), records("asrb", 1))])
    assert lat.size > 0
    row = stats.loc["asrb"]
    assert row["median (s)"] == pytest.approx(np.median(lat))
    assert row["max (s)"] == pytest.approx(lat.max())
    assert row["seeds"] == 2

    paired = sm.paired_table(ds, n_resamples=2000)
    got = paired.loc["asrb - qedgeproxy"]
    diffs = []
    for seed in (0, 1):
        a, b = records("asrb", seed), records("qedgeproxy", seed)
        def by_ordinal(r):
            seen, out = {}, {}
            for i in sorted(range(r["user"].size), key=lambda i: (r["user"][i], r["start"][i])):
                n = seen[r["user"][i]] = seen.get(r["user"][i], -1) + 1
                if r["completed"][i]:
                    out[(r["user"][i], n)] = r["latency"][i]
            return out

        ka, kb = by_ordinal(a), by_ordinal(b)
        diffs += [ka[k] - kb[k] for k in ka.keys() & kb.keys()]
    assert got["paired requests"] == len(diffs)
    assert got["mean difference (s)"] == pytest.approx(np.mean(diffs))
    assert got["BCa 95% low"] <= got["mean difference (s)"] <= got["BCa 95% high"]


def test_phase_bounds_are_the_events_starts_and_ends_inside_the_run():
    """Seed 000's six phases from the scripted events of routing_perturbed_20k.yaml: a
    join ending where the departures start gives one cut, not two."""
    import yaml

    cfg = {"steps": 20000, "events": [
        {"kind": "join", "at_s": 4000, "duration_s": 3000},
        {"kind": "depart", "at_s": 7000, "duration_s": 600},
        {"kind": "overload", "at_s": 13000, "duration_s": 1000},
        {"kind": "overload", "at_s": 13000, "duration_s": 1000},
        {"kind": "overload", "at_s": 19000}]}  # no end: lasts to the run's end
    cuts = sm._phase_bounds(yaml.safe_dump(cfg))
    assert cuts == [4000, 7000, 7600, 13000, 14000, 19000]
    assert list(sm.phase_of(np.array([0, 3999, 4000, 7599, 7600, 19999]), cuts)) == [0, 0, 1, 2, 3, 6]
    assert sm._phase_bounds(yaml.safe_dump({"steps": 10})) == []


def test_surge_table_from_the_run_stores(tmp_path):
    """Seed 002's burst table (issue 51) of a tiny sweep with a scripted surge agrees with
    the spans' means and server shares computed here from the run store."""
    import yaml

    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.experiments.combine import open_combined
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.io.results import open_result
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    root = Path(__file__).parent.parent
    write_bundle(synthetic_bundle(), tmp_path / "bundle")
    spec = {"base": str(root / "configs/quickstart.yaml"), "grid": {"scheduler": ["queue_aware"]}, "seeds": 1,
            "set": {"steps": 300, "users.count": 60, "model": str(tmp_path / "bundle"),
                    "demand.surges": [{"start": 100, "duration": 100, "factor": 4.0}]},
            "output": str(tmp_path / "out")}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(tmp_path / "grid.yaml"), "--serial", "--quiet"]) == 0
    ds = open_combined(tmp_path / "out")
    ds.attrs["results_dir"] = str(tmp_path / "out")
    store = open_result(next((tmp_path / "out" / "runs").glob("*.zarr")))
    r = sm.request_arrays(store)
    start, lat = r["start"][r["completed"]], r["latency"][r["completed"]]
    t = store["decision"].sel(decision_field="step").values
    node = store["decision"].sel(decision_field="node").values

    row = sm.surge_table(ds, edge_s=20).loc["queue_aware"]
    for name, (lo, hi) in {"before": (0, 100), "surge": (100, 200), "surge first 20 s": (100, 120),
                           "surge last 20 s": (180, 200), "after": (200, 300)}.items():
        x = lat[(start >= lo) & (start < hi)]
        assert x.size > 0
        assert row[f"mean {name} (s)"] == pytest.approx(x.mean())
    m = (t >= 100) & (t < 200)
    assert row["to server surge"] == pytest.approx((node[m] == 0).mean())
    # the surge raises the request rate (think times / 4): more requests start per step in it
    assert ((start >= 100) & (start < 200)).sum() > ((start >= 0) & (start < 100)).sum()
