"""The ``ds.gmmv`` accessor: there once gmm_volunteer is imported, in either order with
xarray, without importing xarray eagerly; and on `open_runs` datasets, per run."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import xarray as xr

from engine_support import bundle_dir, make_config


@pytest.mark.parametrize("code", [
    "import gmm_volunteer, sys; assert 'xarray' not in sys.modules; import xarray as xr",
    "import xarray as xr; import gmm_volunteer",
])
def test_the_accessor_is_there_after_import_gmm_volunteer(code):
    check = code + "; ds = xr.Dataset(); print(type(ds.gmmv).__name__)"
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "GmmvAccessor"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from gmm_volunteer.io.results import write_result
    from gmm_volunteer.run.engine import simulate

    root = tmp_path_factory.mktemp("runs")
    bundle = bundle_dir(root)
    return [write_result(simulate(make_config(bundle, users=u, steps=n, seed=i), progress=False),
                         root / f"r{i}.zarr")
            for i, (u, n) in enumerate([(60, 300), (80, 250)])]  # different requests and lengths


def test_metrics_of_open_runs_are_each_runs_own(two_runs):
    from gmm_volunteer.experiments.runs import open_runs
    from gmm_volunteer.experiments.summary import run_metrics
    from gmm_volunteer.io.results import open_result

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs = open_runs(two_runs)
        got = runs.gmmv.metrics()
    assert list(got["users"].values) == [60, 80]
    for i, path in enumerate(two_runs):
        one = run_metrics(open_result(path))
        for name in ("requests", "latency_quantile", "server_consumption_mean"):
            np.testing.assert_array_equal(got[name].isel(run=i).values, one[name].values)


def test_p99_per_request_type_on_a_plain_open_zarr(two_runs):
    from gmm_volunteer.experiments.summary import run_metrics
    from gmm_volunteer.io.results import open_result

    ds = xr.open_zarr(two_runs[0])
    p99 = ds.request_latency.where(ds.request_outcome == 0).quantile(0.99, "request")
    expected = run_metrics(open_result(two_runs[0]))["latency_quantile"].sel(quantile=0.99)
    np.testing.assert_allclose(p99.values, expected.values, rtol=1e-12)
