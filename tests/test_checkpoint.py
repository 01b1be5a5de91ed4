"""Checkpoint and resume of one run (gmm_volunteer.run.checkpoint; docs/usage.md,
"Checkpoints"): a run saved part way and continued in a fresh process, or killed with
SIGKILL between checkpoints and resumed, writes the store an uninterrupted run writes
(every variable and attribute equal, the wall time aside); damaged or mismatched
checkpoints are refused with exit 2; a killed sweep continues its run from the last
checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine_support import make_config
from gmm_volunteer.cli.commands import main
from gmm_volunteer.io.results import is_complete, open_result, write_result
from gmm_volunteer.run import checkpoint as ck
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.policies.monitor import F_LAT

# Reactive autoscaler on the server's CPU utilization with a low target: it orders units
# within the first minutes and keeps changing them (orders, cancellations, scale-in).
REACTIVE = {"autoscaler": "reactive",
            "autoscaler_options": {"metric": "utilization", "target": 0.05, "period": 10, "cooldown": 60,
                                   "provisioning_delay": 20, "max_units": 40, "initial_units": 2,
                                   "monitor": {"period": 5, "lag": 5, "window": 60}}}
CASES = {
    "centralized": {"scheduler": "centralized"},
    "uniform": {"scheduler": "uniform"},
    "affinity": {"scheduler": "affinity"},
    "asrb-reactive": {"scheduler": "asrb", **REACTIVE},
    "queue_aware": {"scheduler": "queue_aware"},
}
STEPS, EVERY, STOP = 7000, 1000, 3000  # checkpoints at 1000, 2000, 3000; resumed from 3000


def assert_same_store(a: Path, b: Path) -> None:
    """Every variable, coordinate and attribute of two stores equal (NaN equal to NaN),
    the wall time aside."""
    x, y = open_result(a).load(), open_result(b).load()
    assert sorted(x.variables) == sorted(y.variables)
    for name in x.variables:
        u, v = x[name], y[name]
        where = f"{a.name}: {name}"
        assert u.dims == v.dims and u.dtype == v.dtype, where
        if u.dtype.kind in "fc":
            np.testing.assert_array_equal(u.values, v.values, err_msg=where)  # NaN == NaN here
        else:
            assert np.array_equal(u.values, v.values), where
        # numeric attributes may be arrays (CF flag_values of the variable's type)
        assert u.attrs.keys() == v.attrs.keys() and all(
            np.array_equal(u.attrs[k], v.attrs[k]) for k in u.attrs), where
    ax, ay = dict(x.attrs), dict(y.attrs)
    ax.pop("wall_time_s"), ay.pop("wall_time_s")
    assert ax == ay


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=1800)


def _gmmv(*argv, cwd: Path, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "gmm_volunteer.cli", *map(str, argv)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _uninterrupted(cfg, path: Path) -> Path:
    write_result(Simulation(cfg).run(progress=False), path)
    return path


def test_resumed_in_a_fresh_process_is_the_uninterrupted_run(synthetic_model, tmp_path):
    """Part of each run in this process, saved every EVERY steps; the rest resumed from
    the last checkpoint by `gmmv run --resume` in another process."""
    folders = {}
    for name, extra in CASES.items():
        cfg = make_config(synthetic_model, users=300, steps=STEPS, seed=5, **extra)
        cfg.output.path = str(tmp_path / f"{name}.zarr")
        _uninterrupted(cfg, tmp_path / f"{name}-whole.zarr")
        sim = Simulation(cfg)
        log_capacity = sim.arrays.lg_user.shape[0]
        folders[name] = folder = ck.checkpoint_dir(cfg.output.path)
        sim.run(progress=False, until=STOP, checkpoint=ck.Checkpointer(folder, EVERY))
        assert sim.t == STOP
        assert [p.name for p in ck.checkpoints(folder)] == [f"step-{STOP:012d}"]  # older ones removed
        # The request log grew before the checkpoint (it holds grown arrays) and grows
        # again after it (the resumed run grows restored arrays).
        grown = sim.arrays.lg_user.shape[0]
        assert grown > log_capacity, name
        if name == "asrb-reactive":
            assert len(sim.control.actions) > 0  # the control plane acted before the checkpoint
            assert np.isfinite(sim.scheduler._R.mf[:, F_LAT]).any()  # the router learned latencies
            actions_before = len(sim.control.actions)
        sim.run(progress=False)
        assert sim.arrays.lg_user.shape[0] > grown, name
        assert [p.name for p in ck.checkpoints(folder)] == [f"step-{STOP:012d}"]  # no checkpoint without one
    script = "; ".join(f"assert main(['run', '--resume', {str(f)!r}, '-q']) == 0" for f in folders.values())
    proc = _python(f"from gmm_volunteer.cli.commands import main; {script}", tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name, folder in folders.items():
        assert not folder.exists()  # the store is complete: its checkpoints are gone
        assert_same_store(tmp_path / f"{name}.zarr", tmp_path / f"{name}-whole.zarr")
    ds = open_result(tmp_path / "asrb-reactive.zarr")
    assert ds.sizes["scaling_action"] > actions_before  # and it went on acting after the resume


def _write_config(model: Path, path: Path, users: int = 100, steps: int = 1200, **extra) -> Path:
    d = {"seed": 2, "steps": steps, "users": {"count": users}, "server": {"capacity": 10},
         "scheduler": "uniform", "model": str(model), **extra}
    path.write_text(yaml.safe_dump(d))
    return path


def _kill_after_first_checkpoint(proc: subprocess.Popen, folder: Path, timeout: float = 1800.0) -> None:
    """SIGKILL `proc` as soon as `folder` holds a complete checkpoint."""
    t0 = time.monotonic()
    while not ck.checkpoints(folder):
        if proc.poll() is not None:
            pytest.fail(f"exited ({proc.returncode}) before its first checkpoint: {proc.stderr.read()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("no checkpoint appeared")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"


# A run of a few seconds: the first checkpoint comes after a tenth of it, so the kill
# lands seconds before the run could end.
LONG = {"users": 1000, "steps": 100_000}
LONG_EVERY = 10_000


def test_killed_run_resumes_to_the_uninterrupted_store(synthetic_model, tmp_path):
    config = _write_config(synthetic_model, tmp_path / "run.yaml", **LONG)
    out = tmp_path / "out.zarr"
    folder = ck.checkpoint_dir(out)
    proc = _gmmv("run", config, "-o", out, "--checkpoint-every", LONG_EVERY, "-q", cwd=tmp_path)
    _kill_after_first_checkpoint(proc, folder)
    assert not out.exists()
    saved = ck.checkpoints(folder)
    step = int(ck.read_manifest(saved[-1])["step"])
    assert 0 < step < LONG["steps"]
    # A run started again without --resume would throw the checkpoint away: refused.
    again = _gmmv("run", config, "-o", out, "--checkpoint-every", LONG_EVERY, "-q", cwd=tmp_path)
    assert again.wait() == 2 and "gmmv run --resume" in again.stderr.read()
    resumed = _gmmv("run", "--resume", folder, cwd=tmp_path)
    _, err = resumed.communicate()
    assert resumed.returncode == 0, err
    assert f"from {saved[-1]} (step {step:,} of 100,000)" in err
    assert is_complete(out) and not folder.exists()
    cfg = make_config(synthetic_model, users=LONG["users"], steps=LONG["steps"], seed=2, scheduler="uniform")
    cfg.output.path = str(out)
    assert_same_store(out, _uninterrupted(cfg, tmp_path / "whole.zarr"))


def test_run_with_checkpoints_writes_the_store_of_a_run_without(synthetic_model, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = _write_config(synthetic_model, tmp_path / "run.yaml", steps=1200, **REACTIVE)
    assert main(["run", str(config), "-o", "plain.zarr", "-q"]) == 0
    assert main(["run", str(config), "-o", "saved.zarr", "-q", "--checkpoint-every", "250"]) == 0
    assert not ck.checkpoint_dir(tmp_path / "saved.zarr").exists()
    x, y = open_result(tmp_path / "plain.zarr").load(), open_result(tmp_path / "saved.zarr").load()
    assert x.sizes["scaling_action"] > 0
    for name in x.data_vars:
        np.testing.assert_array_equal(x[name].values, y[name].values, err_msg=name)
    assert main(["run", str(config), "-o", "bad.zarr", "--checkpoint-every", "0"]) == 2
    assert "--checkpoint-every: must be a number of steps >= 1" in capsys.readouterr().err


@pytest.fixture
def saved(synthetic_model, tmp_path, monkeypatch):
    """A run of run.yaml saved at step 300 (of 600) in out.zarr.checkpoint."""
    monkeypatch.chdir(tmp_path)
    config = _write_config(synthetic_model, tmp_path / "run.yaml", users=100, steps=600)
    cfg = make_config(synthetic_model, users=100, steps=600, seed=2, scheduler="uniform")
    cfg.output.path = "out.zarr"
    folder = ck.checkpoint_dir(tmp_path / "out.zarr")
    Simulation(cfg).run(progress=False, until=300, checkpoint=ck.Checkpointer(folder, 300))
    return config, folder, ck.checkpoints(folder)[-1]


def _refused(argv, capsys, *needles) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err


def _files(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_damaged_checkpoints_are_refused(saved, capsys):
    config, folder, step = saved
    kept = _files(folder)
    log = step / "state-lg_end.npy"  # the request log's end steps, written as a file of its own
    assert log in kept
    data = bytearray(log.read_bytes())
    data[-8] ^= 0xFF  # one byte of it
    log.write_bytes(bytes(data))
    _refused(["run", "--resume", str(folder)], capsys, "state-lg_end.npy", "does not match", "damaged")
    log.write_bytes(kept[log][:200])  # truncated
    _refused(["run", "--resume", str(folder)], capsys, "state-lg_end.npy", "bytes where", "damaged")
    log.unlink()
    _refused(["run", "--resume", str(folder)], capsys, "state-lg_end.npy: missing")
    log.write_bytes(kept[log])
    pkl = step / ck.OBJECTS
    pkl.write_bytes(kept[pkl][:-1])
    _refused(["run", "--resume", str(folder)], capsys, ck.OBJECTS, "bytes where", "damaged")
    pkl.write_bytes(kept[pkl])
    (step / ck.MANIFEST).write_text("{not json")
    _refused(["run", "--resume", str(folder)], capsys, "checkpoint.json", "unreadable")
    (step / ck.MANIFEST).unlink()
    _refused(["run", "--resume", str(folder)], capsys, "no checkpoint.json")
    _refused(["run", "--resume", str(folder.parent / "nothing")], capsys, "no such checkpoint")
    (folder.parent / "out.zarr").mkdir()  # the store's path instead of its checkpoint folder's
    _refused(["run", "--resume", str(folder.parent / "out.zarr")], capsys,
             "holds no complete checkpoint", f"are in {folder}")
    (folder.parent / "out.zarr").rmdir()
    assert not (folder.parent / "out.zarr").exists()
    assert set(_files(folder)) == set(kept) - {step / ck.MANIFEST}  # nothing removed


def test_mismatched_checkpoints_are_refused(saved, capsys, monkeypatch, synthetic_model):
    config, folder, step = saved
    _refused(["run", str(config), "-o", "out.zarr", "--set", "users.count=120", "--resume", str(folder)],
             capsys, "made from another config", "users.count: 100 != 120")
    _refused(["run", str(config), "-o", "elsewhere.zarr", "--resume", str(folder)],
             capsys, "made from another config", "output.path")
    _refused(["run", "--resume", str(folder), "--set", "steps=700"], capsys, "--set needs CONFIG")
    manifest = json.loads((step / ck.MANIFEST).read_text())
    edited = dict(manifest, model_sha256="0" * 64)
    edited["sha256"] = ck.seal(edited)  # as if the bundle had changed since, not the manifest
    (step / ck.MANIFEST).write_text(json.dumps(edited))
    _refused(["run", "--resume", str(folder)], capsys, "made with another model bundle")
    (step / ck.MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setattr("gmm_volunteer.trajectory.TRAJECTORY_VERSION", "0.0.1")
    _refused(["run", "--resume", str(folder)], capsys, "trajectory version 0.6", "trajectory version 0.0.1",
             "would not continue the same trajectory")
    monkeypatch.undo()
    monkeypatch.chdir(config.parent)
    assert ck.checkpoints(folder) == [step]  # refusals remove nothing
    # The same checkpoint, with its own config or the same one given: accepted.
    assert main(["run", str(config), "-o", "out.zarr", "--resume", str(folder), "-q"]) == 0
    assert is_complete(config.parent / "out.zarr") and not folder.exists()


def test_a_checkpoint_with_the_legacy_digest_of_its_bundle_resumes(saved):
    # Checkpoints of 0.8.0 made before issue 35 recorded the digest of the whole bundle
    # (stamp and provenance included): that digest of the same bundle is the same model.
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import bundle_digest, legacy_bundle_digest

    config, folder, step = saved
    manifest = json.loads((step / ck.MANIFEST).read_text())
    bundle = load_bundle(yaml.safe_load(config.read_text())["model"])
    assert manifest["model_sha256"] == bundle_digest(bundle) != legacy_bundle_digest(bundle)
    edited = dict(manifest, model_sha256=legacy_bundle_digest(bundle))
    edited["sha256"] = ck.seal(edited)
    (step / ck.MANIFEST).write_text(json.dumps(edited))
    assert main(["run", "--resume", str(folder), "-q"]) == 0
    assert is_complete(config.parent / "out.zarr")


def test_unfinished_and_foreign_entries(saved, capsys):
    config, folder, step = saved
    # An unfinished checkpoint of a writer that is gone (pid 2**22 + 1 exceeds pid_max
    # on Linux by default) is never taken for a complete one, and is cleaned up.
    dead = folder / f"step-{900:012d}.tmp-{2**22 + 1}"
    dead.mkdir()
    (dead / "objects.pkl").write_bytes(b"partial")
    assert ck.find(folder) == step
    stray = folder / "notes.txt"
    stray.write_text("mine")
    _refused(["run", str(config), "-o", "out.zarr", "--resume", str(folder)], capsys, "notes.txt", "did not write")
    stray.unlink()
    assert main(["run", str(config), "-o", "out.zarr", "--resume", str(folder), "-q"]) == 0
    assert not folder.exists()


def test_killed_sweep_continues_its_run_from_the_last_checkpoint(synthetic_model, tmp_path):
    from gmm_volunteer.experiments.sweep import load_grid, run_sweep

    _write_config(synthetic_model, tmp_path / "base.yaml", **LONG)
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(textwrap.dedent("""\
        base: base.yaml
        grid: {scheduler: [affinity]}
        seeds: [4]
        output: out
    """))
    grid = load_grid(grid_file, output=tmp_path / "out")
    [run] = grid.runs()
    folder = ck.checkpoint_dir(run.path)
    proc = _gmmv("sweep", grid_file, "--serial", "--checkpoint-every", LONG_EVERY, "--no-combine", "-q",
                 "-o", tmp_path / "out", cwd=tmp_path)
    _kill_after_first_checkpoint(proc, folder)
    step = int(ck.read_manifest(ck.checkpoints(folder)[-1])["step"])
    assert not is_complete(run.path)
    report = run_sweep(grid, serial=True, progress=False, combine=False, checkpoint_every=LONG_EVERY)
    [outcome] = report.outcomes
    assert outcome.status == "ok", outcome.traceback
    assert outcome.resumed_from == step > 0
    assert f"continued from its checkpoint at step {step:,}" in report.text()
    assert not folder.exists()
    assert_same_store(run.path, _uninterrupted(run.config, tmp_path / "whole.zarr"))


def test_sweep_starts_over_when_the_checkpoint_is_of_another_config(synthetic_model, tmp_path):
    from gmm_volunteer.experiments.sweep import execute_run

    cfg = make_config(synthetic_model, users=50, steps=400, seed=1)
    other = make_config(synthetic_model, users=50, steps=400, seed=2)
    store = tmp_path / "run.zarr"
    cfg.output.path = other.output.path = str(store)
    Simulation(other).run(progress=False, until=200, checkpoint=ck.Checkpointer(ck.checkpoint_dir(store), 100))
    outcome = execute_run("run", cfg, str(store), checkpoint_every=100)
    assert outcome.status == "ok" and outcome.resumed_from == 0
    assert "started over" in outcome.note and "seed: 2 != 1" in outcome.note
    assert_same_store(store, _uninterrupted(cfg, tmp_path / "whole.zarr"))


def test_a_checkpoint_takes_no_second_copy_of_the_state(synthetic_model, tmp_path):
    """Arrays are written one by one from the live state: the memory a checkpoint
    allocates on the way (traced by tracemalloc, which sees NumPy's buffers) is a small
    fraction of the state's size."""
    import tracemalloc

    cfg = make_config(synthetic_model, users=20_000, steps=200, seed=1)
    sim = Simulation(cfg)
    sim.run(progress=False, until=100)
    state_bytes = sum(getattr(sim.arrays, f).nbytes for f in sim.arrays._fields)
    assert state_bytes > 20e6
    tracemalloc.start()
    try:
        path = ck.write_checkpoint(sim, tmp_path / "c")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    written = sum(p.stat().st_size for p in path.iterdir())
    assert written > state_bytes  # everything is in the checkpoint ...
    assert peak < 0.05 * state_bytes, (peak, state_bytes)  # ... and was never copied whole
