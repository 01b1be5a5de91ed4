"""The errors and hints a new user meets first (docs/usage.md, "Errors"): a bad --set
value is blamed on the --set, a number written with a unit says the key's unit and the
number to write, a duration law written as a number shows the mapping it needs, a
sub-second latency target says that steps are 1 s, an option typo gets a close name,
`gmmv tune` without its optimiser names the extra, and a capacity search that meets no
target exits 3 (not 1, which means a bug)."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.cli.errors import EXIT_NOT_MET
from gmm_volunteer.run.config import ConfigError, load_config


def _error(path, overrides=()) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    return str(err.value)


def test_a_bad_set_value_is_blamed_on_the_set_not_on_the_file(run_yaml):
    text = _error(run_yaml, ["steps=1e5"])
    assert text.startswith(f"--set steps=1e5 on {run_yaml}: steps: must be an integer")
    text = _error(run_yaml, ["users.count=-3"])
    assert text.startswith(f"--set users.count=-3 on {run_yaml}: users.count: must be >=")
    assert _error(run_yaml, ["stepz=4"]).startswith(
        f"--set stepz=4 on {run_yaml}: stepz: unknown config key; did you mean 'steps'?")
    # a problem in the file itself still names the file, beside an override of another key
    data = yaml.safe_load(run_yaml.read_text())
    data["steps"] = 1.5
    run_yaml.write_text(yaml.safe_dump(data))
    assert _error(run_yaml, ["users.count=30"]).startswith(f"{run_yaml}: steps: must be an integer")


@pytest.mark.parametrize("written, key, hint", [
    ("2.5 GB", "memory", "this key is in MB, so write 2500"),
    ("1 Gbit/s", "band_in", "this key is in Mbit/s, so write 1000"),
    ("3 parsecs", "storage", "numbers in a config carry no unit: write the number alone, in MB"),
])
def test_a_number_with_a_unit_names_the_keys_unit(run_yaml, written, key, hint):
    text = _error(run_yaml, [f"base_profile.{key}={written}"])
    assert f"base_profile.{key}: must be a number (got a string '{written}'" in text and hint in text


def test_a_duration_scale_with_a_unit_says_seconds(run_yaml):
    text = _error(run_yaml, ["requests.think_time={dist: pareto, scale: 2 min, shape: 1.5}"])
    assert "requests.think_time.scale: must be a number" in text and "this key is in s, so write 120" in text


def test_a_duration_law_written_as_a_number_shows_the_mapping(run_yaml):
    text = _error(run_yaml, ["requests.patience=30s"])
    assert "requests.patience: must be a mapping (got a string '30s'): a duration law, in seconds" in text
    assert "{dist: pareto, scale: 30.0, shape: 1.5}" in text
    # the example it shows is a valid value of the key
    load_config(run_yaml, ["requests.patience={dist: pareto, scale: 30.0, shape: 1.5}"])


def test_a_sub_second_latency_target_says_steps_are_one_second(run_yaml, capsys):
    assert main(["capacity", str(run_yaml), "--p99", "10ms"]) == 2
    assert "the model's steps are 1 s" in capsys.readouterr().err
    assert main(["capacity", str(run_yaml), "--p99", "light5=500ms@0.99", "--vector"]) == 2
    assert "the model's steps are 1 s" in capsys.readouterr().err


def test_an_option_typo_gets_a_close_name_in_the_subcommands_usage(run_yaml, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(run_yaml), "--sett", "steps=10"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage: gmmv run" in err and "unrecognized arguments: --sett steps=10" in err
    assert "--sett: did you mean '--set'?" in err
    with pytest.raises(SystemExit):
        main(["summarize", "x.zarr", "--qiuet"])
    assert "--qiuet: did you mean '--quiet'?" in capsys.readouterr().err


def test_tune_without_its_optimiser_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cma", None)  # as on a base install: import cma fails
    assert main(["tune", "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'gmm-volunteer[optimise]'" in err and "--method random" in err


def test_a_capacity_search_that_meets_no_target_exits_3(run_yaml, monkeypatch, capsys):
    from gmm_volunteer.experiments import capacity

    def never_met(cfg, targets, **kwargs):
        top = capacity.Evaluation(capacity=kwargs["hi"], feasible=False)
        return capacity.CapacityResult(None, [top], kwargs["quantile"], kwargs["confidence"], dict(targets))

    monkeypatch.setattr(capacity, "find_capacity", never_met)
    assert main(["capacity", str(run_yaml), "--p99", "10s", "-q"]) == EXIT_NOT_MET == 3
    assert "targets not met at the top of the range" in capsys.readouterr().out


def test_help_and_the_usage_doc_list_every_exit_code(capsys):
    """`gmmv --help` and docs/usage.md ("Exit codes") name every code `gmmv` returns."""
    from pathlib import Path

    from gmm_volunteer.cli import errors

    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert codes == set(errors.EXIT_MEANINGS) == {0, 1, 2, 3, 130, 141}
    with pytest.raises(SystemExit):
        main(["--help"])
    epilog = " ".join(capsys.readouterr().out.partition("Exit codes:")[2].split())
    for code, meaning in errors.EXIT_MEANINGS.items():
        assert f"{code} {meaning}" in epilog, epilog
    usage = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    table = usage.partition("### Exit codes")[2].partition("###")[0]
    assert {int(c) for c in re.findall(r"^\| ([0-9]+) \|", table, re.M)} == codes


def test_the_usage_docs_error_examples_are_todays_messages(run_yaml, capsys):
    """Each line of the example block of docs/usage.md, "Errors", is a line the command
    prints today (``...`` in the doc stands for a list it shortens)."""
    from pathlib import Path

    usage = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    section = usage.partition("### Errors")[2].partition("\n### ")[0]
    block = section.partition("```text\n")[2].partition("```")[0]
    examples = [line.strip() for line in block.splitlines() if line.strip()]
    assert len(examples) == 3, examples
    printed = []
    data = yaml.safe_load(run_yaml.read_text())
    for key, bad in (("users", {"cuont": 20, "count": 20}), ("scheduler", "unifrom")):
        run_yaml.write_text(yaml.safe_dump({**data, key: bad}))
        assert main(["run", "run.yaml", "-q"]) == 2
        printed += capsys.readouterr().err.splitlines()
    with pytest.raises(SystemExit):
        main(["rn"])
    printed += capsys.readouterr().err.splitlines()
    for example in examples:
        pattern = ".*".join(map(re.escape, example.split("...")))
        assert any(re.fullmatch(pattern, line) for line in printed), (example, printed)


@pytest.mark.parametrize("text, words", [
    ("steps: 40\n users:\n  count: 20\n", "line 2, column 7: mapping values are not allowed here (a 'key:' where"),
    ("users:\n  count: 20\n capacity: 1\n", "line 3, column 2: expected <block end>, but found '<block mapping start>' "
                                            "(this line is indented differently"),
    ("users:\n\tcount: 20\n", "line 2, column 1: found character '\\t' that cannot start any token "
                              "(indent with spaces: YAML does not allow tabs)"),
])
def test_a_yaml_indentation_slip_is_explained(tmp_path, text, words):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert f"{path}: YAML syntax error at {words}" in _error(path)


def test_fit_errors_carry_the_error_prefix(tmp_path, capsys):
    assert main(["fit", str(tmp_path), "-o", str(tmp_path / "bundle"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gmmv fit: error: "), err
