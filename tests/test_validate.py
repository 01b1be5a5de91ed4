"""`gmmv validate`: what `gmmv run` checks before its first step, and its estimates,
without running or writing anything (docs/usage.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gmm_volunteer.cli.commands import main
from gmm_volunteer.run.config import load_config
from gmm_volunteer.model.timing import estimate_seconds

ROOT = Path(__file__).resolve().parents[1]
BASE = "seed: 1\nsteps: 600\nusers: {count: 200, capacity: 1}\nserver: {capacity: 5}\n"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(folder: Path, text: str, name: str = "run.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_valid_config_is_reported_with_its_estimates_and_nothing_runs(folder, capsys, monkeypatch):
    import gmm_volunteer.run.engine as engine

    monkeypatch.setattr(engine.Simulation, "__init__", lambda *a, **k: pytest.fail("validate simulated"))
    cfg = write(folder, BASE + "output: {path: out/run.zarr}\n")
    assert main(["validate", str(cfg), "--set", "users.count=300"]) == 0
    out = capsys.readouterr().out
    assert f"{cfg}: valid" in out and "300 users, 600 steps" in out
    assert "memory: about" in out and "run time:" in out and "compilation:" in out
    assert "out/run.zarr" in out
    assert sorted(p.name for p in folder.iterdir()) == ["run.yaml"]  # nothing written


@pytest.mark.parametrize("override, key", [("users.cuont=3", "users.cuont"),
                                           ("scheduler=unifrom", "scheduler"),
                                           ("scheduler_options.bogus=1", "scheduler_options.bogus")])
def test_a_bad_config_is_exit_2_naming_the_file_and_key(folder, capsys, override, key):
    cfg = write(folder, BASE)
    assert main(["validate", str(cfg), "--set", override]) == 2
    err = capsys.readouterr().err
    # a bad override is blamed on the override, the file it applies to and the key
    assert f"gmmv validate: error: --set {override} on {cfg}: {key}" in err


def test_a_run_too_big_for_memory_is_refused_as_gmmv_run_refuses_it(folder, capsys):
    cfg = write(folder, BASE)
    assert main(["validate", str(cfg), "--set", "users.count=100000000", "--set", "steps=1000000"]) == 2
    assert "users.count: a run of 100,000,000 users over 1,000,000 steps needs about" in capsys.readouterr().err


def test_an_existing_store_needs_force_as_for_gmmv_run(folder, capsys):
    cfg = write(folder, BASE + "output: {path: taken.zarr}\n")
    (folder / "taken.zarr").mkdir()
    (folder / "taken.zarr" / "notes.txt").write_text("not a store of ours")
    assert main(["validate", str(cfg)]) == 2
    assert "taken.zarr" in capsys.readouterr().err


def test_the_run_time_estimate_follows_users_steps_and_scheduler(folder):
    cfg = load_config(write(folder, BASE))
    one, note = estimate_seconds(cfg)
    more = estimate_seconds(cfg.model_copy(update={"steps": 6000}))[0]
    assert one > 0 and more == pytest.approx(10 * one)
    central = estimate_seconds(cfg.model_copy(update={"scheduler": "centralized"}))[0]
    assert central < one  # centralized is the cheapest per online user in the benchmarks
    assert "benchmarks" in note


@pytest.fixture
def clean_path(monkeypatch):
    """sys.path and PYTHONPATH restored after the test (the config's folder joins both)."""
    import sys

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_plugin_beside_its_config_is_found_without_pythonpath(folder, capsys, clean_path):
    import os

    shutil.copy(ROOT / "examples" / "least_loaded" / "least_loaded.py", folder / "beside_config.py")
    cfg = write(folder, BASE + "scheduler: beside_config:LeastLoaded\n")
    assert main(["validate", str(cfg)]) == 0, capsys.readouterr().err
    assert str(folder) in os.environ["PYTHONPATH"].split(os.pathsep)  # for worker processes


def test_a_plugin_found_nowhere_names_pythonpath_and_the_folder_searched(folder, capsys, clean_path):
    (folder / "sub").mkdir()
    shutil.copy(ROOT / "examples" / "least_loaded" / "least_loaded.py", folder / "not_beside.py")
    cfg = write(folder / "sub", BASE + "scheduler: not_beside:LeastLoaded\n")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}: scheduler: cannot import 'not_beside:LeastLoaded'" in err
    assert "PYTHONPATH: unset" in err and f"config's folder {folder / 'sub'}" in err
