"""Checkpoints of issue "Hardening III" (docs/usage.md, "Checkpoints"): one digest over
config, state and objects checked before anything else is read; edits of the config in
``checkpoint.json`` refused; one resume at a time; the output path checked before a
checkpointed run starts. (Crafted checkpoints that would run code: issue "Hardening IV",
tests/test_hardening4_checkpoints.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine_support import make_config
from gmm_volunteer.cli.commands import main
from gmm_volunteer.io.results import is_complete
from gmm_volunteer.run import checkpoint as ck
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.policies.guard import NO_PLUGINS_ENV

from test_checkpoint import CASES


@pytest.fixture
def saved(synthetic_model, tmp_path, monkeypatch):
    """A run saved at step 200 (of 400) in out.zarr.checkpoint, and its config file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(NO_PLUGINS_ENV, "")  # undone after the test, also when --no-plugins sets it
    d = {"seed": 2, "steps": 400, "users": {"count": 60}, "server": {"capacity": 10},
         "scheduler": "uniform", "model": str(synthetic_model)}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(d))
    cfg = make_config(synthetic_model, users=60, steps=400, seed=2, scheduler="uniform")
    cfg.output.path = "out.zarr"
    folder = ck.checkpoint_dir(tmp_path / "out.zarr")
    Simulation(cfg).run(progress=False, until=200, checkpoint=ck.Checkpointer(folder, 200))
    return config, folder, ck.checkpoints(folder)[-1]


def _refused(argv, capsys, *needles) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _files(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("key, value", [("steps", 500), ("steps", 300), ("server.capacity", 20.0),
                                        ("users.count", 80), ("seed", 3)])
def test_an_edited_config_in_the_checkpoint_is_refused(saved, capsys, key, value):
    """0.7.0 resumed these with exit 0 into a store claiming the new values over the old
    trajectory (or aborted with heap corruption for steps)."""
    config, folder, step = saved
    man_path = step / ck.MANIFEST
    man = json.loads(man_path.read_text())
    data = yaml.safe_load(man["config"])
    *parents, last = key.split(".")
    node = data
    for p in parents:
        node = node[p]
    assert node[last] != value
    node[last] = value
    man["config"] = yaml.safe_dump(data)
    if key == "steps":
        man["steps"] = value
    man_path.write_text(json.dumps(man))
    kept = _files(folder)
    _refused(["run", "--resume", str(folder), "-q"], capsys, "checkpoint.json", "does not match its digest",
             "run it from the start")
    assert _files(folder) == kept and not (folder.parent / "out.zarr").exists()


@pytest.mark.parametrize("key, value", [("steps", 500), ("users.count", 80)])
def test_a_resealed_config_edit_of_the_sizes_is_refused(saved, capsys, key, value):
    """A manifest rewritten with a digest to match (a forgery the digest cannot see):
    the state's sizes still disagree with the config's users or steps, and resuming
    would have the kernels index past its arrays."""
    config, folder, step = saved
    man_path = step / ck.MANIFEST
    man = json.loads(man_path.read_text())
    data = yaml.safe_load(man["config"])
    if key == "steps":
        data["steps"] = man["steps"] = value
    else:
        data["users"]["count"] = value
    man["config"] = config_from_dict(data).to_yaml()  # as the writer words it
    man["sha256"] = ck.seal(man)
    man_path.write_text(json.dumps(man))
    kept = _files(folder)
    _refused(["run", "--resume", str(folder), "-q"], capsys, "not sized for the config's", key)
    assert _files(folder) == kept and not (folder.parent / "out.zarr").exists()


def test_the_digest_is_checked_before_anything_is_read(saved, capsys, monkeypatch):
    config, folder, step = saved
    man = json.loads((step / ck.MANIFEST).read_text())
    man["wall_time_s"] = 1.0 + man["wall_time_s"]  # any field, not only the config
    (step / ck.MANIFEST).write_text(json.dumps(man))
    monkeypatch.setattr(ck, "load_attributes", lambda *a: pytest.fail("read"))
    _refused(["run", "--resume", str(folder)], capsys, "does not match its digest")


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoints_of_the_shipped_policies_load_with_plugins_refused(synthetic_model, tmp_path, monkeypatch, case):
    """A checkpoint of the package's own policies resumes with plugins refused."""
    cfg = make_config(synthetic_model, users=60, steps=400, seed=3, **CASES[case])
    folder = tmp_path / "c"
    sim = Simulation(cfg)
    sim.run(progress=False, until=300, checkpoint=ck.Checkpointer(folder, 100))
    monkeypatch.setenv(NO_PLUGINS_ENV, "1")
    restored = ck.restore(folder, cfg)
    assert restored.t == 300
    assert type(restored.scheduler) is type(sim.scheduler) and type(restored.autoscaler) is type(sim.autoscaler)


def test_two_resumes_of_one_checkpoint_do_not_both_run(saved, capsys):
    config, folder, step = saved
    with ck.Hold(folder):  # as a resume in another process holds it (flock is per open file)
        _refused(["run", "--resume", str(folder), "-q"], capsys, "another gmmv process")
        _refused(["run", str(config), "-o", "out.zarr", "--checkpoint-every", "100", "--force", "-q"], capsys,
                 "another gmmv process")
        assert ck.checkpoints(folder) == [step]
    assert main(["run", "--resume", str(folder), "-q"]) == 0  # released: the resume goes on
    assert is_complete(folder.parent / "out.zarr") and not folder.exists()


def test_the_lock_leaves_no_folder_behind(tmp_path):
    folder = tmp_path / "x.zarr.checkpoint"
    with ck.Hold(folder):
        assert folder.is_dir()
    assert not folder.exists()


@pytest.mark.parametrize("out", ["/proc/x.zarr", "/proc/self/x.zarr"])
def test_checkpoint_every_checks_the_output_first(saved, capsys, monkeypatch, out):
    """0.7.0 simulated up to the first checkpoint, then ended in a traceback."""
    config, folder, step = saved
    monkeypatch.setattr(Simulation, "run", lambda *a, **k: pytest.fail("simulated"))
    _refused(["run", str(config), "-o", out, "--checkpoint-every", "100", "-q"], capsys, out)


@pytest.mark.parametrize("where", ["/", "/proc", "nul\0byte"])
def test_resume_of_a_path_that_is_no_checkpoint_is_exit_2(tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    _refused(["run", "--resume", where], capsys, "--resume")
