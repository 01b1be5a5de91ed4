"""Issue "Hardening III", stores and inputs: a store without its manifest is refused
when it was written with one; tracebacks on bad input are exit 2 naming what is wrong;
silent acceptances (duplicate request-type names, a results root that does not exist)
are refused; `gmmv validate` agrees with `gmmv run` (output path, plugin failures)."""

from __future__ import annotations

import copy
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from engine_support import make_config
from gmm_volunteer.cli.commands import main
from gmm_volunteer.model.bundle import BundleError, validate_bundle
from gmm_volunteer.io.manifest import MANIFEST_NAME
from gmm_volunteer.io.results import DamagedResultError, open_result, write_result
from gmm_volunteer.run.engine import simulate
from gmm_volunteer.testing.synthetic import synthetic_bundle

DATA = Path(__file__).parent / "data"


def _run(argv, capsys) -> tuple[int, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


@pytest.fixture(scope="module")
def one_store(synthetic_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "run.zarr"
    write_result(simulate(make_config(synthetic_model, users=40, steps=200, seed=5), progress=False), path)
    return path


@pytest.mark.parametrize("damage", ["manifest only", "a chunk of request_latency", "request_count"])
def test_a_format_4_store_without_its_manifest_is_refused(one_store, tmp_path, capsys, damage):
    """0.7.0 printed every P50/P95/P99 as 0.0 (or 0 requests of every type) with exit 0."""
    store = tmp_path / "run.zarr"
    shutil.copytree(one_store, store)
    (store / MANIFEST_NAME).unlink()
    if damage == "a chunk of request_latency":
        chunks = sorted(p for p in (store / "request_latency").rglob("*") if p.is_file() and p.name != "zarr.json")
        assert chunks
        chunks[0].unlink()
    elif damage == "request_count":
        shutil.rmtree(store / "request_count")
    with pytest.raises(DamagedResultError, match="manifest gmmv-manifest.json is missing"):
        open_result(store)
    code, err = _run(["summarize", store], capsys)
    assert code == 2 and str(store) in err and MANIFEST_NAME in err, err


@pytest.mark.parametrize("old", ["store_format1.zarr"])
def test_stores_from_before_the_manifest_still_open(old):
    assert not (DATA / old / MANIFEST_NAME).exists()
    assert open_result(DATA / old).sizes["time"] > 0


@pytest.fixture
def sweep_dir(synthetic_model, tmp_path, capsys):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"steps": 100, "users": {"count": 20}, "server": {"capacity": 10},
                                    "model": str(synthetic_model)}))
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"base": "base.yaml", "grid": {"scheduler": ["uniform", "centralized"]},
                                    "seeds": [1], "output": str(tmp_path / "sweep")}))
    assert main(["sweep", str(grid), "--serial", "-q", "--no-combine"]) == 0
    capsys.readouterr()
    return tmp_path / "sweep"


def test_combine_and_report_refuse_damaged_inputs(sweep_dir, capsys):
    run = sorted((sweep_dir / "runs").glob("*.zarr"))[0]
    (run / MANIFEST_NAME).unlink()
    code, err = _run(["combine", sweep_dir], capsys)
    assert code == 2 and run.name in err and MANIFEST_NAME in err, err
    assert not (sweep_dir / "combined.zarr").exists()
    code, err = _run(["report", sweep_dir, "-o", sweep_dir / "r.html"], capsys)
    assert code == 2 and MANIFEST_NAME in err, err
    (sweep_dir / "sweep.json").write_text("{not json")
    for argv in (["combine", sweep_dir], ["report", sweep_dir, "-o", sweep_dir / "r.html"]):
        code, err = _run(argv, capsys)
        assert code == 2 and "sweep.json" in err, err
    assert not (sweep_dir / "combined.zarr").exists() and not (sweep_dir / "r.html").exists()


def test_a_table_of_another_grid_is_exit_2(sweep_dir, capsys):
    out = sweep_dir.parent / "t.md"
    code, err = _run(["results", "table", sweep_dir, "findings", "-o", out], capsys)
    assert code == 2 and "findings" in err and "lacks the grid dimensions" in err, err
    assert not out.exists()


def test_results_sync_and_check_refuse_a_root_that_is_not_one(tmp_path, capsys):
    for action in ("sync", "check"):
        code, err = _run(["results", action, "--root", tmp_path / "nonexistent"], capsys)
        assert code == 2 and "no such directory" in err, err
        code, err = _run(["results", action, "--root", tmp_path], capsys)
        assert code == 2 and "docs/results" in err, err


def test_results_sync_names_a_doc_that_is_not_text(tmp_path, capsys):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    binary = bytes(range(128, 256)) * 4
    (tmp_path / "docs" / "usage.md").write_bytes(binary)
    code, err = _run(["results", "sync", "--root", tmp_path], capsys)
    assert code == 2 and "docs/usage.md" in err and "UTF-8" in err, err
    assert (tmp_path / "docs" / "usage.md").read_bytes() == binary
    code, err = _run(["results", "check", "--root", tmp_path], capsys)
    assert code == 1, err


def test_duplicate_request_type_names_are_refused():
    data = synthetic_bundle()
    validate_bundle(copy.deepcopy(data))
    data["task_types"][1]["name"] = data["task_types"][0]["name"]
    with pytest.raises(BundleError, match=r"task_types\.1\.name: .* is the name of task_types\.0 too"):
        validate_bundle(data)


PLUGINS = {
    "options_dict": "class P(Scheduler):\n    Options = dict\n    place = uniform_place\n",
    "init_raises": "class P(Scheduler):\n    place = uniform_place\n"
                   "    def __init__(self, **o):\n        raise KeyError('from init')\n",
}


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    head = ("from gmm_volunteer.policies.base import Scheduler\n"
            "from gmm_volunteer.policies.uniform import uniform_place\n")
    for name, body in PLUGINS.items():
        (tmp_path / f"gmmv_h3_{name}.py").write_text(head + textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("GMMV_NO_PLUGINS", "")  # undone after the test, also when --no-plugins sets it


@pytest.mark.parametrize("plugin, needle", [("options_dict", "is not a pydantic model"),
                                            ("init_raises", "__init__ raised KeyError")])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_validate_and_run_agree_on_plugins(tmp_path, capsys, synthetic_model, plugins, plugin, needle, command):
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump({"steps": 40, "users": {"count": 10}, "server": {"capacity": 10},
                                      "model": str(synthetic_model), "scheduler": f"gmmv_h3_{plugin}:P"}))
    out = tmp_path / "out.zarr"
    code, err = _run([command, config, "-o", out, "-q"], capsys)
    assert code == 2 and f"gmmv_h3_{plugin}:P" in err and needle in err, err
    assert not out.exists()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_validate_and_run_agree_on_the_output_path(tmp_path, capsys, synthetic_model, command):
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump({"steps": 40, "users": {"count": 10}, "server": {"capacity": 10},
                                      "model": str(synthetic_model)}))
    code, err = _run([command, config, "-o", "/proc/x.zarr", "-q"], capsys)
    assert code == 2 and "-o /proc/x.zarr: cannot write in /proc" in err, err
