"""Stores as CF 1.11 describes them (docs/formats.md section 2.1): cf-xarray finds the
time axis, the flags and the standard names; every unit is one UDUNITS-2 reads; the IOOS
compliance checker finds no error; on disk (format 5) every numeric data variable of a
run store and of a combined store has its own CF units, the per-resource ones split per
resource; and stores of formats 2 (0.4.0-0.6.0), 3 (0.6.0) and 4 (0.7.0) open with the
look of format 5."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from gmm_volunteer.io import conventions
from gmm_volunteer.io.results import build_dataset, open_result, write_result
from gmm_volunteer.experiments.runs import open_runs
from gmm_volunteer.experiments.summary import run_metrics, summarize

from helpers import TYPE_NAMES, make_record

cf_xarray = pytest.importorskip("cf_xarray")

# Written by gmm-volunteer 0.6.0's write_result (store formats 2 and 3, before and after
# the CF change, both under version 0.6.0), from
# helpers.make_record(seed=5, steps=60, n_requests=40) plus a constant dedicated_capacity
# [1000, 1000, 400, 4000, 8000] and the scaling actions [[10, 20, 1, 2], [30, -1, 2, 1]].
FORMAT2 = Path(__file__).parent / "data" / "store_format2.zarr"
FORMAT3 = Path(__file__).parent / "data" / "store_format3.zarr"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rec = make_record(seed=11, steps=120, n_requests=200)
    return rec, write_result(rec, tmp_path_factory.mktemp("cf") / "run.zarr")


def test_cf_xarray_finds_the_time_axis_on_plain_open_zarr(store):
    rec, path = store
    ds = xr.open_zarr(path)
    assert ds.cf.axes == {"T": ["time"]}
    assert ds.cf["T"].name == "time" and ds.cf["time"].name == "time"  # axis and standard name
    assert ds.cf.standard_names == {"time": ["time"]}
    assert ds["time"].dtype.kind == "M"  # decoded by xarray from "seconds since ..."
    seconds = (ds["time"] - ds["time"][0]) / np.timedelta64(1, "s")
    np.testing.assert_array_equal(seconds.values, np.arange(rec.steps))


def test_cf_xarray_reads_the_flags(store):
    rec, path = store
    ds = xr.open_zarr(path)
    completed = (ds["request_outcome"].cf == "completed").values  # (request_type, request)
    for k in range(len(TYPE_NAMES)):
        mine = rec.request_outcome[rec.request_type == k] == 0
        np.testing.assert_array_equal(completed[k, : mine.size], mine)
        assert not completed[k, mine.size:].any()  # padding is no outcome


def _units_of_every_variable(ds: xr.Dataset) -> dict:
    """Every ``units`` attribute, and each entry of a unit coordinate (the exception of
    docs/formats.md section 2.1), by variable."""
    out = {name: str(var.attrs["units"]) for name, var in ds.variables.items() if "units" in var.attrs}
    if "time" in ds.variables:
        out["time"] = ds["time"].encoding.get("units", out.get("time"))
    return out


def test_every_unit_is_one_udunits_reads(store):
    cf_units = pytest.importorskip("cf_units")
    _, path = store
    for ds in (open_result(path), run_metrics(open_result(path))):
        units = _units_of_every_variable(ds)
        assert units, "no units at all"
        for name, unit in units.items():
            cf_units.Unit(unit)  # raises ValueError on a unit UDUNITS-2 cannot parse
        for name, var in ds.data_vars.items():
            if var.dtype.kind in "iuf" and "flag_values" not in var.attrs and "units" not in var.attrs:
                # the one exception: a unit per entry of the dimension, in a coordinate
                assert var.attrs.get("units_coordinate") in ds.coords, name


def test_units_are_the_models(store):
    _, path = store
    ds = open_result(path)
    assert ds["completed_work"].attrs["units"] == "s"  # CPU-seconds
    assert ds["request_latency"].attrs["units"] == "s"
    assert ds.attrs["Conventions"] == "CF-1.11"
    m = run_metrics(ds)
    assert m["monitor_bytes_total"].attrs["units"] == "byte"  # "B" is the bel in UDUNITS-2


def _checker_errors(nc: Path, tmp_path: Path) -> list[str]:
    """The messages of the checks the IOOS compliance checker fails at high priority
    (the "Errors" of its report) for CF 1.11."""
    from compliance_checker.runner import CheckSuite, ComplianceChecker

    CheckSuite.load_all_available_checkers()
    out = tmp_path / "report.json"
    ComplianceChecker.run_checker(str(nc), ["cf:1.11"], verbose=0, criteria="normal",
                                  output_filename=str(out), output_format="json")
    report = json.loads(out.read_text())["cf:1.11"]
    return [f"{r['name']}: {'; '.join(r['msgs'])}" for r in report.get("high_priorities", [])
            if r["value"][0] < r["value"][1]]


@pytest.mark.filterwarnings("ignore:The ioos_sos checker is deprecated:DeprecationWarning")
def test_the_cf_checker_finds_no_error(store, tmp_path):
    pytest.importorskip("compliance_checker")
    pytest.importorskip("netCDF4")
    _, path = store
    open_result(path).to_netcdf(tmp_path / "run.nc")
    assert _checker_errors(tmp_path / "run.nc", tmp_path) == []
    # ... and it does find them: a time coordinate without a reference time is one
    broken = open_result(path)
    broken["time"] = ("time", np.arange(broken.sizes["time"]), {"units": "s", "standard_name": "time"})
    broken.to_netcdf(tmp_path / "broken.nc")
    assert any("time" in e for e in _checker_errors(tmp_path / "broken.nc", tmp_path))


# -- stores written by 0.4.0-0.6.0 (formats 2 and 3) --------------------------------------

@pytest.mark.parametrize("store_dir, fmt, codes_var", [(FORMAT2, 2, "request_type"),
                                                      (FORMAT3, 3, "request_type_code")])
def test_old_stores_open_with_the_current_look(tmp_path, store_dir, fmt, codes_var):
    path = shutil.copytree(store_dir, tmp_path / "old.zarr")
    meta = json.loads((path / "zarr.json").read_text())["attributes"]
    codes = json.loads((path / codes_var / "zarr.json").read_text())
    assert meta["store_format"] == fmt and codes["dimension_names"] == ["request"]  # the old layout
    ds = open_result(path)
    assert ds.attrs["store_format"] == fmt  # what the store is; it reads like format 4
    rec = dataclasses.replace(  # what 0.6.0 wrote into it
        make_record(seed=5, steps=60, n_requests=40),
        dedicated_capacity=np.tile(np.array([1000, 1000, 400, 4000, 8000], np.float32), (60, 1)),
        scaling_actions=np.array([[10, 20, 1, 2], [30, -1, 2, 1]], np.int64),
        scaling_action_cost=np.array([40 / 3600, 0.0]))
    new = build_dataset(rec)
    assert set(ds.data_vars) == set(new.data_vars)
    assert list(ds.indexes["request_type"]) == list(TYPE_NAMES)
    for name in ("request_user", "request_start", "request_end", "request_outcome",
                 "request_latency", "request_count"):
        xr.testing.assert_equal(ds[name], new[name])  # values, dims, dtypes (old long names may differ)
        assert ds[name].dtype == new[name].dtype, name
    assert "request_type_code" not in ds and "request_type_label" not in ds
    xr.testing.assert_identical(ds["time"].reset_coords(drop=True), new["time"])
    np.testing.assert_array_equal(ds["server_consumption"].values, rec.server_consumption)
    assert ds["completed_work"].attrs["units"] == "s"
    assert ds["scaling_actions"].values.tolist() == [[10, 20, 1, 2], [30, -1, 2, 1]]
    assert ds.cf.axes == {"T": ["time"]}
    # every reader sees the same as in a store of the current format
    current = open_result(write_result(rec, tmp_path / "new.zarr"))
    m_old, m_new = run_metrics(ds), run_metrics(current)
    for name in m_new.data_vars:
        np.testing.assert_array_equal(m_old[name].values, m_new[name].values, err_msg=name)
    assert summarize(ds).splitlines()[1:] == summarize(current).splitlines()[1:]
    both = open_runs([path, tmp_path / "new.zarr"])
    np.testing.assert_array_equal(both["request_latency"].isel(run=0).values,
                                  both["request_latency"].isel(run=1).values)
    assert both.gmmv.metrics()["requests"].sum("run").sum() == 80


def _assert_every_numeric_variable_has_cf_units(ds: xr.Dataset, where: str) -> None:
    """On a plainly opened store: cf-xarray lists each numeric data variable (codes
    aside) under a unit that UDUNITS-2 parses, and no variable leans on a unit coordinate."""
    cf_units = pytest.importorskip("cf_units")
    numeric = {n for n, v in ds.data_vars.items() if v.dtype.kind in "iuf" and "flag_values" not in v.attrs}
    assert numeric, where
    missing = sorted(n for n in numeric if "units" not in ds[n].attrs)
    assert not missing, f"{where}: no CF units on {missing}"
    assert not [n for n, v in ds.data_vars.items() if "units_coordinate" in v.attrs], where
    for name in numeric:
        cf_units.Unit(ds[name].attrs["units"])  # raises ValueError on a unit UDUNITS-2 cannot parse
        assert ds[name].attrs.get("long_name"), name


def test_plain_open_zarr_of_a_run_store_has_cf_units_on_every_variable(tmp_path):
    rec = dataclasses.replace(
        make_record(seed=5, steps=60, n_requests=40),
        dedicated_capacity=np.tile(np.array([1000, 1000, 400, 4000, 8000], np.float32), (60, 1)),
        scaling_actions=np.array([[10, 20, 1, 2], [30, -1, 2, 1]], np.int64),
        scaling_action_cost=np.array([40 / 3600, 0.0]))
    path = write_result(_with_decisions(rec), tmp_path / "run.zarr")
    ds = xr.open_zarr(path)
    assert ds.attrs["store_format"] == conventions.STORE_FORMAT == 5
    _assert_every_numeric_variable_has_cf_units(ds, "run store")
    assert "server_consumption" not in ds  # stored per resource ...
    cpu = ds["server_consumption_cpu"]
    assert cpu.dims == ("time",) and cpu.attrs["units"] == "%"
    assert cpu.attrs["long_name"] == "server consumption c_t before the executor acts: cpu"
    assert ds["server_consumption_band_in"].attrs["units"] == "Mbit/s"
    assert ds["user_consumption_memory"].attrs["units"] == "Mbyte"  # MB, as UDUNITS-2 spells it
    assert ds["scaling_actions_ordered"].attrs["units"] == "s" and ds["decision_node"].attrs["units"] == "1"
    # cf-xarray's view: the variables per unit, by the units attribute CF tools read
    by_unit = {}
    for name in ds.data_vars:
        by_unit.setdefault(ds[name].attrs.get("units"), []).append(name)
    assert "server_consumption_cpu" in by_unit["%"] and "server_consumption_storage" in by_unit["Mbyte"]
    assert ds.cf["server_consumption_cpu"].attrs["units"] == "%"
    np.testing.assert_array_equal(cpu.values, rec.server_consumption[:, 2])
    # ... and open_result, and the accessor on the plain open, join the parts back
    joined = open_result(path)
    np.testing.assert_array_equal(joined["server_consumption"].values, rec.server_consumption)
    assert joined["server_consumption"].dims == ("time", "resource")
    assert joined["server_consumption"].attrs == build_dataset(rec)["server_consumption"].attrs
    assert joined["scaling_actions"].values.tolist() == [[10, 20, 1, 2], [30, -1, 2, 1]]
    assert joined["decision"].dims == ("decision", "decision_field")
    assert not [n for n in joined.data_vars if "split_of" in joined[n].attrs]
    np.testing.assert_allclose(ds.gmmv.server_consumption()["mean"].values,
                               joined.gmmv.server_consumption()["mean"].values)


def test_the_combined_store_has_cf_units_on_every_variable(tmp_path):
    from gmm_volunteer.experiments.combine import COMBINED, open_combined, write_combined
    from gmm_volunteer.experiments.sweep import load_grid, run_sweep

    from helpers import fake_simulate, write_tiny_grid

    grid = load_grid(write_tiny_grid(tmp_path, seeds=2, steps=60))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False, combine=False)
    write_combined(grid.output)
    ds = xr.open_zarr(grid.output / COMBINED)
    _assert_every_numeric_variable_has_cf_units(ds, "combined store")
    assert ds["capacity_hours_cpu"].attrs["units"] == "% h"
    joined = open_combined(grid.output)
    assert joined["capacity_hours"].attrs["units_coordinate"] == "capacity_hours_unit"
    np.testing.assert_array_equal(joined["capacity_hours"].sel(resource="cpu").values,
                                  ds["capacity_hours_cpu"].values)


def test_a_format_4_store_opens_as_before(tmp_path, monkeypatch):
    """0.7.0 stored the per-resource variables whole (format 4): written here by the
    current writer with the split turned off and the format it had."""
    from gmm_volunteer.io import results

    rec = make_record(seed=8, steps=50, n_requests=30)
    monkeypatch.setattr(conventions, "split_units", lambda ds: ds.assign_attrs(store_format=4))
    old = write_result(rec, tmp_path / "old.zarr")
    monkeypatch.undo()
    plain = xr.open_zarr(old)
    assert plain.attrs["store_format"] == 4 and "units_coordinate" in plain["server_consumption"].attrs
    ds = open_result(old)
    current = open_result(results.write_result(rec, tmp_path / "new.zarr"))
    assert ds.attrs["store_format"] == 4 and current.attrs["store_format"] == 5
    assert set(ds.data_vars) == set(current.data_vars)
    for name in current.data_vars:
        xr.testing.assert_identical(ds[name].reset_coords(drop=True), current[name].reset_coords(drop=True))


def test_split_and_join_are_inverse_and_a_partial_selection_is_left_alone():
    ds = build_dataset(make_record(seed=3, steps=20, n_requests=10))
    parts = conventions.split_units(ds)
    assert {"server_consumption_cpu", "server_allocation_memory"} <= set(parts.data_vars)
    back = conventions.join_units(parts)
    for name in ds.data_vars:
        xr.testing.assert_identical(back[name], ds[name])
    some = parts.drop_vars("server_consumption_cpu")
    assert "server_consumption" not in conventions.join_units(some)  # four of five: not joined
    assert "server_consumption_memory" in conventions.join_units(some)


def test_upgrade_leaves_the_current_format_alone(store):
    _, path = store
    ds = open_result(path)
    assert conventions.upgrade(ds) is ds


def _with_decisions(rec):
    """`rec` with a router's decision log as a router records it (docs/routing.md)."""
    from gmm_volunteer.model.constants import DECISION_FIELD_UNITS, DECISION_FIELDS

    log = np.arange(3 * len(DECISION_FIELDS), dtype=np.float64).reshape(3, -1)
    return dataclasses.replace(
        rec, policy_series={"decision": (("decision", "decision_field"), log,
                                         {"long_name": "routing decisions",
                                          "units_coordinate": "decision_field_unit"})},
        policy_coords={"decision_field": DECISION_FIELDS,
                       "decision_field_unit": ("decision_field", DECISION_FIELD_UNITS)})


def test_a_routers_decision_log_has_a_unit_per_field():
    cf_units = pytest.importorskip("cf_units")
    ds = build_dataset(_with_decisions(make_record(seed=2, steps=30, n_requests=10)))
    assert "units" not in ds["decision"].attrs
    units = dict(zip(ds["decision_field"].values, ds["decision_field_unit"].values))
    assert units["step"] == "s" and units["node"] == "1" and units["realized"] == "s"
    for unit in units.values():
        cf_units.Unit(unit)


def test_upgrade_gives_an_old_decision_log_its_units():
    ds = build_dataset(_with_decisions(make_record(seed=2, steps=30, n_requests=10)))
    new = ds["decision_field_unit"]
    old = ds.drop_vars("decision_field_unit")
    old["decision"].attrs = {"long_name": "routing decisions",
                             "units": "s (step: step index; node, tier: codes)"}
    old.attrs["store_format"] = 2
    up = conventions.upgrade(old)
    assert up["decision"].attrs["units_coordinate"] == "decision_field_unit"
    assert "units" not in up["decision"].attrs
    assert list(up["decision_field_unit"].values) == list(new.values)
