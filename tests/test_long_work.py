"""Long work tells the truth: a cold run's compile notice covers its policy pair's
runner, `gmmv compile` counts kernels k of N with the time left, `gmmv fit` shows
progress inside a stage."""

from __future__ import annotations

import pytest
import yaml

from gmm_volunteer.cli import feedback
from gmm_volunteer.cli.commands import main
from gmm_volunteer.run import precompile as precompile_mod
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.model.kernels.compile_log import CompileLog, Compiled


@pytest.fixture(autouse=True)
def normal_level(monkeypatch):
    monkeypatch.setattr(feedback, "_level", feedback.NORMAL)
    monkeypatch.setattr(feedback, "_announced", False)


def small(scheduler="uniform"):
    return config_from_dict({"steps": 10, "users": {"count": 5}, "server": {"capacity": 3},
                             "scheduler": scheduler})


def test_a_run_whose_runner_was_never_generated_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GMMV_RUNNER_DIR", str(tmp_path))  # empty: no runner module yet
    assert not feedback.run_kernels_cached(small())
    assert list(tmp_path.iterdir()) == []  # the check writes nothing


def test_the_compile_notice_looks_at_the_runner_too(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(feedback, "kernels_cached", lambda d=None: seen.append(d) or False)
    assert feedback.announce_compile(feedback.run_dispatchers(small()))
    assert feedback.COMPILE_NOTICE in capsys.readouterr().err
    assert len(seen[0]) == 3 and "gmmv_runner_" in seen[0][-1].py_func.__module__


def test_gmmv_compile_counts_kernels_k_of_n_with_the_time_left(tmp_path, monkeypatch, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"steps": 10, "users": {"count": 5}, "server": {"capacity": 3}}))
    monkeypatch.setattr(feedback, "uncached_kernels", lambda: {"m.a", "m.b", "m.c", "m.d"})

    def fake(cfg, on_compiled=None):
        log = CompileLog(on_compiled)
        for name in ("m.a", "m.b", "other.x"):
            entry = Compiled(name, "()", 2.0, 2.0)
            log.entries.append(entry)
            on_compiled(entry)
        return log

    monkeypatch.setattr(precompile_mod, "precompile", fake)
    assert main(["compile", str(config)]) == 0
    err = capsys.readouterr().err
    assert "4 not in the cache" in err
    assert "kernel 1 of at most 4" in err and "kernel 2 of at most 4" in err
    assert "left" in err


def test_compile_weighs_kernels_by_their_size():
    """The compile estimate's weights: a kernel's bytecode instructions (numba's CPU time
    follows them), the median for a name that does not resolve."""
    import gmm_volunteer.run.engine  # noqa: F401  (loads the kernels)
    from gmm_volunteer.cli.compile import kernel_sizes

    big, small_ = "gmm_volunteer.model.kernels.consumption.step_consumption", "gmm_volunteer.model.kernels.ops.batch_new"
    sizes = kernel_sizes([big, small_, "no.such.kernel"])
    assert sizes[big] > 5 * sizes[small_] > 0
    assert sizes["no.such.kernel"] in (sizes[big], sizes[small_], (sizes[big] + sizes[small_]) // 2)


def test_the_fit_logger_prints_progress_inside_a_stage(monkeypatch, capsys):
    from gmm_volunteer.fitting import cli as fit_cli

    clock = [0.0, 11.0, 12.0, 30.0]
    monkeypatch.setattr("time.monotonic", lambda: clock.pop(0) if len(clock) > 1 else clock[0])
    log = fit_cli._stage_logger(feedback)
    log("fitting allocation series")          # t = 0
    log.progress(3, 12, 0.25)                  # t = 11: a quarter of the work after 11 s -> 33 s left
    log.progress(4, 12, 0.3)                   # t = 12: within 10 s of the last line, quiet
    log.progress(12, 12, 1.0)                  # t = 30: the end of the stage always shows
    err = capsys.readouterr().err.splitlines()
    assert err == ["gmmv fit: fitting allocation series ...",
                   "gmmv fit:   3 of 12 ARMA candidates (fitted or ruled out), 11 s, about 33 s left",
                   "gmmv fit:   12 of 12 ARMA candidates (fitted or ruled out), 30 s"]


def test_help_texts_render_without_doubled_percent_signs_and_report_title_has_help(capsys):
    for argv in (["tune", "--help"], ["report", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "%%" not in out
        if argv[0] == "report":
            assert "the report's title" in out


def test_a_sweep_over_schedulers_with_one_schedulers_option_says_to_use_per_value(tmp_path):
    import yaml as _yaml

    from gmm_volunteer.experiments.sweep import GridError, load_grid
    from helpers import write_tiny_grid

    path = write_tiny_grid(tmp_path, grid={"scheduler": ["weighted", "uniform"]}, seeds=1)
    spec = _yaml.safe_load(path.read_text())
    spec["set"] = {"scheduler_options.server_weight": 2.0}  # weighted's option only
    path.write_text(_yaml.safe_dump(spec))
    with pytest.raises(GridError) as exc:
        load_grid(path)
    text = str(exc.value)
    assert "scheduler_options.server_weight" in text
    assert "per_value: {scheduler: {NAME: {scheduler_options.KEY: VALUE}}}" in text and "'uniform'" in text
    spec.pop("set")
    spec["per_value"] = {"scheduler": {"weighted": {"scheduler_options.server_weight": 2.0}}}
    path.write_text(_yaml.safe_dump(spec))
    assert len(load_grid(path).runs()) == 2  # the way the message gives works
