"""Conventions of the stored datasets (docs/formats.md, "Conventions"): long names and
units everywhere, request records per request type, netCDF-safe attributes, consolidated
metadata, many runs opened together, and stores of format 1 (0.3.0) still readable."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from gmm_volunteer.io import conventions
from gmm_volunteer.io.results import build_dataset, is_complete, open_result, write_result
from gmm_volunteer.experiments.runs import open_runs
from gmm_volunteer.experiments.summary import run_metrics, summarize

from engine_support import bundle_dir, make_config
from helpers import TYPE_NAMES, make_record

# Written by gmm-volunteer 0.3.0's write_result from helpers.make_record(seed=5, steps=60,
# n_requests=40) plus a constant dedicated_capacity and two scaling actions.
FORMAT1 = Path(__file__).parent / "data" / "store_format1.zarr"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """Three small simulated runs (different schedulers, users, lengths), stored."""
    from gmm_volunteer.run.engine import simulate

    root = tmp_path_factory.mktemp("conv")
    bundle = bundle_dir(root)
    paths = []
    for i, (users, scheduler, steps) in enumerate([(60, "uniform", 300), (80, "centralized", 300),
                                                   (60, "affinity", 250)]):
        cfg = make_config(bundle, users=users, steps=steps, scheduler=scheduler, seed=i)
        paths.append(write_result(simulate(cfg, progress=False), root / f"r{i}.zarr"))
    return paths


def check_conventions(ds: xr.Dataset) -> None:
    """What docs/formats.md promises of every stored dataset."""
    for name, var in ds.variables.items():
        assert "long_name" in var.attrs, name
        for key, value in var.attrs.items():
            assert not isinstance(value, (bool, dict, type(None))), (name, key, value)
    for name, var in ds.data_vars.items():
        if var.dtype.kind not in "iuf" or "flag_values" in var.attrs:
            continue  # text, booleans and codes have no unit
        if "units" in var.attrs:
            assert "," not in var.attrs["units"], (name, var.attrs["units"])
            continue
        coord = var.attrs.get("units_coordinate")
        assert coord in ds.coords, (name, var.attrs)
        assert set(ds[coord].dims) <= set(var.dims), (name, coord)
    for key, value in ds.attrs.items():
        assert not isinstance(value, (bool, dict, type(None))), (key, value)


def test_a_real_run_follows_the_conventions_and_writes_to_netcdf(real_runs, tmp_path):
    pytest.importorskip("netCDF4")
    ds = open_result(real_runs[0])
    check_conventions(ds)
    assert ds.attrs["store_format"] == conventions.STORE_FORMAT
    ds.to_netcdf(tmp_path / "run.nc")
    back = xr.open_dataset(tmp_path / "run.nc")
    np.testing.assert_array_equal(back["request_latency"].values, ds["request_latency"].values)  # NaN padding too
    assert back["request_latency"].encoding["dtype"] == np.int64
    np.testing.assert_array_equal(back["server_consumption"].values, ds["server_consumption"].values)


def test_the_dataset_before_writing_writes_to_netcdf_too(tmp_path):
    pytest.importorskip("netCDF4")
    ds = build_dataset(make_record(seed=2, steps=50, n_requests=30))
    check_conventions(ds)
    ds.to_netcdf(tmp_path / "built.nc")


def test_units_per_resource_come_from_a_coordinate(real_runs):
    ds = open_result(real_runs[0])
    var = ds["server_consumption"]
    assert "units" not in var.attrs and var.attrs["units_coordinate"] == "resource_unit"
    cpu = var.sel(resource="cpu")
    assert str(cpu["resource_unit"].values) == "%"  # the unit stays with a selection
    assert dict(zip(ds["resource"].values, ds["resource_unit"].values)) == {
        "band_in": "Mbit/s", "band_out": "Mbit/s", "cpu": "%", "memory": "MB", "storage": "MB"}


def _per_type(rec, values):
    """`values` (one per request of `rec`) split by request type, in record order."""
    return [np.asarray(values)[rec.request_type == k] for k in range(len(TYPE_NAMES))]


def test_requests_are_laid_out_per_request_type(tmp_path):
    """Store format 4: a row per request type, its requests in record order, then NaN
    padding (stored as _FillValue -1 in the records' integer types)."""
    rec = make_record(seed=3, steps=80, n_requests=120)
    built = build_dataset(rec)
    path = write_result(rec, tmp_path / "r.zarr")
    raw = xr.open_zarr(path)
    assert list(raw.indexes["request_type"]) == list(TYPE_NAMES)  # the index, in code order
    width = max(int(np.sum(rec.request_type == k)) for k in range(len(TYPE_NAMES)))
    assert raw.sizes["request"] == width
    for name, values in (("request_user", rec.request_user), ("request_start", rec.request_start),
                         ("request_end", rec.request_end), ("request_outcome", rec.request_outcome),
                         ("request_latency", rec.request_end - rec.request_start)):
        for k, mine in enumerate(_per_type(rec, values)):
            row = raw[name].isel(request_type=k).values
            np.testing.assert_array_equal(row[: mine.size], mine, err_msg=name)
            assert np.isnan(row[mine.size:]).all(), name
            assert int(raw["request_count"][k]) == mine.size
        meta = json.loads((path / name / "zarr.json").read_text())
        assert meta["data_type"] == np.dtype(conventions.REQUEST_DTYPES[name]).name, name
        assert raw[name].encoding["_FillValue"] == -1, name
        # the dataset before writing is what a reader gets back
        xr.testing.assert_identical(built[name].drop_encoding(), raw[name].load().drop_encoding())
    flat = conventions.flat_requests(raw)
    order = np.argsort(rec.request_type, kind="stable")
    np.testing.assert_array_equal(flat["request_type"], rec.request_type[order])
    np.testing.assert_array_equal(flat["request_start"], rec.request_start[order])
    assert flat["request_outcome"].dtype == np.int8 and flat["request_start"].dtype == np.int64


def test_plain_open_zarr_gives_quantiles_per_request_type(tmp_path):
    """docs/api.md: P99 per request type on a plain xr.open_zarr, lazily (dask), in one
    line; completed requests only with a where."""
    rec = make_record(seed=4, steps=200, n_requests=400)
    raw = xr.open_zarr(write_result(rec, tmp_path / "r.zarr"))
    assert raw["request_latency"].chunks is not None
    p99 = raw.request_latency.quantile(0.99, "request")
    p99_done = raw.request_latency.where(raw.request_outcome == 0).quantile(0.99, "request")
    mean = raw.request_latency.mean("request")
    latency = rec.request_end - rec.request_start
    for k, name in enumerate(TYPE_NAMES):
        mine = latency[rec.request_type == k]
        done = latency[(rec.request_type == k) & (rec.request_outcome == 0)]
        assert float(p99.sel(request_type=name)) == pytest.approx(np.quantile(mine, 0.99))
        assert float(p99_done.sel(request_type=name)) == pytest.approx(np.quantile(done, 0.99))
        assert float(mean.sel(request_type=name)) == pytest.approx(mine.mean())
    # request types are an index: select by name, group the per-type statistics
    assert int(raw.request_count.sel(request_type="heavy10")) == int(np.sum(rec.request_type == 3))


def test_long_rows_are_split_into_chunks(tmp_path, monkeypatch):
    """A type with more than ROW_CHUNK requests spans several chunks, in memory and on
    disk, with the same records as one chunk (the records of a small run are made at
    once, in NumPy: `SMALL_GRID`; the chunked path with it set to 0)."""
    rec = make_record(seed=6, steps=60, n_requests=100)
    assert isinstance(build_dataset(rec)["request_latency"].data, np.ndarray)  # small: made at once
    whole = open_result(write_result(rec, tmp_path / "whole.zarr")).load()
    monkeypatch.setattr(conventions, "SMALL_GRID", 0)
    monkeypatch.setattr(conventions, "ROW_CHUNK", 7)
    built = build_dataset(rec)
    assert set(built["request_latency"].chunks[1][:-1]) == {7}
    path = write_result(rec, tmp_path / "split.zarr")
    meta = json.loads((path / "request_latency" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [1, 7]
    split = open_result(path).load()
    for name in ("request_user", "request_start", "request_outcome", "request_latency", "request_count"):
        xr.testing.assert_identical(split[name].drop_encoding(), whole[name].drop_encoding())


def test_a_type_without_requests_has_an_empty_row(tmp_path):
    rec = make_record(seed=1, steps=50, n_requests=30)
    rec = dataclasses.replace(rec, request_type=np.where(rec.request_type == 2, 1, rec.request_type).astype(np.int8))
    raw = xr.open_zarr(write_result(rec, tmp_path / "r.zarr"))
    assert int(raw.request_count.sel(request_type=TYPE_NAMES[2])) == 0
    assert np.isnan(raw.request_latency.sel(request_type=TYPE_NAMES[2]).values).all()
    assert np.isnan(float(raw.request_latency.quantile(0.99, "request").sel(request_type=TYPE_NAMES[2])))
    assert run_metrics(open_result(tmp_path / "r.zarr"))["requests"].sel(request_type=TYPE_NAMES[2]).sum() == 0


def test_a_run_without_requests_writes_and_reads(tmp_path):
    rec = make_record(seed=1, steps=20, n_requests=0)
    ds = open_result(write_result(rec, tmp_path / "r.zarr"))
    assert ds.sizes["request"] == 0 and ds["request_count"].values.tolist() == [0] * len(TYPE_NAMES)
    assert run_metrics(ds)["requests"].sum() == 0


def test_stores_have_consolidated_metadata(real_runs):
    meta = json.loads((real_runs[0] / "zarr.json").read_text())
    assert isinstance(meta.get("consolidated_metadata"), dict)
    assert "request_latency" in meta["consolidated_metadata"]["metadata"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plain open_zarr neither warns nor falls back
        ds = xr.open_zarr(real_runs[0])
    assert ds.attrs["complete"] == 1 and is_complete(real_runs[0])


def test_open_runs_stacks_runs_along_run(real_runs, tmp_path):
    ds = open_runs(real_runs)
    assert ds.sizes["run"] == 3 and list(ds["run"].values) == [str(p) for p in real_runs]
    assert list(ds["scheduler"].values) == ["uniform", "centralized", "affinity"]
    assert list(ds["users"].values) == [60, 80, 60] and list(ds["seed"].values) == [0, 1, 2]
    assert ds.sizes["time"] == 300  # the 250-step run is padded with NaN
    assert np.isnan(ds["online_users"].isel(run=2, time=slice(250, None)).values).all()
    singles = [open_result(p) for p in real_runs]
    np.testing.assert_array_equal(ds["request_count"].values, [s["request_count"].values for s in singles])
    # P99 per run and request type, without a loop over runs
    p99 = ds.request_latency.where(ds.request_outcome == 0).quantile(0.99, "request")
    assert p99.dims == ("run", "request_type")
    for i, single in enumerate(singles):
        n = single.sizes["request"]
        np.testing.assert_array_equal(ds["request_latency"].isel(run=i, request=slice(0, n)).values,
                                      single["request_latency"].values)
        assert np.isnan(ds["request_latency"].isel(run=i, request=slice(n, None)).values).all()
        mine = run_metrics(single)["latency_quantile"].sel(quantile=0.99)
        np.testing.assert_allclose(p99.isel(run=i).values, mine.values, rtol=1e-12)
        np.testing.assert_array_equal(
            ds["server_consumption"].isel(run=i, time=slice(0, single.sizes["time"])).values,
            single["server_consumption"].values)
    cpu = ds["server_consumption"].sel(resource="cpu").mean("time").groupby("scheduler").mean()
    assert cpu.sel(scheduler="centralized") == pytest.approx(
        float(singles[1]["server_consumption"].sel(resource="cpu").mean()), rel=1e-5)
    if pytest.importorskip("netCDF4"):
        ds.to_netcdf(tmp_path / "runs.nc")


def test_open_mfdataset_recipe_for_the_series(real_runs):
    """The recipe of docs/formats.md for the per-step series of many runs."""
    ds = xr.open_mfdataset([str(p) for p in real_runs], engine="zarr", combine="nested",
                           concat_dim="run", join="outer", combine_attrs="drop_conflicts",
                           preprocess=lambda d: conventions.join_units(
                               d.drop_dims(["request", "scaling_action"], errors="ignore")))
    assert ds.sizes["run"] == 3 and ds.sizes["time"] == 300
    np.testing.assert_array_equal(ds["server_consumption"].isel(run=1).values,
                                  open_result(real_runs[1])["server_consumption"].values)


def test_combined_sweep_store_follows_the_conventions(tmp_path):
    from gmm_volunteer.experiments.combine import open_combined, write_combined
    from gmm_volunteer.experiments.sweep import load_grid, run_sweep

    from helpers import fake_simulate, write_tiny_grid

    grid = load_grid(write_tiny_grid(tmp_path, seeds=2, steps=60))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False, combine=False)
    write_combined(grid.output)
    ds = open_combined(grid.output)
    check_conventions(ds)
    assert ds["users"].attrs["long_name"] == "config key users.count"
    assert json.loads(ds.attrs["sweep_dim_keys"])["users"] == "users.count"
    assert ds["capacity_hours"].attrs["units_coordinate"] == "capacity_hours_unit"
    assert str(ds["capacity_hours_unit"].sel(resource="cpu").values) == "% h"
    if pytest.importorskip("netCDF4"):
        ds.to_netcdf(tmp_path / "combined.nc")


# -- stores written by 0.3.0 (format 1) ----------------------------------------------------

def test_format1_store_opens_with_the_new_conventions(tmp_path):
    store = shutil.copytree(FORMAT1, tmp_path / "old.zarr")
    assert "store_format" not in json.loads((store / "zarr.json").read_text())["attributes"]
    ds = open_result(store)
    assert ds.attrs["store_format"] == 1  # what the store is; it reads like format 3
    assert list(conventions.steps_of(ds["time"])) == list(range(60))
    rec = make_record(seed=5, steps=60, n_requests=40)  # what 0.3.0 wrote into it
    flat = conventions.flat_requests(ds)  # the records now lie per request type
    order = np.argsort(rec.request_type, kind="stable")
    np.testing.assert_array_equal(flat["request_latency"], (rec.request_end - rec.request_start)[order])
    np.testing.assert_array_equal(flat["request_type"], rec.request_type[order])
    np.testing.assert_array_equal(ds["server_consumption"].values, rec.server_consumption)
    check_conventions(ds)
    assert ds.attrs["model_provisional"] == 1 and ds.attrs["complete"] == 1
    assert run_metrics(ds)["requests"].sum() == 40
    assert ds["dedicated_capacity"].attrs["units_coordinate"] == "resource_unit"
    assert ds["scaling_actions"].attrs["units_coordinate"] == "action_field_unit"
    assert list(ds["action_field_unit"].values) == ["s", "s", "1", "1"]
    assert ds["scaling_actions"].values.tolist() == [[10, 20, 1, 2], [30, -1, 2, 1]]
    assert "light5" in summarize(ds)
    if pytest.importorskip("netCDF4"):
        ds.to_netcdf(tmp_path / "old.nc")


def test_netcdf_attr():
    assert conventions.netcdf_attr(True) == 1
    assert conventions.netcdf_attr(None) is None
    assert conventions.netcdf_attr({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert conventions.netcdf_attr([1, 2.5]) == [1, 2.5]
    assert conventions.netcdf_attr(["a", "b"]) == ["a", "b"]
    assert conventions.netcdf_attr([True, False]) == [1, 0]
    assert conventions.netcdf_attr([[1], [2]]) == "[[1], [2]]"
    assert conventions.netcdf_attr(np.float32(0.5)) == 0.5
