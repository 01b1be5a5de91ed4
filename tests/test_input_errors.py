"""Bad input of every kind gets exit 2, a message naming the file and the key, and
nothing written (docs/usage.md, "Exit codes"): numeric domains, request types against the
bundle, unreadable files and paths, YAML pitfalls, the memory estimate, sweep and report
options."""

from __future__ import annotations

import copy
import socket
import sys
import types

import pytest
import yaml

from gmm_volunteer.model.bundle import BundleError, validate_bundle
from gmm_volunteer.cli.commands import main
from gmm_volunteer.run.config import ConfigError, load_config, parse_override
from gmm_volunteer.testing.synthetic import synthetic_bundle
from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

from engine_support import bundle_dir
from helpers import fake_simulate, write_tiny_grid


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    bundle_dir(tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(
        {"seed": 3, "steps": 40, "users": {"count": 20}, "server": {"capacity": 10}, "model": "bundle"}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def engine(monkeypatch):
    calls = []
    module = types.ModuleType("gmm_volunteer.run.engine")

    def simulate(cfg, progress=True, bundle=None):
        calls.append(cfg)
        return fake_simulate(cfg, progress)

    module.simulate = simulate
    monkeypatch.setitem(sys.modules, "gmm_volunteer.run.engine", module)
    return calls


def files_under(path):
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def refused(argv, workdir, engine, capsys, *needles):
    before = files_under(workdir)
    assert main(argv) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert "Traceback" not in err
    assert files_under(workdir) == before
    assert engine == []
    return err


# -- numeric domains ----------------------------------------------------------------------

@pytest.mark.parametrize("override, key, problem", [
    ("availability.offline={dist: lognormal, mu: 8.0, sigma: 1.0e+300}", "availability.offline.sigma", "must be <= 10"),
    ("availability.offline={dist: lognormal, mu: 1.0e+308, sigma: 1.0}", "availability.offline.mu", "must be <= 30"),
    ("availability.online={dist: weibull, scale: 1000, shape: 1.0e-300}", "availability.online.shape", "must be >= 0.05"),
    ("requests.think_time={dist: exponential, mean: 1e300}", "requests.think_time.mean", "must be <="),
    ("allocation.burn_in_steps=1000000000000", "allocation.burn_in_steps", "must be <= 10,000"),
    ("users.count=1000000000000000000000000000000", "users.count", "must be <= 100,000,000"),
    ("steps=1000000000000", "steps", "must be <= 1,000,000,000"),
    ("server.capacity=1.0e+308", "server.capacity", "must be <="),
    ("users.capacity=1e308", "users.capacity", "must be <="),
    ("base_profile.cpu=1.0e+308", "base_profile.cpu", "must be <="),
    ("users.allocation.sd.cpu=1e300", "users.allocation.sd.cpu", "must be <= 10"),
    ("availability.online={dist: pareto, scale: 10, shape: 1.0}", "availability.online", "a pareto availability law needs shape > 1"),
])
def test_numbers_outside_the_documented_domain_exit_2(workdir, engine, capsys, override, key, problem):
    refused(["run", "run.yaml", "--set", override], workdir, engine, capsys, f"run.yaml: {key}: {problem}")


def test_documented_limits_match_the_code():
    from gmm_volunteer.run import config

    text = (__import__("pathlib").Path(__file__).parents[1] / "docs" / "usage.md").read_text()
    for value in (f"{config.MAX_USERS:,}", f"{config.MAX_STEPS:,}", f"{config.MAX_BURN_IN:,}",
                  f"{config.MIN_SHAPE:g}", f"{config.MAX_LOG_SIGMA:g}", f"{config.MAX_LOG_MU:g}"):
        assert value in text, value


# -- request types against the bundle ------------------------------------------------------

def test_type_probabilities_of_the_wrong_length_in_the_file(workdir, engine, capsys):
    data = yaml.safe_load((workdir / "run.yaml").read_text())
    data["requests"] = {"type_probabilities": [0.5, 0.5]}
    (workdir / "two.yaml").write_text(yaml.safe_dump(data))
    refused(["run", "two.yaml"], workdir, engine, capsys,
            "two.yaml: requests.type_probabilities: has 2 entries", "defines 4 request types")


def test_type_probabilities_of_the_wrong_length_by_override(workdir, engine, capsys):
    refused(["run", "run.yaml", "--set", "requests.type_probabilities=[1.0]"], workdir, engine, capsys,
            "run.yaml: requests.type_probabilities: has 1 entries")


@pytest.mark.parametrize("where", ["grid", "set", "cli"])
def test_sweep_checks_type_probabilities_before_the_first_run(tmp_path, capsys, where):
    path = write_tiny_grid(tmp_path, grid={"users.count": [100, 200]}, seeds=1)
    spec = yaml.safe_load(path.read_text())
    argv = ["sweep", str(path), "--serial", "--quiet"]
    if where == "grid":
        spec["grid"]["requests.type_probabilities"] = [[0.4, 0.3, 0.2, 0.1], [0.5, 0.5]]
    elif where == "set":
        spec["set"] = {"requests.type_probabilities": [0.5, 0.5]}
    else:
        argv += ["--set", "requests.type_probabilities=[0.5, 0.5]"]
    path.write_text(yaml.safe_dump(spec))
    assert main(argv) == 2
    err = capsys.readouterr().err
    # a grid over lists is refused as such (its values could not be coordinates of the
    # combined dataset); set and --set values are checked against the bundle
    want = "values must be numbers, text or booleans" if where == "grid" else "requests.type_probabilities: has 2 entries"
    assert want in err and str(path) in err
    assert not (tmp_path / "out").exists()


def test_sweep_checks_policy_options_before_the_first_run(tmp_path, capsys):
    path = write_tiny_grid(tmp_path, grid={"scheduler": ["uniform", "affinity"]}, seeds=1)
    spec = yaml.safe_load(path.read_text())
    spec["set"] = {"scheduler_options": {"rejection_tries": 2}}  # affinity has no such option
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--serial", "--quiet"]) == 2
    assert "scheduler_options.rejection_tries: unknown key" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- the model bundle ---------------------------------------------------------------------

def _corrupt(workdir, edit=None, raw=None):
    path = workdir / "bundle" / "bundle.yaml"
    if raw is not None:
        path.write_bytes(raw)
    else:
        data = synthetic_bundle()
        edit(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["allocation"]["cpu"]["arma"].update(ar=[float("nan")]), "allocation.cpu.arma.ar.0: must be a finite number"),
    (lambda d: d["allocation"]["cpu"]["arma"].update(ar=[1.5]), "allocation.cpu.arma: ar: not stationary"),
    (lambda d: d["allocation"]["memory"]["arma"].update(order=[1, 1], ma=[-2.0]), "allocation.memory.arma: ma: not invertible"),
    (lambda d: d["allocation"]["cpu"].update(sd=-0.1), "allocation.cpu.sd"),
    (lambda d: d["allocation"]["cpu"]["yeo_johnson"].update(lam=float("inf")), "allocation.cpu.yeo_johnson.lam"),
    (lambda d: d["consumption"]["stages"]["execution"]["resources"].pop("cpu"),
     "consumption.stages.execution.resources.cpu: missing"),
    (lambda d: d["consumption"]["stages"]["upload"].update(levels=[100.0, 10.0, 50.0]),
     "consumption.stages.upload: levels must be strictly increasing"),
    (lambda d: d["consumption"]["stages"]["upload"].update(levels=[10.0, 10.0, 100.0]),
     "consumption.stages.upload: levels must be strictly increasing"),
    (lambda d: d["subtask_types"][0]["work"].update(mean_cpu_s=[float("inf"), 1.0]), "subtask_types.0.work"),
    (lambda d: d["consumption"]["stages"]["execution"]["resources"]["cpu"]["stats"]["sd"][0].__setitem__(0, -1.0),
     "consumption.stages.execution.resources.cpu.stats: sd[0][0] must be >= 0"),
])
def test_invalid_bundle_exits_2_naming_the_key(workdir, engine, capsys, edit, needle):
    _corrupt(workdir, edit)
    refused(["run", "run.yaml"], workdir, engine, capsys, "run.yaml: model:", "bundle.yaml: " + needle)


@pytest.mark.parametrize("raw, needle", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not text"),
    (b"format: gmmv-model-bundle\nformat: gmmv-model-bundle\n", "duplicate key 'format'"),
    (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
])
def test_unreadable_bundle_exits_2(workdir, engine, capsys, raw, needle):
    _corrupt(workdir, raw=raw)
    refused(["run", "run.yaml"], workdir, engine, capsys, "bundle.yaml", needle)


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["allocation"].__setitem__("bandin", d["allocation"].pop("band_in")),
     "allocation: the key 'bandin': Input should be 'band_in'"),
    (lambda d: d["subtask_types"][0].__setitem__("data_sizemb", d["subtask_types"][0].pop("data_size_mb")),
     "subtask_types.0.data_sizemb: Extra inputs are not permitted; did you mean 'data_size_mb'?"),
    (lambda d: d["task_types"][0]["subtasks"].__setitem__(0, d["subtask_types"][0]["name"] + "x"),
     "unknown subtask type"),
])
def test_mistyped_bundle_name_gets_a_suggestion(workdir, engine, capsys, edit, needle):
    _corrupt(workdir, edit)
    refused(["run", "run.yaml"], workdir, engine, capsys, "bundle.yaml: ", needle, "did you mean '")


@pytest.mark.parametrize("command, close", [("rn", "run"), ("sumarize", "summarize"), ("capacty", "capacity")])
def test_mistyped_subcommand_gets_a_suggestion(capsys, command, close):
    with pytest.raises(SystemExit) as info:  # argparse exits by itself
        main([command, "x"])
    assert info.value.code == 2
    assert f"invalid choice: {command!r}; did you mean {close!r}?" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["run", "run.yaml", "--set", "users.cuont=3"], "run.yaml: users.cuont: unknown config key; did you mean 'count'?"),
    (["run", "run.yaml", "--set", "scheduler=unifrom"], "scheduler: unknown scheduler 'unifrom'; did you mean 'uniform'?"),
    (["run", "run.yaml", "--set", "scheduler_options={rejection_trie: 2}"],
     "scheduler_options.rejection_trie: unknown key; did you mean 'rejection_tries'?"),
])
def test_mistyped_names_on_the_command_line_get_a_suggestion(workdir, engine, capsys, argv, needle):
    refused(argv, workdir, engine, capsys, needle)


def test_mistyped_grid_key_gets_a_suggestion(tmp_path, capsys):
    path = write_tiny_grid(tmp_path, seeds=1)
    spec = yaml.safe_load(path.read_text())
    spec["sedes"] = spec.pop("seeds")
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--serial", "--quiet"]) == 2
    assert f"{path}: sedes: unknown grid key; did you mean 'seeds'?" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_hazard_terms_beyond_the_degree_are_refused():
    data = synthetic_bundle()
    data["hazard"] = {"degree": 1, "phases": {ph: {
        "consumption_resource": res, "covariate_mean": [0.0, 0.0, 0.0], "covariate_sd": [1.0, 1.0, 1.0],
        "terms": [[1, 0, 0], [1, 1, 0]], "coef": [0.1, 0.2], "intercept": 0.0,
        "type_coef": [0.0] * len(data["subtask_types"])}
        for ph, res in (("download", "band_in"), ("execution", "cpu"), ("upload", "band_out"))}}
    with pytest.raises(BundleError, match=r"hazard: phases.download.terms\[1\] = \[1, 1, 0\]: total degree 2"):
        validate_bundle(copy.deepcopy(data), "b.yaml")
    data["hazard"]["degree"] = 2
    validate_bundle(data, "b.yaml")


# -- files, paths and YAML -------------------------------------------------------------------

@pytest.mark.parametrize("text, needle", [
    (b"\x00\x01\x02binary", "not text"),
    (b"\xff\xfe\xfa", "not text"),
    (b"steps: 40\nsteps: 50\n", "duplicate key 'steps' (first written at line 1)"),
    (b"a: " + b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b"a: " + b"{b: " * 3000 + b"1" + b"}" * 3000, "nested too deeply"),
])
def test_unreadable_config_exits_2(workdir, engine, capsys, text, needle):
    (workdir / "bad.yaml").write_bytes(text)
    refused(["run", "bad.yaml"], workdir, engine, capsys, "bad.yaml", needle)


@pytest.mark.parametrize("argv, needle", [
    (["run", "run.yaml", "--set", "model=~nosuchuser_gmmv/bundle"], "run.yaml: model: cannot expand"),
    (["run", "run.yaml", "--set", "model=a\0b"], "run.yaml: model: cannot parse override value"),
    (["run", "run\0.yaml"], "cannot read"),
    (["run", "run.yaml", "--set", "scheduler_options=" + "[" * 5000 + "]" * 5000], "nested too deeply"),
    (["run", "run.yaml", "--set", "users.count=1e3"], "users.count: must be an integer (got a number 1000.0; write 1000"),
])
def test_unusable_paths_and_values_exit_2(workdir, engine, capsys, argv, needle):
    refused(argv, workdir, engine, capsys, needle)


@pytest.mark.parametrize("text, value", [
    ("1e3", 1000.0), ("1.0e3", 1000.0), ("1.0e+3", 1000.0), ("1.0E-3", 0.001), ("-2.5e2", -250.0),
    ("1000", 1000), ("'1e3'", "1e3"), ("e3", "e3"),
])
def test_exponent_notation_reads_as_a_number(text, value):
    got = load_yaml(f"x: {text}", "t")["x"]
    assert got == value and type(got) is type(value)


def test_exponent_notation_in_a_config_and_an_override(workdir):
    (workdir / "e.yaml").write_text("steps: 40\nusers: {count: 20}\nserver: {capacity: 1e1}\nmodel: bundle\n"
                                    "base_profile: {cpu: 2.0e2}\n")
    cfg = load_config(workdir / "e.yaml", ["availability.online.scale=1.2e3"])
    assert cfg.server.capacity == 10.0 and cfg.base_profile.cpu == 200.0
    assert cfg.availability.online.scale == 1200.0
    assert parse_override("a=1e3") == ("a", 1000.0)


def test_duplicate_keys_are_refused_in_overrides_too():
    with pytest.raises(ConfigError, match="duplicate key 'mu'"):
        parse_override("availability.offline={dist: lognormal, mu: 1, mu: 2, sigma: 1}")
    with pytest.raises(YAMLInputError, match="line 3"):
        load_yaml("a:\n  b: 1\n  b: 2\n", "t")


def test_binary_grid_file_exits_2(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    assert main(["sweep", str(path), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: not text" in err and "Traceback" not in err


# -- memory ------------------------------------------------------------------------------------

def test_a_run_that_cannot_fit_in_memory_is_refused_with_its_figure(workdir, engine, capsys, monkeypatch):
    from gmm_volunteer.run import preflight

    monkeypatch.setattr(preflight, "available_memory", lambda: 200_000_000)  # 200 MB
    err = refused(["run", "run.yaml", "--set", "users.count=1000000"], workdir, engine, capsys,
                  "run.yaml: users.count: a run of 1,000,000 users over 40 steps needs about",
                  "but only 200 MB are available")
    assert " GB of memory" in err
    assert main(["run", "run.yaml", "--quiet"]) == 0  # 20 users fit


def test_memory_estimate_grows_with_users_and_steps(workdir):
    from gmm_volunteer.run.preflight import bundle_for, estimate_memory

    def est(*overrides):
        cfg = load_config(workdir / "run.yaml", overrides)
        return estimate_memory(cfg, bundle_for(cfg, "run.yaml"))

    small, users, steps = est(), est("users.count=20000"), est("steps=400000")
    assert small < users and small < steps
    # Linear in users: 1000x the users, close to 1000x the per-user part.
    assert est("users.count=2000000") / est("users.count=1000000") == pytest.approx(2.0, rel=0.05)


def test_local_sweep_that_cannot_fit_is_refused(tmp_path, capsys, monkeypatch):
    from gmm_volunteer.run import preflight

    monkeypatch.setattr(preflight, "available_memory", lambda: 50_000_000)
    path = write_tiny_grid(tmp_path, grid={"users.count": [100, 1000000]}, seeds=1)
    assert main(["sweep", str(path), "--serial", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "users.count: run users-1000000_seed-0 needs about" in err and "50 MB are available" in err
    assert not (tmp_path / "out").exists()


# -- sweep and report options ---------------------------------------------------------------

@pytest.mark.parametrize("address", ["uniform", "centralized", "tcp://", "http//x:1", "host:99999"])
def test_dask_address_that_is_no_address_exits_2_at_once(tmp_path, capsys, address):
    path = write_tiny_grid(tmp_path, seeds=1)
    assert main(["sweep", str(path), "--dask-address", address]) == 2
    err = capsys.readouterr().err
    assert "not a Dask scheduler address" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_old_scheduler_option_is_an_alias_with_a_warning(tmp_path, capsys):
    path = write_tiny_grid(tmp_path, seeds=1)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["sweep", str(path), "--scheduler", f"tcp://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "--scheduler is a deprecated spelling of --dask-address" in err
    assert "no Dask scheduler answers there" in err
    assert not (tmp_path / "out").exists()


def test_report_on_a_grid_with_an_extra_dimension(tmp_path, capsys):
    from gmm_volunteer.experiments.sweep import load_grid, run_sweep

    second = tmp_path / "bundle2"
    second.mkdir()
    (second / "bundle.yaml").write_text((bundle_dir(tmp_path) / "bundle.yaml").read_text())
    path = write_tiny_grid(tmp_path, grid={"users.count": [100, 200], "model": [
        str(tmp_path / "bundle"), str(second)]}, seeds=1, steps=50)
    grid = load_grid(path)
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    out = tmp_path / "r.html"
    assert main(["report", str(grid.output), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "dimension 'model'" in err and "--sel model=" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["report", str(grid.output), "-o", str(out), "--sel", "model=nowhere"]) == 2
    assert "model has no value 'nowhere'" in capsys.readouterr().err
    assert main(["report", str(grid.output), "-o", str(out), "--sel", f"modle={second}"]) == 2
    assert "has no dimension 'modle'; did you mean 'model'?" in capsys.readouterr().err
    assert main(["report", str(grid.output), "-o", str(out), "--sel", f"model={second}x"]) == 2
    assert f"did you mean '{second}'?" in capsys.readouterr().err
    assert main(["report", str(grid.output), "-o", str(out), "--sel", f"model={second}"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_does_not_overwrite_a_file_that_is_not_a_report(tmp_path, capsys):
    target = tmp_path / "config.yaml"
    target.write_text("steps: 10\n")
    assert main(["report", str(tmp_path), "-o", str(target)]) == 2
    assert "is not an HTML report" in capsys.readouterr().err
    assert target.read_text() == "steps: 10\n"


def test_fit_never_replaces_a_directory_that_is_not_a_bundle(tmp_path, capsys):
    target = tmp_path / "documents"
    target.mkdir()
    (target / "letter.txt").write_text("keep")
    assert main(["fit", str(tmp_path / "traces"), "-o", str(target), "--quick"]) == 2
    assert "is not a model bundle" in capsys.readouterr().err
    assert (target / "letter.txt").read_text() == "keep" and len(list(target.iterdir())) == 1
    afile = tmp_path / "notes.txt"
    afile.write_text("keep")
    assert main(["fit", str(tmp_path / "traces"), "-o", str(afile), "--quick"]) == 2
    assert afile.read_text() == "keep"


def test_module_entry_point_reports_extension_errors_as_exit_2(tmp_path):
    # `python -m gmm_volunteer.cli` must map the extensions' CommandError like `gmmv` does.
    import subprocess

    path = write_tiny_grid(tmp_path, seeds=1)
    proc = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "sweep", str(path),
                           "--scheduler", "uniform"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "not a Dask scheduler address" in proc.stderr
