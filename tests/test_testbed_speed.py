"""A testbed run's machine speed (gmm_volunteer.testbed.speed; docs/model.md D30): read from
the cold measurements printed before the run, over the reference bundle's work, and the
comparison predicts each run at its speed (`testbed.compare --speed-reference`). No root
needed: the "testbed" runs here are the simulator's own, stored as a testbed store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gmm_volunteer.testbed import speed
from gmm_volunteer.testbed.batches import bundle_work

CONFIG = Path("configs/testbed/light-uniform.yaml")
REFERENCE = Path("gmm_volunteer/bundles/default")  # the config's model


def _sidecar(path: Path, factors: dict[tuple[str, int], float], extra: str = "") -> Path:
    work = bundle_work(REFERENCE)
    lines = ["# cold, before the run"] + [f"{n}\t{k}\t{f * work[n][k]:.6f}" for (n, k), f in factors.items()]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def test_speed_is_the_geometric_mean_of_the_measured_over_the_reference(tmp_path):
    """Two entries at 0.8 and 0.9 times the reference's work give sqrt(0.72); a type the
    reference does not have is left out; comments and blank lines are skipped."""
    path = _sidecar(tmp_path / "a.speed.txt", {("ppocr_det", 1): 0.8, ("resnet50", 2): 0.9},
                    "\nno_such_type\t1\t5.0  # left out\n")
    got = speed.speed(path, bundle_work(REFERENCE))
    assert got == pytest.approx(math.sqrt(0.8 * 0.9), rel=1e-5)
    assert speed.work_scale([got, got]) == f"execution.work_scale={math.sqrt(0.72):.4f}"


@pytest.mark.parametrize("text, message", [
    ("ppocr_det\t1\n", ":1: expected 'type batch-size CPU-s'"),
    ("ppocr_det\tone\t0.2\n", ":1: expected 'type batch-size CPU-s'"),
    ("# c\nppocr_det\t0\t0.2\n", ":2: expected 'type batch-size CPU-s' with a size >= 1"),
    ("ppocr_det\t1\t-0.2\n", "a CPU-s > 0"),
    ("no_such_type\t1\t0.2\n", "no measurement of a type the reference bundle has"),
])
def test_a_bad_speed_file_is_named_with_its_line(tmp_path, text, message):
    path = tmp_path / "b.speed.txt"
    path.write_text(text)
    with pytest.raises(speed.SpeedError, match="b.speed.txt") as exc:
        speed.speed(path, bundle_work(REFERENCE))
    assert message in str(exc.value)


def _keyed_store(results: Path, seed: int, overrides, account: dict | None = None) -> Path:
    from gmm_volunteer.io.results import write_result
    from gmm_volunteer.testbed.compare import _simulate

    (ds,) = _simulate(CONFIG, [seed], overrides)
    ds = ds.copy()
    ds.attrs["testbed_config"] = json.dumps({"draws": "keyed"})
    ds.attrs["testbed"] = json.dumps(account or {})
    path = results / f"{CONFIG.stem}-seed{seed}.zarr"
    write_result(ds, path)
    return path


def test_each_run_is_predicted_at_its_machine_speed(tmp_path):
    """Runs made at work_scale 0.5 and 2 (seeds 3 and 4), each with a speed file saying so:
    paired at their speeds every measure is the simulator's own run (+0 % ± 0 % paired,
    within target); paired at the reference's speed the same runs are not."""
    from gmm_volunteer.testbed.compare import _headline_row, _load, _pairs, _stats, _testbed_runs

    base = ["steps=90"]
    for seed, s in ((3, 0.5), (4, 2.0)):
        store = _keyed_store(tmp_path, seed, [*base, f"execution.work_scale={s}"])
        _sidecar(speed.sidecar(store), {("ppocr_cls", 1): s, ("mobilenet_v2", 2): s})
    runs, _, stores = _testbed_runs(tmp_path, CONFIG)
    speeds = speed.store_speeds(stores, bundle_work(REFERENCE))
    assert speeds == pytest.approx([0.5, 2.0], rel=1e-4)
    tb = _stats(runs)

    def row(rs):
        return _headline_row(CONFIG.stem, "", tb, tb, [], _load(runs, rs), _pairs(CONFIG, runs, base, rs))

    at_speed, unscaled = row(speeds), row(None)
    assert "speed 0.50-2.00 of the reference" in at_speed[3]
    assert all("(+0 % ± 0 % paired, within target" in c for c in at_speed[4:7]), at_speed
    assert not all("(+0 % ± 0 % paired" in c for c in unscaled[4:7]), unscaled


def test_compare_names_a_store_without_a_speed_file_and_exits_2(tmp_path, capsys):
    from gmm_volunteer.testbed.compare import main

    _keyed_store(tmp_path, 3, ["steps=90"])
    code = main([str(tmp_path), str(CONFIG), "--sim-seeds", "1", "--speed-reference", str(REFERENCE)])
    err = capsys.readouterr().err
    assert code == 2
    assert "light-uniform-seed3.speed.txt: no speed file" in err


def test_batches_speed_reference_names_a_store_without_its_speed_file(tmp_path, capsys):
    """`testbed.batches --speed-reference`: a store with batches but no speed file beside it
    exits 2 naming the file, and no bundle is written; with the file the fit is written."""
    from gmm_volunteer.testbed.batches import main

    store = _keyed_store(tmp_path, 3, ["steps=30"], {"batches": {"server": [["ppocr_cls", 1, 0.003, 0.003, 0.01]],
                                                               "devices": []}})
    argv = [str(store), "--model", str(REFERENCE), "--speed-reference", str(REFERENCE), "--fit-server"]
    assert main([*argv, str(tmp_path / "out")]) == 2
    assert "light-uniform-seed3.speed.txt: no speed file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    _sidecar(speed.sidecar(store), {("ppocr_cls", 1): 0.5})
    assert main([*argv, str(tmp_path / "out2")]) == 0
    assert (tmp_path / "out2" / "bundle.yaml").exists()


def test_measure_runs_the_cold_calibration_and_names_it_in_the_file(tmp_path):
    """`gmmv testbed --speed` takes what `calibrate --cold` prints, with the node's heap
    setting, under a comment naming the command; a failed or empty measurement is a
    SpeedError, not a speed file."""
    from types import SimpleNamespace

    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        return SimpleNamespace(returncode=0, stderr="ppocr_det\t1\t0.2411\nresnet50\t5\t0.45\n", stdout="")

    text = speed.measure(REFERENCE, 4096, run=run)
    cmd = seen[0]
    assert cmd[1:4] == ["-m", "gmm_volunteer.testbed.calibrate", str(REFERENCE)]
    assert cmd[-3:] == ["--cold", "--mmap-threshold-kb", "4096"]
    assert not Path(cmd[4]).parent.exists()  # the calibrated bundle went to a removed directory
    assert text.startswith("# python -m gmm_volunteer.testbed.calibrate")
    assert speed.parse(text, "x") == [("ppocr_det", 1, 0.2411), ("resnet50", 5, 0.45)]
    with pytest.raises(speed.SpeedError, match="exit 1"):
        speed.measure(REFERENCE, 0, run=lambda cmd, **kw: SimpleNamespace(returncode=1, stderr="boom", stdout=""))
    with pytest.raises(speed.SpeedError, match="no measurement"):
        speed.measure(REFERENCE, 0, run=lambda cmd, **kw: SimpleNamespace(returncode=0, stderr="", stdout=""))


def test_testbed_speed_refuses_an_existing_speed_file_before_anything_runs(tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    side = tmp_path / "run.speed.txt"
    side.write_text("mine\n")
    assert main(["testbed", str(CONFIG), "--speed", "-o", str(tmp_path / "run.zarr")]) == 2
    assert f"{side} exists" in capsys.readouterr().err
    assert side.read_text() == "mine\n" and not (tmp_path / "run.zarr").exists()
