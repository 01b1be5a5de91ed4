"""Checkpoints of issue "Hardening IV" (docs/usage.md, "Checkpoints"; docs/formats.md):
a checkpoint is plain data (format 3: JSON and ``.npy`` read without pickle), so a
crafted one, with every digest made to match, can at worst fail to load: the payloads
below would run ``touch MARKER`` through ``posix.system`` if anything in them were
called, and each resume must end with exit 2 naming the checkpoint, the marker absent
and the checkpoint untouched, with plugins allowed or refused. gmmv 0.8.8 read format 2
(a pickle) and ran such a payload with exit 0. Policies are saved through their
checkpoint hooks; a plugin without them is refused before its run starts."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine_support import make_config
from gmm_volunteer.cli.commands import main
from gmm_volunteer.run import checkpoint as ck
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.policies.guard import NO_PLUGINS_ENV
from gmm_volunteer.policies.uniform import Uniform
from test_hardening3_checkpoints import saved  # noqa: F401 (the fixture)


class _Evil:
    """Unpickled, it calls os.system (``posix.system`` in the pickle) with `command`."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _payload(marker: Path) -> bytes:
    data = pickle.dumps(_Evil(f"touch {marker}"), protocol=pickle.HIGHEST_PROTOCOL)
    assert b"posix" in data and b"system" in data
    return data


def _reseal(step: Path, man: dict, name: str, data: bytes, **meta) -> None:
    """Write `data` as file `name` of checkpoint `step`, with its size and digest and
    the manifest's own digest made to match (a forgery no digest can catch)."""
    (step / name).write_bytes(data)
    man["files"][name] = {**man["files"].get(name, {}), "sha256": hashlib.sha256(data).hexdigest(),
                          "bytes": len(data), **meta}
    man["sha256"] = ck.seal(man)
    (step / ck.MANIFEST).write_text(json.dumps(man))


def _objects(step: Path) -> dict:
    return json.loads((step / ck.OBJECTS).read_text())


def _craft(step: Path, how: str, marker: Path) -> None:
    man = json.loads((step / ck.MANIFEST).read_text())
    if how == "format-2":  # the layout gmmv 0.8.8 read: objects.pkl, a pickle
        del man["files"][ck.OBJECTS]
        (step / ck.OBJECTS).unlink()
        man["format_version"] = 2
        _reseal(step, man, "objects.pkl", _payload(marker))
    elif how == "pickle-as-objects":
        _reseal(step, man, ck.OBJECTS, _payload(marker))
    elif how == "object-array":  # an .npy file holding a pickled object array
        path = step / "state-lg_end.npy"
        with open(path, "wb") as f:
            np.save(f, np.array([_Evil(f"touch {marker}")], dtype=object), allow_pickle=True)
        _reseal(step, man, path.name, path.read_bytes(), dtype="|O", shape=[1])
    elif how == "huge-shape":  # an .npy header claiming 8 TB: refused before anything is allocated
        import io

        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)})
        _reseal(step, man, "state-lg_end.npy", header.getvalue() + bytes(64), shape=[10**12])
    elif how == "bit-generator":  # a class named by the data
        tree = _objects(step)
        tree["dict"]["scheduler"]["dict"]["rng"]["generator"]["bit_generator"] = "posix.system"
        _reseal(step, man, ck.OBJECTS, json.dumps(tree).encode())
    elif how == "policy-class":
        tree = _objects(step)
        tree["dict"]["scheduler"]["dict"]["class"] = "posix:system"
        _reseal(step, man, ck.OBJECTS, json.dumps(tree).encode())
    elif how == "object-dtype":
        tree = _objects(step)
        tree["dict"]["arrays"]["dict"]["n_on"] = {"array": {"dtype": "O", "shape": [1], "data": "AAAAAAAAAAA="}}
        _reseal(step, man, ck.OBJECTS, json.dumps(tree).encode())
    elif how == "unknown-tag":
        tree = _objects(step)
        tree["dict"]["script"] = {"object": {"module": "posix", "name": "system", "args": [f"touch {marker}"]}}
        _reseal(step, man, ck.OBJECTS, json.dumps(tree).encode())
    else:
        raise AssertionError(how)


CRAFTED = {"format-2": "checkpoint format 2", "pickle-as-objects": "not a checkpoint's state",
           "object-array": "state-lg_end.npy: its content does not match",
           "huge-shape": "state-lg_end.npy: its content does not match", "bit-generator": "'posix.system' is not one of",
           "policy-class": "saved from 'posix:system'", "object-dtype": "is not a number or bool dtype",
           "unknown-tag": "'object' is not a checkpoint value's type"}


@pytest.mark.parametrize("plugins", ["allowed", "--no-plugins", NO_PLUGINS_ENV])
@pytest.mark.parametrize("how", sorted(CRAFTED))
def test_a_crafted_checkpoint_calls_nothing_and_fails_to_load(saved, capsys, monkeypatch, how, plugins):  # noqa: F811
    config, folder, step = saved
    marker = folder.parent / "ran"
    _craft(step, how, marker)
    kept = {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    argv = ["run", "--resume", str(folder), "-q"]
    if plugins == "--no-plugins":
        argv = ["--no-plugins", *argv]
    elif plugins == NO_PLUGINS_ENV:
        monkeypatch.setenv(NO_PLUGINS_ENV, "1")
    code = main(argv)
    err = capsys.readouterr().err
    assert not marker.exists(), "the checkpoint ran a command"
    assert code == 2, err
    assert "Traceback" not in err and CRAFTED[how] in err and str(step) in err, err
    assert {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} == kept  # nothing removed
    assert not (folder.parent / "out.zarr").exists()


def test_format_2_is_refused_before_its_pickle_is_opened(saved, capsys, monkeypatch):  # noqa: F811
    config, folder, step = saved
    _craft(step, "format-2", folder.parent / "ran")
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    assert main(["run", "--resume", str(folder), "-q"]) == 2
    err = capsys.readouterr().err
    assert "format 2" in err and "reads format 3" in err and "from the start" in err


# -- policies' checkpoint hooks -------------------------------------------------------------

class Plain(Uniform):
    """A plugin with state of its own and no hooks: its runs cannot be checkpointed."""

    def reset(self, P, rng):
        super().reset(P, rng)
        self.seen = 0


class Hooked(Uniform):
    """A plugin that saves what it keeps."""

    def reset(self, P, rng):
        super().reset(P, rng)
        self.note = {"count": 7, "weights": np.arange(3.0)}

    def checkpoint_state(self):
        return {"note": self.note}

    def restore_checkpoint(self, state):
        self.note = state["note"]


class Unsaveable(Uniform):
    def checkpoint_state(self):
        return {"lock": object()}

    def restore_checkpoint(self, state):
        pass


def _plugin_config(tmp_path: Path, model: Path, scheduler: str) -> Path:
    path = tmp_path / f"{scheduler.split(':')[1]}.yaml"
    path.write_text(yaml.safe_dump({"seed": 2, "steps": 400, "users": {"count": 60}, "server": {"capacity": 10},
                                    "scheduler": scheduler, "model": str(model)}))
    return path


def test_a_plugin_without_checkpoint_hooks_is_refused_at_the_start(synthetic_model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(NO_PLUGINS_ENV, "")
    monkeypatch.setattr(Simulation, "run", lambda *a, **k: pytest.fail("simulated"))
    config = _plugin_config(tmp_path, synthetic_model, f"{__name__}:Plain")
    assert main(["run", str(config), "-o", "p.zarr", "--checkpoint-every", "100", "-q"]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint-every: cannot checkpoint this run" in err and "Plain does not define checkpoint_state()" in err
    assert "Traceback" not in err and not list(tmp_path.glob("p.zarr*"))


def test_a_plugin_with_hooks_resumes_with_its_state(synthetic_model, tmp_path, monkeypatch):
    monkeypatch.setenv(NO_PLUGINS_ENV, "")
    cfg = make_config(synthetic_model, users=60, steps=400, seed=2, scheduler=f"{__name__}:Hooked")
    folder = tmp_path / "c"
    sim = Simulation(cfg)
    sim.scheduler.note["count"] = 8  # changed during the run
    sim.run(progress=False, until=200, checkpoint=ck.Checkpointer(folder, 200))
    restored = ck.restore(folder, cfg)
    assert type(restored.scheduler) is Hooked and restored.scheduler.note["count"] == 8
    np.testing.assert_array_equal(restored.scheduler.note["weights"], np.arange(3.0))
    monkeypatch.setenv(NO_PLUGINS_ENV, "1")  # plugins refused: the config's plugin is not made
    with pytest.raises(Exception, match="plugins are refused"):
        ck.restore(folder, cfg)


def test_a_hook_returning_what_a_checkpoint_cannot_hold_is_named(synthetic_model, tmp_path, monkeypatch):
    monkeypatch.setenv(NO_PLUGINS_ENV, "")
    cfg = make_config(synthetic_model, users=60, steps=400, seed=2, scheduler=f"{__name__}:Unsaveable")
    sim = Simulation(cfg)
    with pytest.raises(ck.CheckpointError, match=r"objects\.scheduler\.state\.lock: a builtins\.object"):
        sim.run(progress=False, until=200, checkpoint=ck.Checkpointer(tmp_path / "c", 100))
    assert not ck.checkpoints(tmp_path / "c")


ESTIMATING = {"autoscaler_options": {"period": 10, "cooldown": 30, "provisioning_delay": 10, "max_units": 20,
                                     "monitor": {"period": 5, "lag": 5, "window": 60}}}


@pytest.mark.parametrize("autoscaler", ["capacity_rule", "la_imr"])
def test_an_estimating_autoscaler_resumes_to_the_uninterrupted_run(synthetic_model, tmp_path, autoscaler):
    """The autoscalers that estimate from scrapes (their estimates, the control plane's
    orders and the monitor's pending scrapes are in the checkpoint) continue as if never
    stopped: the same scaling actions and the same requests."""
    cfg = make_config(synthetic_model, users=60, steps=900, seed=3, autoscaler=autoscaler, **ESTIMATING)
    whole = Simulation(cfg).run(progress=False)
    sim = Simulation(cfg)
    sim.run(progress=False, until=450, checkpoint=ck.Checkpointer(tmp_path / "c", 450))
    assert sim.autoscaler.lam.value is not None and sim.control.monitor._pending  # mid-estimate, scrapes pending
    resumed = ck.restore(tmp_path / "c", cfg).run(progress=False)
    assert len(whole.scaling_actions) > 0
    np.testing.assert_array_equal(resumed.scaling_actions, whole.scaling_actions)
    for name in ("request_end", "request_outcome", "online_users", "server_allocation", "dedicated_capacity"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name), err_msg=name)


def test_a_sweep_with_checkpoints_refuses_a_plugin_without_hooks_at_its_start(synthetic_model, tmp_path, capsys,
                                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(NO_PLUGINS_ENV, "")
    monkeypatch.setattr(Simulation, "run", lambda *a, **k: pytest.fail("simulated"))
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"steps": 100, "users": {"count": 20},
                                                        "server": {"capacity": 10}, "model": str(synthetic_model)}))
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": "base.yaml", "grid": {"scheduler": ["uniform", f"{__name__}:Plain"]},
                                    "seeds": [1], "output": str(tmp_path / "sweep")}))
    assert main(["sweep", str(grid), "--serial", "-q", "--checkpoint-every", "50"]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint-every: " in err and "Plain does not define checkpoint_state()" in err, err
    assert not (tmp_path / "sweep" / "runs").exists() or not list((tmp_path / "sweep" / "runs").iterdir())
