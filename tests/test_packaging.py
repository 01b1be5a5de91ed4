"""The default model bundle ships with the package: `model: default` (or no `model` key)
finds it from a config in any folder, after a directory of that name next to the config
(docs/usage.md, "Paths")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gmm_volunteer.io.bundlefiles import PACKAGED, packaged_bundle
from gmm_volunteer.run.config import ConfigError, load_config

SHIPPED = PACKAGED / "default"
BASE = "steps: 10\nusers: {count: 10, capacity: 1}\nserver: {capacity: 5}\n"


def write(folder: Path, text: str) -> Path:
    path = folder / "run.yaml"
    path.write_text(text)
    return path


def test_the_package_holds_the_default_bundle_and_the_typing_marker():
    assert (SHIPPED / "bundle.yaml").is_file()
    assert (PACKAGED.parent / "py.typed").is_file()


@pytest.mark.parametrize("model_line", ["model: default\n", ""])
def test_default_resolves_to_the_shipped_bundle_when_nothing_is_next_to_the_config(tmp_path, model_line):
    cfg = load_config(write(tmp_path, BASE + model_line))
    assert Path(cfg.model) == SHIPPED.resolve()


def test_a_directory_next_to_the_config_comes_first(tmp_path):
    shutil.copytree(SHIPPED, tmp_path / "default")
    cfg = load_config(write(tmp_path, BASE + "model: default\n"))
    assert Path(cfg.model) == (tmp_path / "default").resolve()
    (tmp_path / "models").mkdir()
    shutil.copytree(SHIPPED, tmp_path / "models" / "default")
    assert Path(load_config(write(tmp_path, BASE)).model) == (tmp_path / "models" / "default").resolve()


def test_an_override_names_the_shipped_bundle_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(write(tmp_path, BASE + "model: elsewhere/bundle\n"), overrides=["model=default"])
    assert Path(cfg.model) == SHIPPED.resolve()


@pytest.mark.parametrize("name", ["nosuch", "./default", "sub/default", "../default"])
def test_only_a_shipped_bare_name_falls_back(tmp_path, name):
    with pytest.raises(ConfigError, match="model"):
        load_config(write(tmp_path, BASE + f"model: {name}\n"))


def test_packaged_bundle_takes_bare_names_only():
    assert packaged_bundle("default") == SHIPPED
    for name in ("", ".", "..", "../bundles/default", "~default", "nosuch"):
        assert packaged_bundle(name) is None
