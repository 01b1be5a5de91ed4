"""What the commands tell the user (gmm_volunteer.cli.feedback): the compile notice, --quiet
and -v on every command, progress lines of fit and capacity, and the capacity verdicts."""

from __future__ import annotations

import pickle
import sys
import types

import pytest

from gmm_volunteer.cli import feedback
from gmm_volunteer.cli.commands import build_parser, main

COMMANDS = [["run", "c.yaml"], ["sweep", "g.yaml"], ["summarize", "r.zarr"], ["report", "d"],
            ["combine", "d"], ["capacity", "c.yaml", "--p99", "10s"], ["fit", "t", "-o", "b"],
            ["collect", "resources"], ["collect", "subtasks"], ["collect", "downloads"], ["compile"]]


@pytest.fixture(autouse=True)
def fresh_feedback(monkeypatch):
    monkeypatch.setattr(feedback, "_level", feedback.NORMAL)
    monkeypatch.setattr(feedback, "_announced", False)


# -- the compile notice --------------------------------------------------------------


class FakeCacheFile:
    def __init__(self, index_path, overloads):
        self._index_path = str(index_path)
        self.overloads = overloads

    def _load_index(self):
        return self.overloads


def dispatcher(index_path, overloads=None):
    cache = types.SimpleNamespace(_cache_file=FakeCacheFile(index_path, overloads or {}))
    return types.SimpleNamespace(_cache=cache)


def test_kernels_cached_reads_the_index_files(tmp_path):
    index = tmp_path / "step.dynamics_step-14.py311.nbi"
    assert not feedback.kernels_cached([dispatcher(index, {"sig": 1})])  # no index file
    index.write_bytes(pickle.dumps("x"))
    assert feedback.kernels_cached([dispatcher(index, {"sig": 1})])
    assert not feedback.kernels_cached([dispatcher(index, {})])  # stale: source changed
    assert feedback.kernels_cached([types.SimpleNamespace()])  # unknown layout: no notice


def test_kernels_cached_answers_for_the_real_kernels_without_compiling():
    from gmm_volunteer.model.kernels import step

    before = list(step.dynamics_step.signatures)  # other tests may have compiled it already
    assert isinstance(feedback.kernels_cached(), bool)
    assert list(step.dynamics_step.signatures) == before  # the check compiled nothing


def test_compile_notice_once_when_cold_never_when_warm_or_quiet(tmp_path, capsys):
    cold = [dispatcher(tmp_path / "missing.nbi")]
    (tmp_path / "there.nbi").write_bytes(b"")
    warm = [dispatcher(tmp_path / "there.nbi", {"sig": 1})]
    assert not feedback.announce_compile(warm)
    assert capsys.readouterr().err == ""
    feedback.set_verbosity(feedback.QUIET)
    assert not feedback.announce_compile(cold)
    assert capsys.readouterr().err == ""
    feedback.set_verbosity(feedback.NORMAL)
    assert feedback.announce_compile(cold)
    assert not feedback.announce_compile(cold)  # once per process
    assert capsys.readouterr().err == feedback.COMPILE_NOTICE + "\n"


# -- --quiet and -v everywhere -------------------------------------------------------


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_command_takes_quiet_and_verbose(argv, capsys):
    parser = build_parser()
    quiet = parser.parse_args(argv + ["--quiet"])
    verbose = parser.parse_args(argv + ["-v"])
    assert feedback.level_of(quiet) == feedback.QUIET
    assert feedback.level_of(verbose) == feedback.VERBOSE
    assert feedback.level_of(parser.parse_args(argv)) == feedback.NORMAL
    assert feedback.level_of(parser.parse_args(argv + ["-q"])) == feedback.QUIET
    assert feedback.level_of(parser.parse_args(argv + ["--verbose"])) == feedback.VERBOSE
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv + ["--quiet", "-v"])
    assert exc.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


# -- summarize on a sweep folder -----------------------------------------------------


def test_summarize_on_a_sweep_folder_says_how_to_open_it(tmp_path, capsys):
    (tmp_path / "sweep.json").write_text("{}")
    (tmp_path / "runs").mkdir()
    assert main(["summarize", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a sweep output directory" in err
    assert f"gmmv report {tmp_path}" in err and "open_combined" in err
    assert "incomplete" not in err


# -- gmmv fit progress ---------------------------------------------------------------


def fake_fit_bundle(traces, out, candidates, degrees, report, log=None, progress=None, workers=1, **options):
    log("reading and checking traces in " + str(traces))
    log("fitting allocation series")
    log("fitting consumption series")
    raise __import__("gmm_volunteer.fitting.traces", fromlist=["TraceError"]).TraceError("stop here")


@pytest.mark.parametrize("flag", [None, "--quiet", "-v"])
def test_fit_says_what_it_is_fitting(tmp_path, monkeypatch, capsys, flag):
    import gmm_volunteer.fitting.fit

    monkeypatch.setattr(gmm_volunteer.fitting.fit, "fit_bundle", fake_fit_bundle)
    argv = ["fit", str(tmp_path / "traces"), "-o", str(tmp_path / "bundle")] + ([flag] if flag else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gmmv fit: ") and line.endswith(" ...")]
    if flag == "--quiet":
        assert lines == [] and "stop here" in err
    else:
        assert [line.split(": ", 1)[1].split(" ")[0:2] for line in lines] == [
            ["reading", "and"], ["fitting", "allocation"], ["fitting", "consumption"]]
        timings = [line for line in err.splitlines() if line.startswith("gmmv fit:   (")]
        assert len(timings) == (2 if flag == "-v" else 0)


# -- gmmv capacity -------------------------------------------------------------------


@pytest.fixture
def capacity_config(tmp_path, monkeypatch):
    """A config and a stand-in engine whose latency falls with server capacity."""
    from helpers import write_tiny_grid
    from test_capacity import exponential_simulate

    write_tiny_grid(tmp_path)
    module = types.ModuleType("gmm_volunteer.run.engine")
    module.simulate = lambda cfg, progress=False: exponential_simulate(cfg)
    monkeypatch.setitem(sys.modules, "gmm_volunteer.run.engine", module)
    monkeypatch.setattr(feedback, "kernels_cached", lambda dispatchers=None: False)
    return tmp_path / "base.yaml"


@pytest.mark.parametrize("flag", [None, "--quiet"])
def test_capacity_announces_each_evaluation_before_it_starts(capacity_config, capsys, flag):
    argv = ["capacity", str(capacity_config), "--p99", "10s", "--seeds", "3", "--lo", "20", "--hi", "80",
            "--tol", "0.5"] + ([flag] if flag else [])
    assert main(argv) == 0
    out, err = capsys.readouterr()
    evaluated = [line for line in out.splitlines() if line.startswith("capacity ")]
    starting = [line for line in err.splitlines() if line.startswith("capacity ") and "simulating" in line]
    assert len(evaluated) >= 2
    if flag == "--quiet":
        assert err == ""
    else:
        assert [s.split(":")[0] for s in starting] == [e.split(":")[0] for e in evaluated]
        assert err.splitlines()[1] == feedback.COMPILE_NOTICE  # after the header, before the first
        assert err.count(feedback.COMPILE_NOTICE) == 1


@pytest.mark.parametrize("flag", [None, "--quiet"])
def test_capacity_over_two_seeds_warns_once(capacity_config, capsys, flag):
    argv = ["capacity", str(capacity_config), "--p99", "10s", "--seeds", "2", "--lo", "20", "--hi", "80",
            "--tol", "0.5"] + ([flag] if flag else [])
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert len([line for line in out.splitlines() if line.startswith("capacity ")]) >= 2
    warned = [line for line in err.splitlines() if "warning" in line]
    # one line for the whole search (every evaluation forms the bound), --quiet included
    assert warned == ["gmmv capacity: warning: the Student-t lower bound over 2 seeds: 1 degree of "
                      "freedom (t = 6.31 at 95%) makes the bound very wide; use --seeds 3 or more"], err
    assert "Traceback" not in err and "FewSeedsWarning" not in err


# -- gmmv sweep ----------------------------------------------------------------------


@pytest.mark.parametrize("flag", [None, "--quiet", "-v"])
def test_sweep_announces_the_compile_and_lists_runs_with_verbose(tmp_path, monkeypatch, capsys, flag):
    import gmm_volunteer.experiments.sweep as sweep_mod
    from helpers import write_tiny_grid

    grid = write_tiny_grid(tmp_path, grid={"users.count": [10, 20]}, seeds=1, steps=20)
    monkeypatch.setattr(feedback, "kernels_cached", lambda dispatchers=None: False)
    calls = []

    class Report:
        ok = True

        def text(self):
            return "2 runs done"

    def fake_run_sweep(grid, **kwargs):
        calls.append(capsys.readouterr().err)
        return Report()

    monkeypatch.setattr(sweep_mod, "run_sweep", fake_run_sweep)
    assert main(["sweep", str(grid), "--serial"] + ([flag] if flag else [])) == 0
    before = calls[0]
    if flag == "--quiet":
        assert before == ""
    else:
        assert before.count(feedback.COMPILE_NOTICE) == 1
        listed = [line for line in before.splitlines() if line.strip().startswith("to run")]
        assert len(listed) == (2 if flag == "-v" else 0)


@pytest.mark.parametrize("flag, quiet", [(None, False), ("--quiet", True)])
def test_collect_passes_quiet_to_the_collector(tmp_path, monkeypatch, capsys, flag, quiet):
    import gmm_volunteer.fitting.collect.resources as resources

    seen = {}

    def fake(out, **kwargs):
        seen.update(kwargs)
        return out

    monkeypatch.setattr(resources, "collect_resources", fake)
    argv = ["collect", "resources", "--out", str(tmp_path / "r"), "--samples", "2"] + ([flag] if flag else [])
    assert main(argv) == 0
    assert seen["quiet"] is quiet
