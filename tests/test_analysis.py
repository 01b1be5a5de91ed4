"""Analysis API: quantiles, counts, consumption, completion rates, paired bootstrap
differences, against NumPy / SciPy on known data."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import stats

import gmm_volunteer.experiments.analysis as analysis  # registers ds.gmmv
from gmm_volunteer.experiments.combine import open_combined
from gmm_volunteer.io.results import build_dataset, open_result
from gmm_volunteer.io.runrecord import OUTCOMES
from gmm_volunteer.experiments.sweep import load_grid, run_sweep

from helpers import TYPE_NAMES, fake_simulate, make_record, write_tiny_grid


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("analysis")
    grid = load_grid(write_tiny_grid(
        tmp, grid={"users.count": [100, 1000], "scheduler": ["centralized", "uniform"]}, seeds=3))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    return grid, open_combined(grid.output)


def test_quantiles_per_type_match_numpy_on_every_run(sweep):
    grid, ds = sweep
    for r in grid.runs():
        store = open_result(r.path)
        lat = store["request_latency"].values  # (request_type, request), NaN padding
        done = store["request_outcome"].values == 0  # False on the padding
        for q in (0.5, 0.99, 0.999):
            got = ds.gmmv.latency_quantile(q).sel(r.coords)
            for k, name in enumerate(TYPE_NAMES):
                assert float(got.sel(request_type=name)) == pytest.approx(
                    np.quantile(lat[k][done[k]], q), rel=1e-12), (r.name, q, name)
            assert float(ds.gmmv.latency_quantile(q, all_types=True).sel(r.coords)) == pytest.approx(
                np.quantile(lat[done], q), rel=1e-12)
        counts = ds.gmmv.request_counts().sel(r.coords)
        for o, outcome in enumerate(OUTCOMES):
            assert int(counts.sel(outcome=outcome)) == int(np.sum(store["request_outcome"].values == o))


def test_p99_across_types_is_mean_min_max_of_the_per_type_values(sweep):
    _, ds = sweep
    per_type = ds.gmmv.latency_quantile(0.99)
    p = ds.gmmv.p99_across_types()
    np.testing.assert_allclose(p["mean"], per_type.values.mean(axis=-1))
    np.testing.assert_allclose(p["min"], per_type.values.min(axis=-1))
    np.testing.assert_allclose(p["max"], per_type.values.max(axis=-1))


def test_unstored_quantile_is_a_clear_error(sweep):
    _, ds = sweep
    with pytest.raises(KeyError, match="quantile 0.75 is not stored"):
        ds.gmmv.latency_quantile(0.75)


def test_functions_work_on_a_single_run_store():
    rec = make_record(seed=4, steps=200, n_requests=2000)
    ds = build_dataset(rec)
    lat = rec.request_latency[rec.request_outcome == 0]
    assert float(ds.gmmv.latency_quantile(0.95, all_types=True)) == pytest.approx(np.quantile(lat, 0.95))
    assert float(ds.gmmv.latency_quantile(0.75, request_type="heavy5")) == pytest.approx(
        np.quantile(rec.request_latency[(rec.request_outcome == 0) & (rec.request_type == 2)], 0.75))
    sc = ds.gmmv.server_consumption()
    np.testing.assert_allclose(sc["mean"].values, rec.server_consumption.astype(float).mean(axis=0))
    np.testing.assert_allclose(sc["sd"].values, rec.server_consumption.astype(float).std(axis=0))
    ev = rec.subtask_events.sum(axis=0)
    np.testing.assert_allclose(ds.gmmv.subtask_completion_rate().values, ev[:, 1] / ev[:, 0])
    np.testing.assert_array_equal(
        ds.gmmv.request_counts().values, np.bincount(rec.request_outcome, minlength=3))


def test_bootstrap_interval_equals_scipy_on_known_data():
    rng = np.random.default_rng(1)
    data = rng.normal(2.0, 1.0, size=(3, 12))
    mean, low, high = analysis.bootstrap_mean_ci(data, 0.9, n_resamples=4000, method="percentile", seed=5)
    ref = stats.bootstrap((data,), np.mean, axis=-1, vectorized=True, confidence_level=0.9,
                          n_resamples=4000, method="percentile", rng=np.random.default_rng(5))
    np.testing.assert_allclose(mean, data.mean(axis=-1))
    np.testing.assert_allclose(low, ref.confidence_interval.low)
    np.testing.assert_allclose(high, ref.confidence_interval.high)
    # BCa too, on the same data.
    _, lo2, hi2 = analysis.bootstrap_mean_ci(data, 0.95, n_resamples=3000, method="BCa", seed=2)
    ref2 = stats.bootstrap((data,), np.mean, axis=-1, vectorized=True, n_resamples=3000,
                           method="BCa", rng=np.random.default_rng(2))
    np.testing.assert_allclose(lo2, ref2.confidence_interval.low)
    np.testing.assert_allclose(hi2, ref2.confidence_interval.high)


def test_bootstrap_interval_coverage():
    # 200 independent samples of 10 normals: a 90% percentile interval covers the true
    # mean about 90% of the time (percentile intervals undercover slightly at n = 10,
    # ~86-88%). Binomial sd of the count at p = 0.88: sqrt(200 * .88 * .12) = 4.6; the
    # accepted band [150, 192] is more than 5 sd around 176, so the test fails only if
    # the interval is wrong, not by chance.
    rng = np.random.default_rng(3)
    data = rng.normal(0.0, 1.0, size=(200, 10))
    _, low, high = analysis.bootstrap_mean_ci(data, 0.9, n_resamples=2000, seed=4)
    covered = int(np.sum((low <= 0.0) & (0.0 <= high)))
    assert 150 <= covered <= 192


def test_bootstrap_over_fewer_than_three_seeds_warns_naming_them():
    import warnings

    from gmm_volunteer.experiments.intervals import FewSeedsWarning

    rng = np.random.default_rng(1)
    with pytest.warns(FewSeedsWarning, match="bootstrap interval over 2 seeds: .* range of the two values"):
        _, low, high = analysis.bootstrap_mean_ci(rng.normal(size=(4, 2)), n_resamples=500)
    with pytest.warns(FewSeedsWarning, match="over 1 seed: no interval"):
        _, low1, _ = analysis.bootstrap_mean_ci(rng.normal(size=(4, 1)), n_resamples=500)
    assert np.isnan(low1).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewSeedsWarning)
        analysis.bootstrap_mean_ci(rng.normal(size=(4, 3)), n_resamples=500)


def test_paired_difference_carries_the_unit():
    ds = xr.Dataset({"latency_quantile_all": (("scheduler", "seed", "quantile"), np.arange(8.0).reshape(2, 4, 1),
                                              {"units": "s"})},
                    coords={"scheduler": ["a", "b"], "seed": np.arange(4), "quantile": [0.99]})
    res = analysis.paired_difference(ds, "p99", "scheduler", "a", "b", n_resamples=200)
    assert res["mean"].attrs["units"] == "s" and res["low"].attrs["units"] == "s"


def test_paired_difference_uses_common_seeds():
    # Seed effects are large, the scheduler effect is a constant 2.0: pairing on seeds
    # removes the seed effect exactly, so the interval collapses onto 2.0.
    rng = np.random.default_rng(0)
    seed_effect = rng.normal(0, 50, size=6)
    values = np.stack([seed_effect + 10.0, seed_effect + 12.0])  # (scheduler, seed)
    ds = xr.Dataset({"x": (("scheduler", "seed"), values)},
                    coords={"scheduler": ["centralized", "uniform"], "seed": np.arange(6)})
    res = analysis.paired_difference(ds, "x", "scheduler", "uniform", "centralized", n_resamples=999)
    assert float(res["mean"]) == pytest.approx(2.0)
    assert float(res["low"]) == pytest.approx(2.0) and float(res["high"]) == pytest.approx(2.0)
    assert int(res["n_seeds"]) == 6

    # With noise, the result equals SciPy's bootstrap of the per-seed differences.
    noisy = values + rng.normal(0, 1, size=values.shape)
    ds["x"] = (("scheduler", "seed"), noisy)
    res = ds.gmmv.paired_difference("x", "scheduler", "uniform", "centralized", n_resamples=999, seed=7)
    d = noisy[1] - noisy[0]
    ref = stats.bootstrap((d,), np.mean, vectorized=True, n_resamples=999, method="percentile",
                          rng=np.random.default_rng(7))
    assert float(res["mean"]) == pytest.approx(d.mean())
    assert float(res["low"]) == pytest.approx(ref.confidence_interval.low)
    assert float(res["high"]) == pytest.approx(ref.confidence_interval.high)


def test_paired_difference_on_a_sweep_has_the_grid_dims(sweep):
    _, ds = sweep
    res = ds.gmmv.paired_difference("p99", "scheduler", "uniform", "centralized", n_resamples=500)
    assert set(res["mean"].dims) == {"users"}
    p99 = ds.gmmv.latency_quantile(0.99, all_types=True)
    expected = (p99.sel(scheduler="uniform") - p99.sel(scheduler="centralized")).mean("seed")
    np.testing.assert_allclose(res["mean"].values, expected.values)
    assert np.all(res["low"].values <= res["mean"].values + 1e-12)
    assert np.all(res["mean"].values <= res["high"].values + 1e-12)
    with pytest.raises(KeyError, match="scheduler='affinity' is not in the dataset"):
        ds.gmmv.paired_difference("p99", "scheduler", "affinity", "centralized")
    with pytest.raises(KeyError, match="unknown quantity"):
        ds.gmmv.paired_difference("p42", "scheduler", "uniform", "centralized")
