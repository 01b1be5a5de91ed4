"""Class 2 of issue "Hardening II": no exit 0 with wrong results.

Store names of distinct grid points collided, a complete store of another config was
kept as a run's result, repeated seeds gave zero variance, damaged stores read as fill
values, and options or bundle fields overflowed results to inf.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.experiments.sweep import execute_run, load_grid, run_sweep, unique_run_names
from gmm_volunteer.io.bundlefiles import load_bundle, write_bundle
from gmm_volunteer.model.bundle import BundleError
from gmm_volunteer.io.results import DamagedResultError, is_complete, open_result, store_attrs, write_result
from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.testing.synthetic import synthetic_bundle

from helpers import fake_simulate, write_tiny_grid


def test_class2_store_names_keep_distinct_points_apart():
    close = [{"server_capacity": 10.0000001, "seed": 1}, {"server_capacity": 10.0000002, "seed": 1}]
    names = unique_run_names(close)
    assert len(set(names)) == 2 and names[0].endswith("10.0000001_seed-1")
    # texts that differ only in characters the names replace get a digest each
    texts = [{"tag": "a b", "seed": 0}, {"tag": "a/b", "seed": 0}]
    assert len(set(unique_run_names(texts))) == 2
    # grids without collisions keep the names they always had
    plain = [{"users": 100, "server_capacity": 10.0, "seed": 0}]
    assert unique_run_names(plain) == ["users-100_server_capacity-10_seed-0"]


def test_class2_sweep_over_close_values_writes_two_stores(tmp_path):
    grid = load_grid(write_tiny_grid(tmp_path, grid={"server.capacity": [10.0000001, 10.0000002]}, seeds=[1]))
    runs = grid.runs()
    assert len({r.path for r in runs}) == 2
    report = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False, combine=False)
    assert report.ok
    caps = sorted(yaml.safe_load(store_attrs(r.path)["config"])["server"]["capacity"] for r in runs)
    assert caps == [10.0000001, 10.0000002]


def test_class2_complete_store_of_another_config_is_not_reused(tmp_path):
    grid = load_grid(write_tiny_grid(tmp_path, grid={"server.capacity": [10, 30]}, seeds=[1]))
    a, b = grid.runs()
    write_result(fake_simulate(a.config), b.path)  # run a's result where run b's belongs
    outcome = execute_run(b.name, b.config, str(b.path), fake_simulate)
    assert outcome.status == "failed" and "another config" in outcome.error
    # and a store of its own config is still reused
    write_result(fake_simulate(a.config), a.path)
    assert execute_run(a.name, a.config, str(a.path), fake_simulate).status == "ok"


def test_class2_repeated_seeds_are_refused(tmp_path, capsys, synthetic_model):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"steps": 50, "users": {"count": 10}, "server": {"capacity": 10}, "model": str(synthetic_model)}))
    before = sorted(tmp_path.rglob("*"))
    code = main(["capacity", str(cfg), "--p99", "10s", "--seed-list", "1", "1", "-q"])
    assert code == 2
    assert "--seed-list: seeds repeat (1)" in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("argv, message", [
    (["--tol", "nan"], "--tol: must be a finite number"),
    (["--workers", "0"], "--workers: must be between 1"),
    (["--seeds", "0"], "--seeds: must be between 1"),
])
def test_class2_capacity_numeric_options_are_bounded(tmp_path, capsys, synthetic_model, argv, message):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"steps": 50, "users": {"count": 10}, "server": {"capacity": 10}, "model": str(synthetic_model)}))
    with pytest.raises(SystemExit) as info:
        main(["capacity", str(cfg), "--p99", "10s", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message.split(":")[0] in err and message.split(": ", 1)[1] in err


def _store(tmp_path) -> Path:
    grid = load_grid(write_tiny_grid(tmp_path, grid={"server.capacity": [10]}, seeds=[1]))
    (run,) = grid.runs()
    return write_result(fake_simulate(run.config), tmp_path / "one.zarr")


@pytest.mark.parametrize("damage", ["delete chunks", "flip a byte"])
def test_class2_damaged_store_is_refused(tmp_path, capsys, damage):
    path = _store(tmp_path)
    assert open_result(path) is not None
    chunks = sorted((path / "request_latency" / "c").rglob("*"))  # c/<type>/<request>
    target = next(p for p in chunks if p.is_file())
    if damage == "delete chunks":
        shutil.rmtree(target.parent)
    else:
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(data)
    assert is_complete(path)  # still marked complete: only the manifest tells
    with pytest.raises(DamagedResultError, match="damaged"):
        open_result(path)
    assert main(["summarize", str(path)]) == 2
    assert "damaged" in capsys.readouterr().err


@pytest.mark.parametrize("options", [
    {"unit": float("inf")}, {"unit": 1e300}, {"min_units": 2**63}, {"max_units": 10**30},
])
def test_class2_autoscaler_options_that_overflow_are_refused(synthetic_model, options):
    with pytest.raises(ConfigError, match="autoscaler_options"):
        config_from_dict({"model": str(synthetic_model), "server": {"capacity": 10}, "autoscaler": "reactive",
                          "autoscaler_options": options})


@pytest.mark.parametrize("options", [{"decision_log": 10**9}, {"window_s": 2**63}, {"decision_log": 2**63}])
def test_class2_scheduler_options_that_overflow_are_refused(synthetic_model, options):
    with pytest.raises(ConfigError, match="scheduler_options"):
        config_from_dict({"model": str(synthetic_model), "server": {"capacity": 10}, "scheduler": "queue_aware",
                          "scheduler_options": options})


@pytest.mark.parametrize("where", ["stats mean", "idw_power"])
def test_class2_bundle_values_that_overflow_are_refused(tmp_path, where):
    b = synthetic_bundle()
    if where == "stats mean":
        b["consumption"]["stages"]["execution"]["resources"]["memory"]["stats"]["mean"][0][0] = 1e300
    else:
        b["consumption"]["idw_power"] = 1e300
    with pytest.raises(BundleError, match="idw_power|mean"):
        write_bundle(b, tmp_path / "b")
    assert not (tmp_path / "b").exists()
