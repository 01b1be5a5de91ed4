"""Classes 3, 4 and 5 of issue "Hardening II": outputs checked before the work, bad
paths and out-of-range numbers refused with exit 2 (no traceback), YAML alias bombs
refused at once.

Each writing command is pointed at a place it cannot write (/proc refuses new files,
even to root) with its work replaced by a function that fails the test if called.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.experiments.sweep import GridError, load_grid

from helpers import write_tiny_grid

REPO = Path(__file__).resolve().parent.parent
LONG = "x" * 300


def _never(*args, **kwargs):
    raise AssertionError("the work started before the output was checked")


@pytest.fixture
def cfg(tmp_path, synthetic_model):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"steps": 50, "users": {"count": 10}, "server": {"capacity": 10}, "model": str(synthetic_model)}))
    return path


def _files(root: Path) -> list:
    return sorted(p for p in root.rglob("*"))


def _exit(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


@pytest.mark.parametrize("command", ["run", "tune", "capacity --vector", "report", "fit"])
def test_class3_unwritable_output_is_refused_before_the_work(tmp_path, cfg, capsys, monkeypatch, command):
    import gmm_volunteer.experiments.capacity_vector as cv
    import gmm_volunteer.experiments.report as report
    import gmm_volunteer.fitting.fit as fit
    import gmm_volunteer.run.engine as engine
    import gmm_volunteer.optimisation.search as search

    for module, name in ((engine, "simulate"), (search, "tune"), (cv, "simulation_evaluator"),
                         (report, "write_report"), (fit, "fit_bundle")):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, _never)
    argv = {
        "run": ["run", str(cfg), "-o", "/proc/gmmv-x.zarr"],
        "tune": ["tune", str(cfg), "--method", "random", "-o", "/proc/gmmv-x.json"],
        "capacity --vector": ["capacity", str(cfg), "--p99", "10s", "--vector", "-o", "/proc/gmmv-x"],
        "report": ["report", str(tmp_path / "nosweep"), "-o", "/proc/gmmv-x.html"],
        "fit": ["fit", str(REPO / "traces"), "-o", "/proc/gmmv-bundle"],
    }[command]
    before = _files(tmp_path)
    code, err = _exit(argv, capsys)
    assert code == 2, err
    assert "/proc" in err and "cannot write" in err, err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("output, message", [
    (LONG + ".zarr", "a path component of 305 bytes"),
    ("/", "the file system root"),
    (".", "the current directory"),
])
def test_class4_bad_output_paths_are_usage_errors(tmp_path, cfg, capsys, monkeypatch, output, message):
    import gmm_volunteer.run.engine as engine

    monkeypatch.setattr(engine, "simulate", _never)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    code, err = _exit(["run", str(cfg), "-o", output], capsys)
    assert code == 2 and message in err, err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("output", ["/", ".", ""])
def test_class4_sweep_output_root_or_here_is_refused(tmp_path, capsys, monkeypatch, output):
    grid = write_tiny_grid(tmp_path, grid={"server.capacity": [10]}, seeds=[1])
    spec = yaml.safe_load(grid.read_text())
    spec["output"] = output
    grid.write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    code, err = _exit(["sweep", str(grid), "--serial", "-q"], capsys)
    assert code == 2 and ("root" in err or "current directory" in err), err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("argv", [
    ["run", "{cfg}", "--set", f"model={LONG}"],
    ["summarize", f"{LONG}.zarr"],
    ["report", LONG],
])
def test_class4_long_path_components_are_usage_errors(cfg, capsys, argv):
    code, err = _exit([a.replace("{cfg}", str(cfg)) for a in argv], capsys)
    assert code == 2, err


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed"),
    (["--bound", "1e308"], "--bound"),
    (["--train-seeds", "0-1000000000"], "--train-seeds"),
])
def test_class4_tune_numbers_out_of_range(cfg, capsys, argv, message):
    code, err = _exit(["tune", str(cfg), "--method", "random", *argv], capsys)
    assert code == 2 and message in err, err


def test_class4_grid_over_a_mapping_and_huge_seed_counts_are_refused(tmp_path):
    path = write_tiny_grid(tmp_path, grid={"users": [{"count": 100}, {"count": 200}]})
    with pytest.raises(GridError, match="grid.users: values must be numbers"):
        load_grid(path)
    path = write_tiny_grid(tmp_path, grid={"server.capacity": [10]}, seeds=10**9)
    with pytest.raises(GridError, match="seeds: a count must be between 1 and 100,000"):
        load_grid(path)


BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB  # 9^9 = 387 million values in 378 bytes


def test_class5_alias_bomb_config_fails_fast(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    t0 = time.monotonic()
    code, err = _exit(["run", str(path)], capsys)
    assert code == 2 and "aliases" in err, err
    assert time.monotonic() - t0 < 10  # expanding it would take minutes and gigabytes


def test_class5_alias_bomb_under_a_grid_set_fails_fast(tmp_path):
    path = write_tiny_grid(tmp_path, grid={"server.capacity": [10]})
    text = path.read_text() + "set:\n  " + BOMB.replace("\n", "\n  ").rstrip() + "\n"
    path.write_text(text)
    with pytest.raises(GridError, match="aliases"):
        load_grid(path)


@pytest.mark.parametrize("text", ["[1, 2]", "not json {", '{"dims": 3}'])
def test_class4_bad_sweep_manifest_is_a_usage_error(tmp_path, capsys, text):
    (tmp_path / "sweep.json").write_text(text)
    code, err = _exit(["report", str(tmp_path), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 2 and "sweep.json" in err, err
    assert not (tmp_path / "r.html").exists()


def test_class4_summarize_on_a_combined_dataset_is_a_usage_error(tmp_path, capsys):
    from gmm_volunteer.experiments.sweep import run_sweep

    from helpers import fake_simulate

    grid = load_grid(write_tiny_grid(tmp_path, grid={"server.capacity": [10]}, seeds=[1]))
    report = run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    code, err = _exit(["summarize", str(report.combined)], capsys)
    assert code == 2 and "combined dataset" in err, err


def test_class4_report_on_a_grid_over_the_scheduler_alone(tmp_path):
    """A sweep whose only grid dimension is the scheduler has 0-dimensional paired
    differences; the report shows them as one row per comparison."""
    from gmm_volunteer.experiments.combine import open_combined
    from gmm_volunteer.experiments.report import paired_table, write_report
    from gmm_volunteer.experiments.sweep import run_sweep

    from helpers import fake_simulate

    grid = load_grid(write_tiny_grid(tmp_path, grid={"scheduler": ["centralized", "uniform"]}, seeds=3))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    ds = open_combined(grid.output)
    table = paired_table(ds)
    assert list(table["comparison"]) == ["uniform - centralized"] and int(table["seeds"].iloc[0]) == 3
    out = write_report(ds, tmp_path / "r.html")
    assert "uniform - centralized" in Path(out).read_text()
