"""Fuzzing the surfaces of issue "Hardening III": damaged checkpoints, damaged result
stores and testbed configs checked before the testbed starts. Each generated case is
either refused with exit 2 and a message (never a traceback, nothing removed or created)
or, when it is accepted, gives what the undamaged input gives. Seeds are fixed
(derandomized), so a failure reproduces.
"""

from __future__ import annotations

import io
import json
import math
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from engine_support import make_config  # noqa: E402
from gmm_volunteer.cli.commands import main  # noqa: E402
from gmm_volunteer.io.results import write_result  # noqa: E402
from gmm_volunteer.run import checkpoint as ck  # noqa: E402
from gmm_volunteer.run.engine import Simulation, simulate  # noqa: E402
from gmm_volunteer.testbed import isolation  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=25,
                suppress_health_check=list(HealthCheck))
STOPPED = 130  # the stand-in run interrupts at once: the checkpoint passed every check


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _damage(files: dict, folder: Path, data) -> bool:
    """Apply one generated damage to the files of `folder`; whether any byte changed."""
    rel = data.draw(st.sampled_from(sorted(files)), label="file")
    path, old = folder / rel, files[rel]
    kind = data.draw(st.sampled_from(["flip", "truncate", "delete", "append"]), label="damage")
    if kind == "delete":
        path.unlink()
        return True
    if kind == "truncate":
        new = old[:data.draw(st.integers(0, max(0, len(old) - 1)), label="keep")]
    elif kind == "append":
        new = old + data.draw(st.binary(min_size=1, max_size=16), label="tail")
    else:
        if not old:
            return False
        at = data.draw(st.integers(0, len(old) - 1), label="at")
        bit = data.draw(st.integers(0, 7), label="bit")
        new = old[:at] + bytes([old[at] ^ (1 << bit)]) + old[at + 1:]
    path.write_bytes(new)
    return new != old


# -- checkpoints --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(synthetic_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckfuzz")
    cfg = make_config(synthetic_model, users=40, steps=300, seed=4)
    cfg.output.path = str(root / "out.zarr")
    folder = ck.checkpoint_dir(root / "out.zarr")
    Simulation(cfg).run(progress=False, until=200, checkpoint=ck.Checkpointer(folder, 200))
    return folder


MANIFEST_VALUES = st.one_of(
    st.sampled_from([None, True, "", "x", [], {}, -1, 0, 1, 10**30, 2**63, 1e308, "0" * 64]),
    st.integers(), st.text(max_size=6))
MANIFEST_KEYS = ["format", "format_version", "gmmv_version", "trajectory_version", "step", "steps",
                 "every", "wall_time_s", "output", "model_sha256", "config", "files", "sha256"]


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_checkpoints_are_refused(checkpoint, tmp_path_factory, monkeypatch, capsys, data):
    folder = tmp_path_factory.mktemp("ck") / checkpoint.name
    shutil.copytree(checkpoint, folder)
    step = ck.checkpoints(folder)[-1]
    files = _files(step)
    if data.draw(st.booleans(), label="edit a manifest field"):
        man = json.loads(files[Path(ck.MANIFEST)])
        key = data.draw(st.sampled_from(MANIFEST_KEYS), label="key")
        value = data.draw(MANIFEST_VALUES, label="value")
        changed = man.get(key) != value
        man[key] = value
        (step / ck.MANIFEST).write_text(json.dumps(man))
    else:
        changed = _damage(files, step, data)
    no_plugins = data.draw(st.booleans(), label="--no-plugins")

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "run", stop)
    monkeypatch.setenv("GMMV_NO_PLUGINS", "")  # undone after the test, also when --no-plugins sets it
    before = _files(folder)
    code = main([*(["--no-plugins"] if no_plugins else []), "run", "--resume", str(folder), "-q"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unexpected failure" not in err, err
    assert code == (2 if changed else STOPPED), err
    assert _files(folder) == before  # a refusal removes nothing
    monkeypatch.undo()


# -- result stores ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(synthetic_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("storefuzz") / "run.zarr"
    write_result(simulate(make_config(synthetic_model, users=40, steps=200, seed=6), progress=False), path)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["summarize", str(path)]) == 0
    return path, out.getvalue()


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_stores_are_refused_or_read_as_written(store, tmp_path_factory, capsys, data):
    original, summary = store
    path = tmp_path_factory.mktemp("st") / "run.zarr"
    shutil.copytree(original, path)
    files = _files(path)
    changed = _damage(files, path, data)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["summarize", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unexpected failure" not in err, err
    assert code in (0, 2), err
    if code == 0:  # accepted: only when nothing the manifest covers changed
        assert out.getvalue() == summary
    else:
        assert changed and str(path) in err


# -- testbed configs ----------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "testbed" / "light-uniform.yaml"
TESTBED_KEYS = ["requests.type_probabilities", "base_profile.cpu", "base_profile.memory", "base_profile.band_in",
                "base_profile.band_out", "users.capacity", "users.count", "server.capacity",
                "server.max_allocation.cpu", "server.max_allocation.memory", "testbed.workdir",
                "testbed.link_delay_ms", "testbed.subnet", "testbed.startup_timeout_s", "scheduler"]
TESTBED_VALUES = st.one_of(
    st.sampled_from([None, True, "", "x", [], {}, [1.0], [0.5, 0.5], [0.25] * 4, -1, 0, 1e-300, 1e-6,
                     0.5, 1, 15, 100, 1e15, 10**30, math.inf, math.nan, "/proc/x", "10.240", "uniform",
                     "centralized", "os:system"]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20))


class Started(Exception):
    pass


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(TESTBED_KEYS), TESTBED_VALUES, min_size=1, max_size=3))
def test_fuzz_testbed_configs_are_checked_before_anything_starts(tmp_path_factory, monkeypatch, capsys, changes):
    """Never started here (no root needed): where the testbed would create its first
    resource, the stand-ins raise `Started` (exit 1, "unexpected failure")."""
    def started(*args, **kwargs):
        raise Started()

    monkeypatch.setattr("gmm_volunteer.testbed.run.run_testbed", started)
    monkeypatch.setattr(isolation.Resources, "__init__", started)
    root = tmp_path_factory.mktemp("tb")
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update(steps=20)
    (root / "tb.yaml").write_text(yaml.safe_dump(cfg))
    overrides = [f"--set={k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in changes.items()]
    code = main(["testbed", str(root / "tb.yaml"), *overrides, "-o", str(root / "x.zarr"), "-q"])
    err = capsys.readouterr().err
    if code == 1:
        assert "unexpected failure: Started" in err, err  # every check passed
    else:
        assert code == 2 and "error:" in err and "Traceback" not in err, err
    assert sorted(p.name for p in root.iterdir()) == ["tb.yaml"]
    monkeypatch.undo()
