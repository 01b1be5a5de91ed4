"""Result store (docs/formats.md, section 2): round trip, atomicity, summary numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from gmm_volunteer.io import results
from gmm_volunteer.io import conventions
from gmm_volunteer.io.results import (
    IncompleteResultError,
    ResultFormatError,
    build_dataset,
    is_complete,
    open_result,
    write_result,
)
from gmm_volunteer.io.runrecord import EVENTS, NODE_CLASSES, OUTCOMES, RESOURCES
from gmm_volunteer.experiments.summary import run_metrics, summarize
from gmm_volunteer.trajectory import TRAJECTORY_VERSION

from helpers import TYPE_NAMES, make_record


@pytest.mark.filterwarnings("error")
def test_round_trip_values_dims_and_attrs(tmp_path):
    rec = make_record(seed=3, steps=300, n_requests=700)
    path = write_result(rec, tmp_path / "run.zarr")
    assert is_complete(path)
    ds = open_result(path)

    built = build_dataset(rec)
    for name in ("online_users", "active_requests", "server_allocation",
                 "server_consumption", "user_consumption", "subtask_events"):
        got = ds[name].values
        assert got.dtype == built[name].dtype, name
        np.testing.assert_array_equal(got, np.asarray(getattr(rec, name)), err_msg=name)
    # request records lie per request type (store format 4); read back flat, type by type
    records = conventions.flat_requests(ds)
    order = np.argsort(rec.request_type, kind="stable")
    for name in ("request_user", "request_type", "request_start", "request_end",
                 "request_outcome", "request_latency"):
        expected = np.asarray(getattr(rec, name))[order]
        assert records[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(records[name], expected, err_msg=name)
        if name != "request_type":
            assert ds[name].dtype == built[name].dtype, name

    assert ds["server_consumption"].dims == ("time", "resource")
    assert ds["subtask_events"].dims == ("time", "node_class", "event")
    assert ds["request_latency"].dims == ("request_type", "request")
    assert list(ds["resource"].values) == list(RESOURCES)
    assert list(ds["node_class"].values) == list(NODE_CLASSES)
    assert list(ds["event"].values) == list(EVENTS)
    assert list(ds["request_type"].values) == list(TYPE_NAMES)
    assert list(ds.indexes["request_type"]) == list(TYPE_NAMES)  # an index coordinate
    assert list(ds["resource_unit"].values) == ["Mbit/s", "Mbit/s", "%", "MB", "MB"]
    # CF time: seconds since the run start, stored as integers, read as datetime64
    assert ds["time"].encoding["units"] == "seconds since 1970-01-01"
    assert ds["time"].attrs["standard_name"] == "time" and ds["time"].attrs["axis"] == "T"
    np.testing.assert_array_equal(conventions.steps_of(ds["time"]), np.arange(rec.steps))
    assert ds["request_latency"].attrs["units"] == "s"
    assert list(ds["request_outcome"].attrs["flag_values"]) == [0, 1, 2]
    assert ds["request_outcome"].attrs["flag_meanings"].split() == list(OUTCOMES)
    # String coords select like ordinary ones after the round trip.
    assert float(ds["server_consumption"].sel(resource="cpu").isel(time=5)) == pytest.approx(
        float(rec.server_consumption[5, RESOURCES.index("cpu")]))

    assert ds.attrs["complete"] == 1
    assert ds.attrs["steps"] == 300
    assert ds.attrs["model_provisional"] == 1  # netCDF has no booleans (docs/formats.md)
    for key in ("config", "seed_entropy", "gmmv_version", "scheduler", "users"):
        assert key in ds.attrs
    assert ds.attrs["trajectory_version"] == TRAJECTORY_VERSION


def test_empty_record_round_trips(tmp_path):
    rec = make_record(seed=1, steps=20, n_requests=0)
    ds = open_result(write_result(rec, tmp_path / "empty.zarr"))
    assert ds.sizes["request"] == 0
    assert "-" in summarize(ds)  # quantiles of nothing are shown as '-'


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("request_type", lambda r: np.full_like(r.request_type, 9), "request_type[0] = 9"),
        ("request_outcome", lambda r: np.full_like(r.request_outcome, 3), "request_outcome[0] = 3"),
        ("server_consumption", lambda r: r.server_consumption[:, :3], "server_consumption has shape"),
        ("request_end", lambda r: r.request_start - 1, "request_end[0] < request_start[0]"),
    ],
)
def test_bad_record_names_the_field_and_writes_nothing(tmp_path, field, value, message):
    rec = make_record(seed=2, steps=50, n_requests=30)
    setattr(rec, field, value(rec))
    with pytest.raises(ResultFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        write_result(rec, tmp_path / "bad.zarr")
    assert list(tmp_path.iterdir()) == []


def test_existing_complete_store_is_not_overwritten(tmp_path):
    path = tmp_path / "run.zarr"
    write_result(make_record(seed=1, steps=50), path)
    with pytest.raises(FileExistsError, match="already exists and is complete"):
        write_result(make_record(seed=2, steps=50), path)
    np.testing.assert_array_equal(open_result(path)["online_users"].values,
                                  make_record(seed=1, steps=50).online_users)
    write_result(make_record(seed=2, steps=50), path, overwrite=True)
    np.testing.assert_array_equal(open_result(path)["online_users"].values,
                                  make_record(seed=2, steps=50).online_users)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.zarr"]


def test_crash_while_writing_leaves_no_complete_store_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "run.zarr"
    old = make_record(seed=1, steps=50)
    write_result(old, path)

    real_write = results._write_store

    def crash_after_data(ds, target):
        real_write(ds, target)  # data fully on disk, `complete` not yet set
        raise KeyboardInterrupt

    monkeypatch.setattr(results, "_write_store", crash_after_data)
    with pytest.raises(KeyboardInterrupt):
        write_result(make_record(seed=2, steps=50), path, overwrite=True)
    with pytest.raises(KeyboardInterrupt):
        write_result(make_record(seed=2, steps=50), tmp_path / "new.zarr")
    assert not (tmp_path / "new.zarr").exists()
    assert not is_complete(tmp_path / "new.zarr")
    np.testing.assert_array_equal(open_result(path)["online_users"].values, old.online_users)

    # A crash between `complete` and the rename: the finished copy keeps its tmp name.
    monkeypatch.setattr(results, "_write_store", real_write)
    real_rename = os.rename

    def rename_fails(src, dst):
        if ".tmp-" in str(src):
            raise OSError("disk went away")
        return real_rename(src, dst)

    monkeypatch.setattr(results.os, "rename", rename_fails)
    with pytest.raises(OSError, match="disk went away"):
        write_result(make_record(seed=2, steps=50), path, overwrite=True)
    np.testing.assert_array_equal(open_result(path)["online_users"].values, old.online_users)


def test_killed_process_leaves_only_the_tmp_dir(tmp_path):
    # A hard kill (no Python cleanup) right before `complete` would be written.
    path = tmp_path / "run.zarr"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from helpers import make_record
        from gmm_volunteer.io import results
        results._mark_complete = lambda target: os._exit(9)
        results.write_result(make_record(seed=1, steps=50), {str(path)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert len(leftovers) == 1 and leftovers[0].startswith("run.zarr.tmp-")
    assert not path.exists()
    with pytest.raises(FileNotFoundError, match="unfinished write"):
        open_result(path)


def test_store_without_complete_is_refused_then_replaceable(tmp_path):
    path = tmp_path / "run.zarr"
    build_dataset(make_record(seed=1, steps=30)).to_zarr(path, zarr_format=3, consolidated=False)
    assert not is_complete(path)
    with pytest.raises(IncompleteResultError, match="incomplete"):
        open_result(path)
    write_result(make_record(seed=1, steps=30), path)  # not complete -> may be replaced
    assert is_complete(path)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_not_written_by_gmmv_is_never_replaced(tmp_path, overwrite):
    target = tmp_path / "photos"
    target.mkdir()
    (target / "a.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(FileExistsError, match="not a result store written by gmmv"):
        write_result(make_record(seed=1, steps=30), target, overwrite=overwrite)
    assert [p.name for p in target.iterdir()] == ["a.jpg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    with pytest.raises(FileExistsError, match="not a result store written by gmmv"):
        write_result(make_record(seed=1, steps=30), afile, overwrite=overwrite)
    assert afile.read_text() == "x"


def test_own_store_is_recognised(tmp_path):
    path = write_result(make_record(seed=1, steps=30), tmp_path / "run.zarr")
    assert results.is_own_store(path)
    assert not results.is_own_store(tmp_path)
    (path / "extra.txt").write_text("x")
    assert not results.is_own_store(path)


def test_open_missing_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="no result store"):
        open_result(tmp_path / "nothing.zarr")


def test_summary_numbers_match_numpy(tmp_path):
    rec = make_record(seed=11, steps=500, n_requests=4000)
    ds = open_result(write_result(rec, tmp_path / "run.zarr"))
    m = run_metrics(ds, quantiles=(0.5, 0.95, 0.99))
    lat = rec.request_latency
    for k, name in enumerate(TYPE_NAMES):
        is_k = rec.request_type == k
        for o, outcome in enumerate(OUTCOMES):
            assert int(m["requests"].sel(request_type=name, outcome=outcome)) == int(
                np.sum(is_k & (rec.request_outcome == o)))
        done = lat[is_k & (rec.request_outcome == 0)]
        np.testing.assert_allclose(m["latency_quantile"].sel(request_type=name).values,
                                   np.percentile(done, [50, 95, 99]))
    np.testing.assert_allclose(m["latency_quantile_all"].values,
                               np.percentile(lat[rec.request_outcome == 0], [50, 95, 99]))
    cons = rec.server_consumption.astype(np.float64)
    np.testing.assert_allclose(m["server_consumption_mean"].values, cons.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m["server_consumption_sd"].values, cons.std(axis=0), rtol=1e-12)
    ev = rec.subtask_events.sum(axis=0)
    np.testing.assert_allclose(m["subtask_completion_rate"].values, ev[:, 1] / ev[:, 0])

    text = summarize(ds)
    assert "completed requests" in text
    assert "provisional" in text
    assert "users 50" in text and "steps 500" in text and "scheduler uniform" in text
    assert "seed 11" in text
    light5_done = lat[(rec.request_type == 0) & (rec.request_outcome == 0)]
    light5_line = next(line for line in text.splitlines() if line.startswith("light5"))
    assert f"{np.percentile(light5_done, 99):,.1f}" in light5_line
    assert f"{int(np.sum((rec.request_type == 0) & (rec.request_outcome == 1))):,}" in light5_line
    cpu_line = next(line for line in text.splitlines() if line.startswith("cpu"))
    assert f"{cons[:, 2].mean():,.2f}" in cpu_line and "%" in cpu_line
    server_line = next(line for line in text.splitlines() if line.startswith("server "))
    assert f"{ev[0, 1] / ev[0, 0]:.3f}" in server_line


def test_summary_without_provisional_flag_has_no_warning(tmp_path):
    rec = make_record(seed=1, steps=40, attrs={"model_provisional": False})
    assert "provisional" not in summarize(build_dataset(rec))


def test_open_zarr_directly_sees_the_same_data(tmp_path):
    rec = make_record(seed=5, steps=40)
    path = write_result(rec, tmp_path / "run.zarr")
    raw = xr.open_zarr(path, consolidated=False)
    np.testing.assert_array_equal(conventions.flat_requests(raw)["request_end"],
                                  rec.request_end[np.argsort(rec.request_type, kind="stable")])


def test_summarize_refuses_a_dataset_without_request_records():
    ds = build_dataset(make_record(seed=1, steps=20)).drop_dims("request")
    with pytest.raises(ResultFormatError, match="not a single-run result store"):
        summarize(ds)


def _allocation_rows(text: str) -> tuple[str, dict[str, list[str]]]:
    """The header line and the rows (by resource) of the summary's allocation table."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("Allocation fractions"))
    rows = {cells[0]: cells[1:] for cells in (line.split() for line in lines[i + 3: i + 3 + len(RESOURCES)])}
    assert list(rows) == list(RESOURCES)
    return lines[i], rows


def test_summary_states_the_allocation_fractions_in_effect(tmp_path, synthetic_model):
    import yaml

    from gmm_volunteer.io.bundlefiles import load_bundle

    fitted = load_bundle(synthetic_model).allocation
    cfg = {"seed": 1, "steps": 40, "model": str(synthetic_model),
           "users": {"count": 50, "allocation": "fitted"},
           "server": {"capacity": 10, "allocation": {"base": "dedicated", "mean": {"cpu": 0.5}, "sd": {"cpu": 0.1}}}}
    rec = make_record(seed=1, steps=40, attrs={"config": yaml.safe_dump(cfg)})
    header, rows = _allocation_rows(summarize(build_dataset(rec)))
    assert "server: dedicated, mean cpu 0.5, sd cpu 0.1" in header and "users: fitted" in header
    for r in RESOURCES:
        server = ["0.500", "0.100"] if r == "cpu" else ["1.000", "0.000"]
        assert rows[r] == server + [f"{fitted[r].mean:,.3f}", f"{fitted[r].sd:,.3f}"], r

    # A bundle that cannot be read: fitted values are '-', and the summary says why.
    cfg["model"] = str(tmp_path / "gone")
    rec = make_record(seed=1, steps=40, attrs={"config": yaml.safe_dump(cfg)})
    text = summarize(build_dataset(rec))
    header, rows = _allocation_rows(text)
    assert rows["band_in"] == ["1.000", "0.000", "-", "-"]
    assert "fitted fractions not shown" in text and "gone" in text

    # A run stored before the keys existed drew the fitted fractions for both classes.
    cfg = {"seed": 1, "steps": 40, "model": str(synthetic_model), "users": {"count": 50}, "server": {"capacity": 10}}
    rec = make_record(seed=1, steps=40, attrs={"config": yaml.safe_dump(cfg)})
    header, rows = _allocation_rows(summarize(build_dataset(rec)))
    assert "server: fitted; users: fitted" in header
    assert rows["cpu"] == [f"{fitted['cpu'].mean:,.3f}", f"{fitted['cpu'].sd:,.3f}"] * 2
