"""`gmmv compile` (docs/usage.md): bad arguments exit 2 before anything compiles; the
compile log's accounting; a run after it loads every kernel from the cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from numba import njit

from gmm_volunteer.cli import feedback
from gmm_volunteer.cli.commands import main
from gmm_volunteer.run import precompile as precompile_mod
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.model.kernels.compile_log import CompileLog

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_feedback(monkeypatch):
    # `main` sets the verbosity of the process; keep this module's -q from leaking out.
    monkeypatch.setattr(feedback, "_level", feedback.NORMAL)


@pytest.fixture
def no_compiling(monkeypatch):
    """Stands in for `precompile`: records the configs `gmmv compile` gets as far as
    compiling, and compiles nothing."""
    calls = []

    def record(cfg, on_compiled=None):
        calls.append(cfg)
        return CompileLog()

    monkeypatch.setattr(precompile_mod, "precompile", record)
    yield calls


@pytest.fixture
def good_config(tmp_path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump({"steps": 10, "users": {"count": 5}, "server": {"capacity": 3}}))
    return path


@pytest.mark.parametrize("argv, named", [
    (["missing.yaml"], "missing.yaml"),
    (["--scheduler", "unifrom"], "--scheduler"),
    (["--scheduler", "uniform,,affinity"], "--scheduler"),
    (["--set", "users.bogus=3"], "users.bogus"),
    (["--set", "steps"], "steps"),
    (["--top", "0"], "--top"),
])
def test_a_bad_argument_exits_2_naming_it_before_compiling(argv, named, no_compiling, capsys, good_config):
    # the good config first: nothing may be compiled for it either
    assert main(["compile", str(good_config), *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and "error" in err
    assert no_compiling == []


def test_an_unknown_scheduler_is_named_with_a_suggestion(no_compiling, capsys):
    assert main(["compile", "--scheduler", "unifrom"]) == 2
    assert "did you mean 'uniform'" in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compile", "--top", "many"])
    assert exc.value.code == 2
    assert "--top" in capsys.readouterr().err


def test_one_target_per_config_and_scheduler(no_compiling, good_config, capsys):
    assert main(["compile", str(good_config), "--scheduler", "centralized,affinity", "--set", "seed=4"]) == 0
    assert [(c.scheduler, c.seed, c.users.count) for c in no_compiling] == [("centralized", 4, 5), ("affinity", 4, 5)]
    assert main(["compile", "-q"]) == 0  # the built-in config: the demo's policies
    cfg = no_compiling[-1]
    assert (cfg.scheduler, cfg.executor, cfg.autoscaler) == ("uniform", "default", "fixed")


def test_compile_target_is_short_and_keeps_users_that_events_name():
    base = {"steps": 3600, "users": {"count": 1000}, "server": {"capacity": 30}}
    small = precompile_mod.compile_target(config_from_dict(base))
    assert (small.steps, small.users.count) == (precompile_mod.STEPS, precompile_mod.USERS)
    events = [{"kind": "depart", "at_s": 10, "duration_s": 5, "user_range": [0.0, 0.1]}]
    kept = precompile_mod.compile_target(config_from_dict({**base, "events": events}))
    assert (kept.steps, kept.users.count) == (precompile_mod.STEPS, 1000)


def test_the_log_separates_a_kernels_own_compile_time_from_its_callees():
    @njit
    def inner(x):
        return x * 2.0

    @njit
    def outer(x):
        return inner(x) + 1.0

    log = CompileLog()
    with log.listening():
        assert outer(1.5) == 4.0
    names = [e.name.rsplit(".", 1)[-1] for e in log.entries]
    assert names == ["inner", "outer"]  # the callee is compiled while the caller is typed
    i, o = log.entries
    assert o.own_s == pytest.approx(o.total_s - i.total_s)
    assert log.seconds == pytest.approx(i.own_s + o.own_s)
    assert "2 kernel versions of 2 functions" in log.summary()
    with log.listening():
        outer(2.5)  # compiled already: no event
    assert len(log.entries) == 2
    assert CompileLog().summary().startswith("no kernel compiled")


@pytest.mark.slow
def test_a_run_after_gmmv_compile_compiles_nothing(tmp_path):
    # Empty caches of its own, so that the first command really compiles (about a minute).
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "GMMV_RUNNER_DIR": str(tmp_path / "runners"),
           "PYTHONPATH": str(REPO)}
    first = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "compile"], env=env, cwd=tmp_path,
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "kernel versions of" in first.stdout  # it compiled
    assert "compiling the kernels of built-in config" in first.stderr
    # Another process, another population and length, the demo's policies: `gmmv run -v`
    # reports what numba compiled during the run (numba's compile events), here nothing.
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(
        {"seed": 7, "steps": 300, "users": {"count": 500}, "server": {"capacity": 30}}))
    after = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "run", "run.yaml", "-v"],
                           env=env, cwd=tmp_path, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr
    assert "kernels: no kernel compiled (all loaded from numba's cache)" in after.stderr
    assert feedback.COMPILE_NOTICE not in after.stderr
    again = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "compile", "-q"], env=env, cwd=tmp_path,
                           capture_output=True, text=True)
    assert again.returncode == 0 and "no kernel compiled" in again.stdout
    assert "compiling the kernels" not in again.stderr  # -q: no progress lines
