"""`gmmv schema`: the run config's JSON Schema accepts what the loader accepts among the
shipped configs, and refuses the mistakes the loader refuses by key or type (docs/usage.md,
"Editing configs with a schema"). Checked with an independent validator (jsonschema),
as an editor would check a file."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.io.yamlio import load_yaml
from gmm_volunteer.run.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def validator():
    from gmm_volunteer.cli.schema import config_schema

    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _run_configs() -> list[Path]:
    """The shipped YAML files the loader takes as run configs (not grids, bundles or
    result files, which it refuses)."""
    out = []
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        try:
            load_config(path)
        except ConfigError:
            continue
        out.append(path)
    return out


def test_the_command_prints_the_schema(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"steps", "users", "availability", "requests", "testbed"} <= set(schema["properties"])
    assert "uniform" in schema["properties"]["scheduler"]["examples"]


def test_every_shipped_run_config_is_valid(validator):
    paths = _run_configs()
    assert len(paths) >= 10, paths  # quickstart, the paper's base, the testbed's cases, ...
    for path in paths:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(load_yaml(path.read_bytes(), str(path)))]
        assert not errors, (path, errors)


@pytest.mark.parametrize("key, value", [
    ("users.cuont", 5),                                              # an unknown key
    ("steps", 0),                                                    # below its bound
    ("steps", "300"),                                                # a number in quotes
    ("scheduler", 5),                                                # not a name
    ("availability.online", {"dist": "exponential", "scale": 30.0}),  # exponential takes mean
    ("availability.online", {"dist": "weibul", "scale": 1.0, "shape": 1.0}),
    ("users.allocation", "fited"),                                   # a bare name that is not one
    ("testbed.link_delay", 5),                                       # an unknown testbed key
])
def test_a_mistake_the_loader_refuses_is_marked_by_the_schema(validator, tmp_path, key, value):
    data = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    data["model"] = str(ROOT / "configs" / "models" / "default")
    assert not list(validator.iter_errors(data))
    node = data
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError):
        load_config(path)
    assert list(validator.iter_errors(data)), f"{key}: {value!r} passes the schema"
