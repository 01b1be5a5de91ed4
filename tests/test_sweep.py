"""Sweeps: grid validation, runners (serial, local cluster, Dask address), resume,
failure reporting, combined dataset."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

from gmm_volunteer.experiments.combine import combine, open_combined
from gmm_volunteer.io.results import build_dataset, is_complete, open_result
from gmm_volunteer.experiments.summary import run_metrics
from gmm_volunteer.experiments.sweep import GridError, StaleRunsError, load_grid, run_name, run_sweep

from helpers import failing_simulate, fake_simulate, write_tiny_grid

TESTS_DIR = str(Path(__file__).parent)
SMALL = {"users.count": [100, 1000], "scheduler": ["centralized", "uniform"]}


def _comparable(ds: xr.Dataset) -> xr.Dataset:
    # Wall times and file paths legitimately differ between two executions.
    return ds.drop_vars(["wall_time_s"]).load().assign_attrs(
        {k: "" for k in ("sweep_grid_file", "sweep_base_config")})


# -- grid files -------------------------------------------------------------------------

def test_grid_expands_to_named_runs_with_shared_seeds(tmp_path):
    grid = load_grid(write_tiny_grid(tmp_path, seeds=[7, 9]))
    runs = grid.runs()
    assert grid.dim_names == ["users", "server_capacity", "scheduler", "seed"]
    assert len(runs) == 2 * 2 * 2 * 2
    assert len({r.name for r in runs}) == len(runs)
    r = runs[0]
    assert r.name == "users-100_server_capacity-10_scheduler-centralized_seed-7"
    assert r.path == Path(tmp_path / "out" / "runs" / f"{r.name}.zarr")
    assert r.config.seed == 7 and r.config.users.count == 100 and r.config.scheduler == "centralized"
    assert r.config.output.path == str(r.path)
    # Common random numbers: the seed depends only on the replicate.
    assert {x.config.seed for x in runs if x.coords["seed"] == 9} == {9}
    assert run_name({"a": 1.0, "b": "x/y", "c": 2.5}) == "a-1_b-x-y_c-2.5"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda g: g.update(bogus=1), "bogus: unknown grid key"),
        (lambda g: g["grid"].update({"users.count": []}), "grid.users.count: must be a non-empty list"),
        (lambda g: g["grid"].update({"users.count": [100, 100]}), "grid.users.count: values repeat"),
        (lambda g: g["grid"].update({"users.count": [0]}), "users.count: must be >= 1"),
        (lambda g: g["grid"].update({"users.colour": [1]}), "users.colour: unknown config key"),
        (lambda g: g["grid"].update({"seed": [1]}), "grid.seed: set by the sweep itself"),
        (lambda g: g.update(seeds=0), "seeds: a count must be between 1 and 100,000"),
        (lambda g: g.update(seeds=[1, "x"]), "seeds.1: must be an integer"),
        (lambda g: g.update(base="nope.yaml"), "base: run config not found"),
        (lambda g: g.pop("grid"), "grid: required key is missing"),
    ],
)
def test_bad_grid_is_refused_naming_file_and_key(tmp_path, edit, message):
    path = write_tiny_grid(tmp_path)
    spec = yaml.safe_load(path.read_text())
    edit(spec)
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(GridError) as info:
        load_grid(path)
    assert message in str(info.value)
    assert str(path) in str(info.value) or "nope.yaml" in str(info.value)
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_shipped_grids_are_valid(tmp_path):
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    from helpers import ensure_schedulers

    ensure_schedulers()
    root = Path(__file__).parent.parent
    # Validated against a synthetic bundle so the check does not depend on a fitted one.
    bundle = write_bundle(synthetic_bundle(), tmp_path / "bundle")
    over = {"model": str(bundle)}
    paper = load_grid(root / "configs/paper/grid.yaml", output=tmp_path / "p", overrides=over)
    assert paper.shape == (4, 2, 5, 3, 3)
    assert paper.coords()["users"] == [100, 1000, 5000, 10000]
    assert paper.coords()["server_capacity"] == [10, 30, 50, 80, 100]
    assert paper.coords()["scheduler"] == ["centralized", "uniform", "affinity"]
    assert {r.config.steps for r in paper.runs()} == {100000}
    small = load_grid(root / "configs/grid_small.yaml", output=tmp_path / "s", overrides=over)
    assert set(small.dim_names) == set(paper.dim_names)
    assert len(small.runs()) < len(paper.runs())


def test_shipped_100k_grid_dry_run_lists_its_four_runs(tmp_path, capsys, monkeypatch):
    """configs/scale/sweep_100k.yaml (docs/experiments.md, "Large runs on a cluster"):
    2 schedulers x 2 seeds of 100,000 users, short enough to measure; results under the
    git-ignored results/ of the current directory; `--dry-run` validates and writes nothing."""
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    from helpers import ensure_schedulers

    ensure_schedulers()
    grid_file = Path(__file__).parent.parent / "configs/scale/sweep_100k.yaml"
    bundle = write_bundle(synthetic_bundle(), tmp_path / "bundle")
    monkeypatch.chdir(tmp_path)
    grid = load_grid(grid_file, overrides={"model": str(bundle)})
    assert grid.output == tmp_path / "results/scale/sweep_100k"
    assert grid.coords() == {"scheduler": ["uniform", "affinity"], "seed": [0, 1]}
    assert {(r.config.users.count, r.config.steps) for r in grid.runs()} == {(100_000, 2_000)}

    assert main(["sweep", str(grid_file), "--dry-run", "--set", f"model={bundle}"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    expected = [f"to run    {grid.output / 'runs' / f'scheduler-{s}_seed-{seed}.zarr'}"
                for s in ("uniform", "affinity") for seed in (0, 1)]
    assert lines == expected
    assert not (tmp_path / "results").exists()


# -- running ----------------------------------------------------------------------------

def test_serial_sweep_combines_per_run_statistics(tmp_path):
    grid = load_grid(write_tiny_grid(tmp_path, grid=SMALL, seeds=2))
    report = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    assert report.ok and len(report.by_status("ok")) == 8
    ds = open_combined(grid.output)
    assert dict(ds.sizes)["users"] == 2 and dict(ds.sizes)["seed"] == 2
    assert bool(ds["run_complete"].all())
    # Every cell equals the statistics of its own store.
    for r in grid.runs():
        expected = run_metrics(open_result(r.path), ds["quantile"].values)
        cell = ds.sel(r.coords)
        for name in ("requests", "latency_quantile", "server_consumption_sd", "subtask_completion_rate"):
            np.testing.assert_allclose(cell[name].values, expected[name].values, err_msg=name)


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    # Workers are fresh processes: they import the fake run function from tests/.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        import logging

        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=logging.ERROR)
        try:
            yield cluster
        finally:
            cluster.close()


def test_local_runner_and_dask_cluster_give_identical_datasets(tmp_path, dask_cluster, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    grids = {}
    for how in ("serial", "local", "address"):
        grids[how] = load_grid(write_tiny_grid(tmp_path / how, grid=SMALL, seeds=2))
    run_sweep(grids["serial"], serial=True, run_fn=fake_simulate, progress=False)
    run_sweep(grids["local"], workers=2, run_fn=fake_simulate, progress=False)
    run_sweep(grids["address"], address=dask_cluster.scheduler_address, run_fn=fake_simulate,
              progress=False)
    ref = _comparable(open_combined(grids["serial"].output))
    for how in ("local", "address"):
        xr.testing.assert_identical(_comparable(open_combined(grids[how].output)), ref)
    # And not just equal statistics: the per-run stores hold the same requests.
    name = grids["serial"].runs()[3].path.name
    a = open_result(grids["serial"].output / "runs" / name)
    b = open_result(grids["address"].output / "runs" / name)
    np.testing.assert_array_equal(a["request_latency"].values, b["request_latency"].values)


def test_failed_run_is_reported_and_others_finish(tmp_path, dask_cluster, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    grid = load_grid(write_tiny_grid(
        tmp_path, grid={"users.count": [100], "scheduler": ["uniform", "affinity"]}, seeds=2))
    report = run_sweep(grid, address=dask_cluster.scheduler_address, run_fn=failing_simulate,
                       progress=False)
    failed = report.by_status("failed")
    assert not report.ok and len(failed) == 2 and len(report.by_status("ok")) == 2
    assert all("synthetic failure for scheduler affinity" in f.error for f in failed)
    assert "FAILED users-100_scheduler-affinity_seed-0" in report.text()
    for r in grid.runs():
        assert is_complete(r.path) == (r.coords["scheduler"] == "uniform")
        if r.coords["scheduler"] == "affinity":
            assert "RuntimeError" in (grid.output / "failed" / f"{r.name}.txt").read_text()
    assert report.combined is None  # not every run is complete
    partial = combine(grid.output).load()
    assert partial["requests"].sel(scheduler="affinity").isnull().all()
    assert partial["requests"].sel(scheduler="uniform").notnull().all()
    from gmm_volunteer.cli.commands import main

    assert main(["combine", str(grid.output)]) == 0  # a partial combined store on request
    stored = open_combined(grid.output)
    assert int(stored["run_complete"].sum()) == 2 and stored.attrs["runs_complete"] == 2
    # Retrying with a working run function completes the sweep and clears the failure notes.
    report = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    assert report.ok and len(report.by_status("skipped")) == 2 and report.combined is not None
    assert not list((grid.output / "failed").iterdir())
    assert bool(open_combined(grid.output)["run_complete"].all())  # the partial one was replaced


def test_resume_skips_complete_runs_and_redoes_interrupted_ones(tmp_path):
    grid = load_grid(write_tiny_grid(tmp_path, grid=SMALL, seeds=1))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    runs = grid.runs()
    # Run 0: its store vanished. Run 1: a store that never got `complete` plus a tmp dir.
    import shutil

    shutil.rmtree(runs[0].path)
    shutil.rmtree(runs[1].path)
    build_dataset(fake_simulate(runs[1].config)).to_zarr(runs[1].path, zarr_format=3, consolidated=False)
    stale = runs[1].path.with_name(runs[1].path.name + ".tmp-999999")
    stale.mkdir()
    untouched = runs[2].path / "zarr.json"
    mtime = untouched.stat().st_mtime_ns

    calls = []

    def counting(cfg, progress=False):
        calls.append(run_name({"users": cfg.users.count, "scheduler": cfg.scheduler}))
        return fake_simulate(cfg, progress)

    report = run_sweep(grid, serial=True, run_fn=counting, progress=False)
    assert sorted(calls) == sorted(run_name({"users": r.config.users.count, "scheduler": r.config.scheduler})
                                   for r in runs[:2])
    assert len(report.by_status("skipped")) == len(runs) - 2
    assert all(is_complete(r.path) for r in runs)
    assert not stale.exists()
    assert untouched.stat().st_mtime_ns == mtime


def _set_store_attr(path: Path, key: str, value) -> None:
    import json

    meta = json.loads((path / "zarr.json").read_text(encoding="utf-8"))
    meta["attributes"][key] = value
    (path / "zarr.json").write_text(json.dumps(meta), encoding="utf-8")


@pytest.mark.parametrize("key, value, why", [
    ("gmmv_version", "0.0.1", "made by gmmv 0.0.1"),
    ("config", "seed: 0\n", "its config differs"),
    ("model_sha256", "0" * 64, "another model bundle"),
])
def test_resume_refuses_stores_made_by_another_run(tmp_path, capsys, key, value, why):
    # A complete store made by another version, config or model must not be mixed in:
    # the sweep refuses (exit 2 from the CLI, naming the store and why) and writes nothing.
    grid_path = write_tiny_grid(tmp_path, grid=SMALL, seeds=1)
    grid = load_grid(grid_path)
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    odd = grid.runs()[1].path
    _set_store_attr(odd, key, value)
    manifest = (grid.output / "sweep.json").read_bytes()
    combined_before = sorted(p.name for p in (grid.output / "combined.zarr").iterdir())
    with pytest.raises(StaleRunsError, match=why):
        run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    assert (grid.output / "sweep.json").read_bytes() == manifest
    assert sorted(p.name for p in (grid.output / "combined.zarr").iterdir()) == combined_before
    assert is_complete(odd)

    from gmm_volunteer.cli.commands import main

    assert main(["sweep", str(grid_path), "--serial", "-q"]) == 2
    err = capsys.readouterr().err
    assert str(odd) in err and why in err and "-o DIR" in err
    assert main(["sweep", str(grid_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"stale     {odd} (" in out and out.count("complete  ") == len(grid.runs()) - 1


def test_resume_keeps_stores_of_the_same_run(tmp_path):
    # The real engine's stores carry what the check compares: resuming skips them.
    grid = load_grid(write_tiny_grid(tmp_path, grid={"scheduler": ["centralized"]}, seeds=1))
    report = run_sweep(grid, serial=True, progress=False, combine=False)
    assert report.ok
    again = run_sweep(grid, serial=True, progress=False, combine=False)
    assert len(again.by_status("skipped")) == len(grid.runs())


def test_resume_after_the_sweep_process_was_killed(tmp_path):
    grid_path = write_tiny_grid(tmp_path, grid=SMALL, seeds=1)
    # The sweep process dies hard (no cleanup) while writing its third run.
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {TESTS_DIR!r})
        from helpers import ensure_schedulers, fake_simulate
        ensure_schedulers()
        from gmm_volunteer.io import results
        from gmm_volunteer.experiments.sweep import load_grid, run_sweep
        written = []
        real = results._mark_complete
        def mark(target):
            if len(written) == 2:
                os._exit(17)
            written.append(target)
            real(target)
        results._mark_complete = mark
        run_sweep(load_grid({str(grid_path)!r}), serial=True, run_fn=fake_simulate, progress=False)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 17, proc.stderr
    grid = load_grid(grid_path)
    runs = grid.runs()
    done = [r for r in runs if is_complete(r.path)]
    assert len(done) == 2
    # Nothing that looks complete is missing data: every existing store opens and is whole.
    for r in runs:
        if r.path.exists():
            assert is_complete(r.path)
            assert open_result(r.path).sizes["time"] == 300
    assert list((grid.output / "runs").glob("*.tmp-*"))  # the killed write's leftovers
    report = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    assert len(report.by_status("skipped")) == 2 and len(report.by_status("ok")) == len(runs) - 2
    assert not list((grid.output / "runs").glob("*.tmp-*"))
    assert report.combined is not None and bool(open_combined(grid.output)["run_complete"].all())


def test_sweep_cli_bad_grid_exits_2(tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    path = write_tiny_grid(tmp_path)
    spec = yaml.safe_load(path.read_text())
    spec["grid"]["server.capacity"] = [-1]
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--serial", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "server.capacity" in err and str(path) in err


def test_sweep_cli_dry_run_lists_runs_and_writes_nothing(tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    path = write_tiny_grid(tmp_path, grid=SMALL, seeds=1)
    assert main(["sweep", str(path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("to run") for line in lines)
    assert not (tmp_path / "out").exists()


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    from gmm_volunteer.experiments.sweep import SchedulerUnreachable

    pytest.importorskip("distributed")
    grid = load_grid(write_tiny_grid(tmp_path, grid={"users.count": [100]}, seeds=1))
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SchedulerUnreachable, match=f"127.0.0.1:{port}"):
        run_sweep(grid, address=f"tcp://127.0.0.1:{port}", run_fn=fake_simulate, progress=False,
                  connect_timeout="2s")
    assert not any(is_complete(r.path) for r in grid.runs())


def test_combine_with_series_reads_the_run_stores_lazily(tmp_path):
    grid = load_grid(write_tiny_grid(tmp_path, grid=SMALL, seeds=2, steps=50))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False, combine=False)
    ds = combine(grid.output, series=("server_consumption", "online_users"))
    assert ds["server_consumption"].dims == ("users", "scheduler", "seed", "time", "resource")
    assert ds["server_consumption"].chunks is not None  # dask, not loaded
    r = grid.runs()[5]
    store = open_result(r.path)
    np.testing.assert_array_equal(ds["server_consumption"].sel(r.coords).values,
                                  store["server_consumption"].values.astype(np.float64))
    np.testing.assert_array_equal(ds["online_users"].sel(r.coords).values, store["online_users"].values)
    with pytest.raises(ValueError, match="unknown series 'request_latency'"):
        combine(grid.output, series=("request_latency",))


def test_resume_keeps_stores_that_recorded_the_legacy_digest_of_the_same_bundle(tmp_path):
    # Stores of 0.8.0 and before recorded the digest of the whole bundle, its `created`
    # stamp and provenance included (docs/experiments.md, "Resumable"): that digest of
    # this very bundle is the same model, so the store is kept. The legacy digest of the
    # bundle with another stamp is not this bundle's, and the store is refused.
    import dataclasses

    from gmm_volunteer.io.bundlefiles import load_bundle

    from gmm_volunteer.model.bundle import legacy_bundle_digest

    grid = load_grid(write_tiny_grid(tmp_path, grid=SMALL, seeds=1))
    runs = grid.runs()
    bundle = load_bundle(runs[0].config.model)

    def legacy_simulate(cfg, progress=False):
        rec = fake_simulate(cfg, progress)
        return dataclasses.replace(rec, attrs={**rec.attrs, "model_sha256": legacy_bundle_digest(bundle)})

    run_sweep(grid, serial=True, run_fn=legacy_simulate, progress=False)
    assert open_result(runs[0].path).attrs["model_sha256"] == legacy_bundle_digest(bundle)
    again = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    assert len(again.by_status("skipped")) == len(runs)
    restamped = bundle.model_copy(update={"created": "1999-01-01T00:00:00Z"})
    _set_store_attr(runs[1].path, "model_sha256", legacy_bundle_digest(restamped))
    with pytest.raises(StaleRunsError, match="another model bundle"):
        run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
