"""The `gmmv` command line: exit codes, refusals, nothing written on failure."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml

from gmm_volunteer.cli import commands as cli
from gmm_volunteer.cli.commands import main

from helpers import fake_simulate

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty current directory with a config `run.yaml` and a (stand-in) bundle."""
    from engine_support import bundle_dir

    bundle_dir(tmp_path)  # a valid (synthetic) bundle: `gmmv run` checks the config against it
    (tmp_path / "run.yaml").write_text(
        yaml.safe_dump(
            {"seed": 3, "steps": 40, "users": {"count": 20}, "server": {"capacity": 10}, "model": "bundle"}
        )
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


class FakeEngine:
    """Stands in for `gmm_volunteer.run.engine` and remembers how it was called."""

    def __init__(self, behaviour=None):
        self.calls = []
        self.behaviour = behaviour

    def simulate(self, cfg, progress=True, bundle=None):
        self.calls.append((cfg, progress))
        if self.behaviour is not None:
            raise self.behaviour
        return fake_simulate(cfg, progress)


@pytest.fixture
def engine(monkeypatch) -> FakeEngine:
    fake = FakeEngine()
    module = types.ModuleType("gmm_volunteer.run.engine")
    module.simulate = fake.simulate
    monkeypatch.setitem(sys.modules, "gmm_volunteer.run.engine", module)
    return fake


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


# ---------------------------------------------------------------------------------
# help and parser
# ---------------------------------------------------------------------------------


def test_help_works_and_lists_core_commands():
    proc = subprocess.run(
        [sys.executable, "-m", "gmm_volunteer.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "run" in proc.stdout and "summarize" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "gmm_volunteer.cli", "run", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "--set" in proc.stdout and "--force" in proc.stdout


def test_building_the_parser_imports_no_heavy_module():
    code = textwrap.dedent(
        """
        import sys
        from gmm_volunteer.cli.commands import build_parser
        build_parser()
        heavy = ["numba", "xarray", "zarr", "dask", "scipy", "statsmodels", "matplotlib",
                 "gmm_volunteer.run.engine"]
        print(",".join(m for m in heavy if m in sys.modules))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"imported at parser build: {proc.stdout.strip()}"


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["frobnicate"], ["run"], ["run", "x.yaml", "--bogus"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv


def test_missing_extension_is_skipped_broken_one_is_not(tmp_path, monkeypatch):
    assert cli._import_extension("gmm_volunteer.no_such_extension") is None
    assert cli._import_extension("no_such_package.cli") is None
    (tmp_path / "broken_ext.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="a_dependency_that_is_not_installed"):
        cli._import_extension("broken_ext")


def test_extension_subcommands_are_added(tmp_path, monkeypatch, capsys):
    (tmp_path / "demo_ext.py").write_text(
        textwrap.dedent(
            """
            def add_subcommands(subparsers):
                p = subparsers.add_parser("hello", help="say hello")
                p.add_argument("--code", type=int, default=0)
                p.set_defaults(func=lambda args: print("hello") or args.code)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "EXTENSIONS", ("demo_ext",))
    assert main(["hello"]) == 0
    assert main(["hello", "--code", "2"]) == 2
    assert capsys.readouterr().out == "hello\nhello\n"


# ---------------------------------------------------------------------------------
# gmmv run: input errors write nothing
# ---------------------------------------------------------------------------------


def test_run_bad_config_exits_2_and_writes_nothing(workdir, engine, capsys):
    (workdir / "bad.yaml").write_text("steps: 40\nusers: {count: -5}\nserver: {capacity: 10}\nmodel: bundle\n")
    before = files_under(workdir)
    assert main(["run", "bad.yaml"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml: users.count: must be >= 1 (got -5)" in err
    assert files_under(workdir) == before
    assert engine.calls == []


def test_run_bad_config_subprocess(workdir):
    (workdir / "bad.yaml").write_text("steps: 40\nusers: {count: 5}\nserver: {capacity: 10}\nmodel: nowhere\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gmm_volunteer.cli", "run", "bad.yaml"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "bad.yaml: model: model bundle directory does not exist" in proc.stderr
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "missing.yaml"], "missing.yaml: file not found"),
        (["run", "run.yaml", "--set", "users.count"], "malformed override"),
        (["run", "run.yaml", "--set", "users.cuont=3"], "run.yaml: users.cuont: unknown config key"),
        (["run", "run.yaml", "--set", "users.count=lots"], "run.yaml: users.count: must be an integer"),
        (["run", "run.yaml", "--set", "server.allocation.mean.cpu=2"],
         "run.yaml: server.allocation.mean.cpu: must be <= 1 (got 2)"),
        (["run", "run.yaml", "--set", "users.allocation=bogus"],
         "run.yaml: users.allocation: must be 'dedicated', 'fitted' or a mapping"),
        # Policy options are checked against the policy's own options model at load time.
        (["run", "run.yaml", "--set", "scheduler_options.bogus=1"], "run.yaml: scheduler_options.bogus: unknown key"),
        (["run", "run.yaml", "--set", "scheduler=affinity", "--set", "scheduler_options.rejection_tries=2"],
         "run.yaml: scheduler_options.rejection_tries: unknown key"),
        (["run", "run.yaml", "--set", "scheduler_options.rejection_tries=-1"],
         "run.yaml: scheduler_options.rejection_tries: must be >= 0 (got -1)"),
        (["run", "run.yaml", "--set", "executor_options.x=1"], "run.yaml: executor_options.x: unknown key"),
        (["run", "run.yaml", "--set", "scheduler=nomodule:Nope"], "run.yaml: scheduler: cannot import 'nomodule:Nope': no module 'nomodule' on the import path"),
    ],
)
def test_run_input_errors_exit_2(workdir, engine, capsys, argv, needle):
    before = files_under(workdir)
    assert main(argv) == 2
    assert needle in capsys.readouterr().err
    assert files_under(workdir) == before
    assert engine.calls == []


# ---------------------------------------------------------------------------------
# gmmv run with a stand-in engine (the real one is exercised at the end)
# ---------------------------------------------------------------------------------


def test_run_writes_store_then_refuses_without_force(workdir, engine, capsys):
    from gmm_volunteer.io.results import is_complete

    assert main(["run", "run.yaml", "--quiet", "--set", "users.count=30"]) == 0
    out = workdir / "results" / "run.zarr"
    assert is_complete(out)
    assert capsys.readouterr().out.strip() == f"wrote {Path('results/run.zarr')}"
    cfg, progress = engine.calls[0]
    assert cfg.users.count == 30 and progress is False
    assert cfg.output.path == str(Path("results/run.zarr"))  # recorded in the resolved config

    stamp = (out / "zarr.json").stat().st_mtime_ns
    assert main(["run", "run.yaml"]) == 2
    err = capsys.readouterr().err
    assert "run.zarr: a complete result store already exists" in err and "--force" in err
    assert len(engine.calls) == 1  # refused before simulating
    assert (out / "zarr.json").stat().st_mtime_ns == stamp

    assert main(["run", "run.yaml", "--force"]) == 0
    assert engine.calls[-1][1] is True  # progress unless --quiet
    assert is_complete(out)


def test_run_output_option_and_config_path(workdir, engine):
    from gmm_volunteer.io.results import is_complete

    assert main(["run", "run.yaml", "-o", "custom/here.zarr", "--quiet"]) == 0
    assert is_complete(workdir / "custom" / "here.zarr")
    assert main(["run", "run.yaml", "--set", "output.path=other.zarr", "--quiet"]) == 0
    assert is_complete(workdir / "other.zarr")
    assert not (workdir / "results").exists()


def test_run_refuses_foreign_directory(workdir, engine, capsys):
    target = workdir / "results" / "run.zarr"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    assert main(["run", "run.yaml"]) == 2
    assert "not a result store written by gmmv" in capsys.readouterr().err
    assert (target / "notes.txt").read_text() == "mine"
    assert engine.calls == []


def test_force_never_replaces_a_foreign_directory(workdir, engine, capsys):
    # A directory that merely has a zarr.json is not ours either.
    target = workdir / "data"
    target.mkdir()
    (target / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    (target / "thesis.tex").write_text("years of work")
    before = files_under(workdir)
    assert main(["run", "run.yaml", "-o", "data", "--force"]) == 2
    err = capsys.readouterr().err
    assert "data: exists and is not a result store written by gmmv" in err and "even with --force" in err
    assert files_under(workdir) == before
    assert engine.calls == []


def test_force_refuses_a_store_with_foreign_files_added(workdir, engine, capsys):
    assert main(["run", "run.yaml", "--quiet", "-o", "s.zarr"]) == 0
    (workdir / "s.zarr" / "my_notes.txt").write_text("keep")
    assert main(["run", "run.yaml", "--quiet", "-o", "s.zarr", "--force"]) == 2
    assert "not a result store written by gmmv" in capsys.readouterr().err
    assert (workdir / "s.zarr" / "my_notes.txt").read_text() == "keep"
    assert len(engine.calls) == 1


@pytest.mark.parametrize("out", [".", "..", "run.yaml", "sub/..", "{cwd}", "{parent}", "/"])
def test_output_edge_cases_refused_before_simulating(workdir, engine, capsys, out):
    (workdir / "sub").mkdir()
    out = out.format(cwd=workdir, parent=workdir.parent)
    before = files_under(workdir)
    stamp = (workdir / "run.yaml").read_text()
    assert main(["run", "run.yaml", "-o", out, "--force"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert engine.calls == []
    assert files_under(workdir) == before
    assert (workdir / "run.yaml").read_text() == stamp


@pytest.mark.parametrize("out, needle", [
    ("~nosuchuser_gmmv/x.zarr", "cannot expand the output path"),
    ("a\0b.zarr", "NUL byte"),
    ("run.yaml/x.zarr", "is not a directory"),
])
def test_output_paths_that_cannot_work_exit_2(workdir, engine, capsys, out, needle):
    assert main(["run", "run.yaml", "-o", out]) == 2
    assert needle in capsys.readouterr().err
    assert engine.calls == []


def test_stale_leftovers_of_a_killed_run_are_cleaned_or_reported(workdir, engine, capsys):
    import shutil as _shutil

    assert main(["run", "run.yaml", "--quiet", "-o", "s.zarr"]) == 0
    dead, other = _dead_pid(), _dead_pid()
    # A killed writer's partial store, a store it had moved aside, and a foreign
    # directory that only looks like a leftover.
    _shutil.copytree(workdir / "s.zarr", workdir / f"s.zarr.tmp-{dead}")
    _shutil.copytree(workdir / "s.zarr", workdir / f"s.zarr.old-{dead}")
    (workdir / f"s.zarr.tmp-{other}").mkdir()
    (workdir / f"s.zarr.tmp-{other}" / "mine.txt").write_text("x")
    assert main(["run", "run.yaml", "--quiet", "-o", "s.zarr", "--force"]) == 0
    err = capsys.readouterr().err
    assert not (workdir / f"s.zarr.tmp-{dead}").exists()
    assert not (workdir / f"s.zarr.old-{dead}").exists()
    assert (workdir / f"s.zarr.tmp-{other}" / "mine.txt").read_text() == "x"
    assert f"removed s.zarr.tmp-{dead}" in err and f"removed s.zarr.old-{dead}" in err
    assert f"left s.zarr.tmp-{other} alone" in err


def test_store_whose_replacement_was_killed_is_restored(workdir, engine, capsys):
    from gmm_volunteer.io.results import is_complete

    assert main(["run", "run.yaml", "--quiet", "-o", "s.zarr"]) == 0
    dead = _dead_pid()
    (workdir / "s.zarr").rename(workdir / f"s.zarr.old-{dead}")  # killed between the renames
    assert main(["run", "run.yaml", "--quiet", "-o", "s.zarr"]) == 2  # back, and complete
    err = capsys.readouterr().err
    assert "restored s.zarr" in err and "a complete result store already exists" in err
    assert is_complete(workdir / "s.zarr")
    assert not (workdir / f"s.zarr.old-{dead}").exists()


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_run_interrupted_exits_130_and_writes_nothing(workdir, engine, capsys):
    engine.behaviour = KeyboardInterrupt()
    assert main(["run", "run.yaml"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not (workdir / "results").exists()


def test_run_unexpected_failure_exits_1(workdir, engine, capsys):
    engine.behaviour = RuntimeError("kernel exploded")
    assert main(["run", "run.yaml"]) == 1
    assert "unexpected failure: RuntimeError: kernel exploded" in capsys.readouterr().err
    assert not (workdir / "results").exists()


def test_config_error_raised_later_exits_2(workdir, engine, capsys):
    from gmm_volunteer.run.config import ConfigError

    engine.behaviour = ConfigError("run.yaml: requests.type_probabilities: 4 entries, the bundle has 3 task types")
    assert main(["run", "run.yaml"]) == 2
    assert "requests.type_probabilities" in capsys.readouterr().err


# ---------------------------------------------------------------------------------
# gmmv summarize
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cached, flag, notice", [(False, None, True), (False, "--quiet", False),
                                                  (True, None, False), (False, "-v", True)])
def test_run_announces_a_cold_compile_before_simulating(workdir, engine, capsys, monkeypatch,
                                                        cached, flag, notice):
    from gmm_volunteer.cli import feedback

    monkeypatch.setattr(feedback, "_announced", False)
    monkeypatch.setattr(feedback, "kernels_cached", lambda dispatchers=None: cached)
    from gmm_volunteer.run import precompile as precompile_mod
    from gmm_volunteer.model.kernels.compile_log import CompileLog

    compiled = []  # the compile stage runs before the simulation, only when not cached

    def fake_precompile(cfg, on_compiled=None):
        compiled.append(cfg.steps)
        return CompileLog(on_compiled)

    monkeypatch.setattr(precompile_mod, "precompile", fake_precompile)
    seen = []  # stderr up to the moment the engine starts

    def spy(cfg, progress=True, bundle=None):
        seen.append(capsys.readouterr().err)
        return engine.simulate(cfg, progress)

    monkeypatch.setattr(sys.modules["gmm_volunteer.run.engine"], "simulate", spy)
    assert main(["run", "run.yaml"] + ([flag] if flag else [])) == 0
    assert compiled == ([] if cached else [40])
    before = seen[0]
    assert (feedback.COMPILE_NOTICE in before) == notice
    assert before.count(feedback.COMPILE_NOTICE) <= 1
    after = capsys.readouterr().err
    assert feedback.COMPILE_NOTICE not in after
    if flag == "--quiet":
        assert before == "" and after == ""
    if flag == "-v":
        assert "run: 20 users, 40 steps" in before and "simulated in" in after


def test_summarize_verbose_adds_the_config(workdir, engine, capsys):
    assert main(["run", "run.yaml", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["summarize", "results/run.zarr", "-v"]) == 0
    assert "config of this run" in capsys.readouterr().out


def test_summarize_missing_and_incomplete_exit_2(workdir, capsys):
    assert main(["summarize", "nothing.zarr"]) == 2
    assert "nothing.zarr" in capsys.readouterr().err
    half = workdir / "half.zarr"
    half.mkdir()
    (half / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    assert main(["summarize", str(half)]) == 2
    assert "incomplete" in capsys.readouterr().err


def test_summarize_prints_summary(workdir, engine, capsys):
    assert main(["run", "run.yaml", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["summarize", "results/run.zarr"]) == 0
    text = capsys.readouterr().out
    assert text.strip()
    assert "completed" in text.lower()


def test_summarize_into_closed_pipe_is_quiet(workdir, engine, capsys, monkeypatch):
    assert main(["run", "run.yaml", "--quiet"]) == 0

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    capsys.readouterr()
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["summarize", "results/run.zarr"]) == 141
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------
# end to end with the real engine (synthetic bundle: independent of the shipped one)
# ---------------------------------------------------------------------------------


def test_run_end_to_end_with_engine(tmp_path, monkeypatch, capsys):
    pytest.importorskip("gmm_volunteer.run.engine")
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.io.results import open_result
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    monkeypatch.chdir(tmp_path)
    write_bundle(synthetic_bundle(), tmp_path / "syn")
    quick = REPO / "configs" / "quickstart.yaml"
    argv = ["run", str(quick), "--quiet", "-o", "e2e.zarr",
            "--set", "model=syn", "--set", "steps=60", "--set", "users.count=50"]
    assert main(argv) == 0
    assert "wrote e2e.zarr" in capsys.readouterr().out
    ds = open_result("e2e.zarr")
    stored = yaml.safe_load(ds.attrs["config"])
    assert stored["users"]["count"] == 50 and stored["steps"] == 60
    assert stored["model"] == str((tmp_path / "syn").resolve())
    assert ds.sizes["time"] == 60
    assert main(["summarize", "e2e.zarr"]) == 0
    assert "uniform" in capsys.readouterr().out
