"""Classes 7 and 8 of issue "Hardening II": --force replaces only its own kind of file,
leftovers of killed runs are cleaned when provably ours, and the scheduling environment
validates its options."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.io.results import check_output_path, OutputPathError, write_result

from helpers import fake_simulate, write_tiny_grid


def _exit(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_class7_tune_force_never_replaces_a_config(tmp_path, capsys, synthetic_model, monkeypatch):
    import gmm_volunteer.optimisation.search as search

    monkeypatch.setattr(search, "tune", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    cfg = tmp_path / "cfg.yaml"
    text = yaml.safe_dump({"steps": 400, "users": {"count": 10}, "server": {"capacity": 10}, "model": str(synthetic_model),
                           "scheduler": "weighted"})
    cfg.write_text(text)
    code, err = _exit(["tune", str(cfg), "--method", "random", "-o", str(cfg), "--force"], capsys)
    assert code == 2 and "was not written by gmmv tune" in err, err
    assert cfg.read_text() == text


def test_class7_run_force_never_replaces_a_combined_dataset(tmp_path, capsys):
    from gmm_volunteer.experiments.sweep import load_grid, run_sweep

    grid = load_grid(write_tiny_grid(tmp_path, grid={"server.capacity": [10]}, seeds=[1]))
    report = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    combined = report.combined
    assert combined is not None and combined.exists()
    before = sorted(p.relative_to(combined) for p in combined.rglob("*"))
    with pytest.raises(OutputPathError, match="combined dataset"):
        check_output_path(combined, force=True)
    assert sorted(p.relative_to(combined) for p in combined.rglob("*")) == before


def test_class7_leftovers_of_a_killed_writer_are_cleaned_only_when_ours(tmp_path):
    from gmm_volunteer.experiments.sweep import load_grid

    grid = load_grid(write_tiny_grid(tmp_path, grid={"server.capacity": [10]}, seeds=[1]))
    (run,) = grid.runs()
    path = tmp_path / "r.zarr"
    # a pid that is certainly gone: beyond the kernel's pid range
    dead = 2**22 + 12345
    partial = write_result(fake_simulate(run.config), tmp_path / "x.zarr")
    os.rename(partial, tmp_path / f"r.zarr.tmp-{dead}")
    foreign = tmp_path / f"r.zarr.old-{dead + 1}"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    write_result(fake_simulate(run.config), path)
    assert not (tmp_path / f"r.zarr.tmp-{dead}").exists()  # a store gmmv wrote: removed
    assert (foreign / "notes.txt").read_text() == "mine"  # not a store: left alone


def test_class7_leftovers_of_a_killed_bundle_writer_are_cleaned_only_when_ours(tmp_path):
    """A bundle write killed before its rename leaves ``.<name>.tmp-<pid>``; one killed
    between moving the old bundle aside and renaming the new one leaves ``.<name>.old-<pid>``
    and no bundle. The next write at that path cleans the first, the second is restored
    or removed, and a folder of the same name that no bundle writer made is left alone."""
    from gmm_volunteer.io.bundlefiles import clean_bundle_leftovers, load_bundle, write_bundle
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    dead = 2**22 + 12345  # beyond the kernel's pid range: certainly gone
    data = synthetic_bundle()
    dest = tmp_path / "b"
    write_bundle(data, tmp_path / "src")
    os.rename(tmp_path / "src", tmp_path / f".b.old-{dead}")  # a replaced bundle, dest gone
    (tmp_path / f".b.tmp-{dead + 1}").mkdir()  # killed right after creating its folder
    foreign = tmp_path / f".b.tmp-{dead + 2}"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    notes = clean_bundle_leftovers(dest)
    assert load_bundle(dest) is not None and any("restored" in n for n in notes)
    assert not (tmp_path / f".b.old-{dead}").exists() and not (tmp_path / f".b.tmp-{dead + 1}").exists()
    assert (foreign / "notes.txt").read_text() == "mine"
    # an .old- beside a present bundle is removed by the next write
    write_bundle(data, tmp_path / "src2")
    os.rename(tmp_path / "src2", tmp_path / f".b.old-{dead + 3}")
    write_bundle(data, dest)
    assert not (tmp_path / f".b.old-{dead + 3}").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["b", foreign.name])


@pytest.mark.parametrize("option, value", [
    ("latency_scale", float("nan")), ("capacity_cost", float("nan")), ("capacity_cost", float("inf")),
    ("reward_scale", float("nan")), ("latency_cap", float("inf")), ("weight_bound", -1.0),
])
def test_class8_environment_refuses_non_finite_options(synthetic_model, option, value):
    pytest.importorskip("gymnasium")
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.optimisation.env import SchedulingEnv

    cfg = config_from_dict({"steps": 400, "model": str(synthetic_model), "scheduler": "weighted", "server": {"capacity": 10},
                            "users": {"count": 10}})
    with pytest.raises(ValueError, match=option):
        SchedulingEnv(cfg, k=10, warmup=10, **{option: value})
