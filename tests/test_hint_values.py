"""Every value an error message offers (an example, a correction, a close name, a
command to type) is itself valid input (docs/usage.md, "Errors").

A message once answered ``--set requests.patience=30s`` with ``{dist: exponential,
scale: 30.0}``, which the config refuses (an exponential law takes ``mean``). Each case
here provokes a message, reads the values it suggests out of the message's own text
(not from a list kept beside the code, which could drift from it), puts each back where
the bad value was, and checks that the input is then accepted. A case whose message
suggests nothing fails: a hint that went missing is caught as well as a wrong one."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
import yaml

from gmm_volunteer.cli.commands import build_parser, main
from gmm_volunteer.run.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


def _refused(path, overrides) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    return str(err.value)


# -- what a message suggests, read from its text ----------------------------------------

def _mappings(text: str) -> list[str]:
    """The YAML mappings offered after "e.g." (``{dist: pareto, ...} or {...}``)."""
    return re.findall(r"\{[^{}]*\}", text.partition("e.g.")[2])


def _written(text: str) -> list[str]:
    """The value after "write" (``so write 2500``, ``; write 1000``)."""
    return re.findall(r"\bwrite (-?[0-9][^\s;:,)]*)", text)


def _close_names(text: str) -> list[str]:
    return re.findall(r"did you mean '([^']*)'", text)


def _examples(text: str) -> list[str]:
    """The values listed after "e.g." up to the closing parenthesis or the end:
    ``(write e.g. 1s, 10s, 2min)`` -> 1s, 10s, 2min; ``e.g. 0.99 or 99%`` -> both."""
    listed = re.split(r"e\.g\. ", text, maxsplit=1)[1]
    listed = re.split(r"[)]", listed, maxsplit=1)[0]
    return [w.strip() for w in re.split(r",\s+| or ", listed) if w.strip()]


def _suggested(found: list[str], text: str) -> list[str]:
    assert found, f"the message suggests nothing: {text}"
    return found


# -- the config: load_config with --set overrides ----------------------------------------

# (the override with {} where the bad value goes, the bad value, how to read the hint)
CONFIG_CASES = [
    ("requests.patience={}", "30s", _mappings),
    ("availability.online={}", "3600", _mappings),
    ("requests.think_time={}", "[1, 2]", _mappings),
    ("base_profile.memory={}", "2.5 GB", _written),
    ("base_profile.band_in={}", "1 Gbit/s", _written),
    ("requests.think_time={{dist: pareto, scale: {}, shape: 1.5}}", "2 min", _written),
    ("steps={}", "1e3", _written),
    ("users.{}=5", "cuont", _close_names),
    ("scheduler={}", "unifrom", _close_names),
    ("availability.online.dist={}", "weibul", _close_names),
    ("users.initial_data={}", "fild", _close_names),
    ("{}=300", "stepz", _close_names),
]


@pytest.mark.parametrize("template, bad, read", CONFIG_CASES)
def test_a_config_message_suggests_only_valid_values(run_yaml, template, bad, read):
    text = _refused(run_yaml, [template.format(bad)])
    for value in _suggested(read(text), text):
        load_config(run_yaml, [template.format(value)])  # raises if the suggestion is refused


def test_quotes_around_a_number_the_message_says_to_remove(run_yaml):
    text = _refused(run_yaml, ['steps="300"'])
    assert "remove the quotes to make it a number" in text
    load_config(run_yaml, ["steps=300"])


def test_a_close_key_name_in_the_file_itself(run_yaml):
    data = yaml.safe_load(run_yaml.read_text())
    data["users"]["cuont"] = data["users"].pop("count")
    run_yaml.write_text(yaml.safe_dump(data))
    text = _refused(run_yaml, [])
    for name in _suggested(_close_names(text), text):
        data["users"][name] = data["users"].pop("cuont")
        run_yaml.write_text(yaml.safe_dump(data))
        load_config(run_yaml, [])


# -- the command line: what to type instead -----------------------------------------------

def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_set_with_a_space_for_the_equals_sign(run_yaml, capsys):
    for argv in (["run", str(run_yaml), "--set", "steps", "300"], ["run", "--set", "steps", "300", str(run_yaml)]):
        err = _usage_error(argv, capsys)
        words = _suggested(re.findall(r"write (--set \S+)\)", err), err)
        assert words == ["--set steps=300"], err
        assert main(["validate", str(run_yaml), "-q", *shlex.split(words[0])]) == 0


def test_a_close_subcommand_and_option_name(run_yaml, capsys):
    err = _usage_error(["rn", str(run_yaml)], capsys)
    for command in _suggested(_close_names(err), err):
        build_parser().parse_args([command, str(run_yaml)])  # SystemExit if refused
    err = _usage_error(["run", str(run_yaml), "--sett", "steps=10"], capsys)
    for option in _suggested(_close_names(err), err):
        build_parser().parse_args(["run", str(run_yaml), option, "steps=10"])


def test_summarize_given_a_config_names_the_command_that_runs_it(run_yaml, capsys):
    assert main(["summarize", str(run_yaml)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a result store" in err and "incomplete" not in err
    commands = _suggested(re.findall(r"to run it as a config: gmmv (.+)$", err.strip()), err)
    assert main([*shlex.split(commands[0]), "-q"]) == 0
    assert main(["summarize", "results/run.zarr"]) == 0  # where that run wrote its store


# -- capacity searches and sweeps ----------------------------------------------------------

def _value_error(call, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as err:
        call(*args, **kwargs)
    return str(err.value)


def test_capacity_targets_levels_and_weights(run_yaml):
    from gmm_volunteer.experiments.capacity import parse_duration
    from gmm_volunteer.experiments.capacity_vector import parse_level, parse_resource_list, parse_resource_values

    for bad in ("10ms", "ten"):
        text = _value_error(parse_duration, bad)
        for value in _suggested(_examples(text), text):
            assert parse_duration(value) > 0
    text = _value_error(parse_level, "high")
    for value in _suggested(_examples(text), text):
        assert 0 < parse_level(value) < 1
    for bad in ("cpu", ""):
        text = _value_error(parse_resource_values, bad, "--weights", positive=True)
        for value in _suggested(_examples(text), text):
            assert parse_resource_values(value, "--weights", positive=True)
    text = _value_error(parse_resource_list, "", "--resources")
    for value in _suggested(_examples(text), text):
        assert parse_resource_list(value, "--resources")


def test_capacity_setting_names_a_scaling_autoscaler_and_a_numeric_option(run_yaml):
    from gmm_volunteer.experiments.capacity_setting import parse_range, resolve_setting

    fixed = load_config(run_yaml)
    text = _value_error(resolve_setting, fixed, "autoscaler_options.rho_target")
    for override in _suggested(re.findall(r"e\.g\. --set (\S+)", text), text):
        resolve_setting(load_config(run_yaml, [override]), "autoscaler_options.rho_target")
    scaling = load_config(run_yaml, ["autoscaler=capacity_rule"])
    text = _value_error(resolve_setting, scaling, "rho_target")
    for key in _suggested(_examples(text), text):
        resolve_setting(scaling, key)
    for key in ("autoscaler_options.rho_target", "autoscaler_options.period"):  # a real and an integer one
        setting = resolve_setting(scaling, key)
        text = _value_error(parse_range, "0.3-0.9", setting)
        for value in _suggested(_examples(text), text):
            parse_range(value, setting)


def test_a_grid_of_mappings_names_a_key_inside_them(tmp_path):
    from gmm_volunteer.experiments.sweep import GridError, dim_name, load_grid
    from helpers import write_tiny_grid

    path = write_tiny_grid(tmp_path, grid={"users": [{"count": 50}, {"count": 80}]})
    with pytest.raises(GridError) as err:
        load_grid(path)
    text = str(err.value)
    for key in _suggested(_examples(text), text):
        spec = yaml.safe_load(path.read_text())
        spec["grid"] = {key: [50, 80]}
        path.write_text(yaml.safe_dump(spec))
        grid = load_grid(path)
        assert grid.dims[dim_name(key)] == (key, [50, 80])
        grid.runs()  # every run's config validates


# -- the docs a message cites ------------------------------------------------------------

def _message_strings(path: Path) -> list[str]:
    """The string literals of a module (f-strings' literal parts included), docstrings
    left out: the text its messages are made of."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_every_docs_section_a_message_cites_exists():
    """``(docs/usage.md, "Durations")`` or ``docs/experiments.md, section 1`` in a
    message names a heading of that page."""
    cited = set()
    for path in (ROOT / "gmm_volunteer").rglob("*.py"):
        text = "\n".join(_message_strings(path))
        cited |= {(page, rf"^#+ .*{re.escape(name)}") for page, name in re.findall(r'(docs/[a-z_]+\.md), "([^"]+)"', text)}
        cited |= {(page, rf"^## {n}\. ") for page, n in re.findall(r"(docs/[a-z_]+\.md), section ([0-9]+)", text)}
    assert len(cited) >= 3, f"the patterns no longer find the messages' citations: {cited}"
    missing = [f"{page}: {pattern}" for page, pattern in sorted(cited)
               if not ((ROOT / page).is_file() and re.search(pattern, (ROOT / page).read_text(), re.M))]
    assert not missing, missing


def test_an_arma_order_for_a_trial_fit():
    import argparse

    from gmm_volunteer.fitting.cli import arma_order

    with pytest.raises(argparse.ArgumentTypeError) as err:
        arma_order("1")
    for value in _suggested(_examples(str(err.value)), str(err.value)):
        assert arma_order(value) == (1, 0)
