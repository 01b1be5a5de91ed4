"""Issue "Hardening IV", the tools around results and the testbed: each case below was
mishandled by gmmv 0.8.8 (exit 0 with a file replaced or data lost, or a traceback,
or work done before the failure) and is now exit 2 with one message naming what is
wrong, before any work, writing nothing. Output files are held to the rules of
`cli.outputs.check_file_target` (not an input, not through a link, not a file gmmv did
not write)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gmm_volunteer.io.manifest import MANIFEST_NAME
from gmm_volunteer.testbed import compare
from test_hardening3_inputs import _run, sweep_dir  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "configs" / "testbed" / "light-uniform.yaml"
TESTBED_STORE = ROOT / "traces" / "testbed" / "runs" / "epyc-f23-m49" / "light-uniform-seed1.zarr"
RESULT = ROOT / "docs" / "results" / "validation-4-findings-paper-scale.md"


def _tree(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- testbed.compare ---------------------------------------------------------------------------

@pytest.fixture
def results(tmp_path, monkeypatch):
    """A results folder holding one testbed store of light-uniform; nothing may be
    simulated by the refused commands."""
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copytree(TESTBED_STORE, folder / TESTBED_STORE.name)
    monkeypatch.setattr(compare, "_simulate", lambda *a, **k: pytest.fail("simulated"))
    return folder


def _compare(argv, capsys) -> str:
    code = compare.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err  # one message
    return err


@pytest.mark.parametrize("case", ["no results", "no config", "sim-seeds 0", "candidate garbage", "headline /proc",
                                  "no stores", "simulator store", "sim-set garbage"])
def test_compare_refuses_bad_arguments_before_simulating(results, tmp_path, capsys, case):
    """0.8.8: exit 0 for a results folder or config that does not exist; tracebacks (after
    simulating, for /proc) for the others."""
    argv, needle = [results, CASE], None
    if case == "no results":
        argv, needle = [tmp_path / "nope", CASE], "no such folder"
    elif case == "no config":
        argv, needle = [results, tmp_path / "nope.yaml"], "no such file"
    elif case == "sim-seeds 0":
        argv, needle = [*argv, "--sim-seeds", "0"], "--sim-seeds: 0"
    elif case == "candidate garbage":
        argv, needle = [*argv, "--calibration", CASE.stem, "--candidate", "garbage"], "--candidate 'garbage'"
    elif case == "sim-set garbage":
        argv, needle = [*argv, "--sim-set", "steps=many"], "steps"
    elif case == "headline /proc":
        argv, needle = [*argv, "--headline-file", "/proc/x.md"], "--headline-file /proc/x.md"
    elif case == "no stores":
        argv, needle = [tmp_path, CASE], "holds no testbed store of light-uniform"
    elif case == "simulator store":
        store = results / "light-uniform-seed2.zarr"
        shutil.copytree(TESTBED_STORE, store)
        root = json.loads((store / "zarr.json").read_text())
        del root["attributes"]["testbed"]  # what a simulator's store lacks
        (store / "zarr.json").write_text(json.dumps(root))
        manifest = json.loads((store / MANIFEST_NAME).read_text())
        from gmm_volunteer.io.manifest import _crc

        manifest["files"]["zarr.json"] = [(store / "zarr.json").stat().st_size, _crc(store / "zarr.json")]
        (store / MANIFEST_NAME).write_text(json.dumps(manifest))
        needle = "a simulator's store, not a testbed run's"
    before = _tree(tmp_path)
    err = _compare(argv, capsys)
    assert needle in err, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("option", ["--headline-file", "--result-files", "--variants-file", "--figure"])
def test_compare_replaces_no_file_it_did_not_write(results, tmp_path, capsys, option):
    """0.8.8 replaced a foreign foreign.md with the headline, exit 0."""
    foreign = tmp_path / ("foreign.png" if option == "--figure" else "foreign.md")
    foreign.write_text("mine\n")
    target = str(foreign).removesuffix(".md") if option == "--result-files" else foreign
    extra = ["--variant", ""] if option == "--variants-file" else []
    err = _compare([results, CASE, option, target, *extra], capsys)
    assert f"{option} " in err and "refusing to replace it" in err, err
    assert foreign.read_text() == "mine\n"


@pytest.mark.parametrize("where", ["an input", "a link"])
def test_compare_writes_neither_onto_an_input_nor_through_a_link(results, tmp_path, capsys, where):
    outside = tmp_path / "outside.md"
    if where == "an input":
        target, needle = results / "x.md", "inside one of the command's inputs"
    else:
        target, needle = tmp_path / "link.md", "is a symbolic link"
        target.symlink_to(outside)
    err = _compare([results, CASE, "--headline-file", target], capsys)
    assert needle in err
    assert not outside.exists() and not (results / "x.md").exists()


# -- gmmv init ---------------------------------------------------------------------------------

def test_init_writes_nothing_through_a_dangling_link(tmp_path, capsys):
    """0.8.8 wrote README.md through a dangling link in DIR to a file outside, exit 0."""
    out, outside = tmp_path / "work", tmp_path / "outside.md"
    out.mkdir()
    (out / "README.md").symlink_to(outside)
    code, err = _run(["init", out, "-q"], capsys)
    assert code == 2 and "README.md is a symbolic link" in err, err
    assert not outside.exists() and [p.name for p in out.iterdir()] == ["README.md"]
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    code, err = _run(["init", link, "-q"], capsys)
    assert code == 2 and "is a symbolic link" in err, err
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("where", ["/", "/proc", "/sys/fs", ""])
def test_init_refuses_a_folder_it_cannot_fill(tmp_path, capsys, monkeypatch, where):
    """0.8.8: a traceback for /proc, /sys/fs; `gmmv init /` would write into the root."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Path, "write_bytes", lambda *a: pytest.fail("wrote a file"))
    code, err = _run(["init", where, "-q"], capsys)
    assert code == 2 and "DIR" in err, err
    assert not list(tmp_path.iterdir())


def test_init_removes_what_it_wrote_when_a_write_fails(tmp_path, capsys, monkeypatch):
    written = []
    real = Path.write_bytes

    def write(self, data):
        if len(written) == 3:
            raise OSError(28, "No space left on device", str(self))
        written.append(self)
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write)
    code, err = _run(["init", tmp_path / "work", "-q"], capsys)
    assert code == 2 and "No space left on device" in err, err
    assert len(written) == 3 and not (tmp_path / "work").exists()


# -- gmmv results join -------------------------------------------------------------------------

@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a.md", "b.md"):
        shutil.copy(RESULT, tmp_path / name)
    return tmp_path


JOIN = ["results", "join", "a.md", "b.md", "--on", "finding", "--column", "verdict"]


def test_join_never_writes_onto_an_input(tables, capsys):
    """0.8.8 replaced its input a.md with the joined table, exit 0."""
    before = _tree(tables)
    code, err = _run([*JOIN, "--label", "x", "--label", "y", "-o", "a.md"], capsys)
    assert code == 2 and "is one of the command's inputs (a.md)" in err, err
    assert _tree(tables) == before


def test_join_refuses_a_duplicate_key(tables, capsys):
    """0.8.8 kept the last of two rows of one key, silently."""
    lines = (tables / "b.md").read_text().splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("| ") and i > 0 and lines[i - 1].startswith("|---"))
    (tables / "b.md").write_text("\n".join([*lines[:row + 1], lines[row], *lines[row + 1:]]) + "\n")
    code, err = _run([*JOIN, "--label", "x", "--label", "y", "-o", "j.md"], capsys)
    assert code == 2 and "b.md: its 'finding' column holds" in err and "twice" in err, err
    assert not (tables / "j.md").exists()


@pytest.mark.parametrize("label", ["x|y", "x\ny", " "])
def test_join_refuses_a_label_a_column_heading_cannot_hold(tables, capsys, label):
    """0.8.8: a traceback after the work for `|` and a line break."""
    code, err = _run([*JOIN, "--label", label, "--label", "y", "-o", "j.md"], capsys)
    assert code == 2 and "--label" in err, err
    assert not (tables / "j.md").exists()


# -- gmmv testbed, stores, and the rest of item 8 ----------------------------------------------

def test_testbed_steps_beyond_memory_are_refused_before_the_start(tmp_path, capsys, monkeypatch):
    """0.8.8 started the testbed, failed, cleaned up and pointed at a deleted server.log."""
    import gmm_volunteer.testbed.run as run

    monkeypatch.setattr(run, "run_testbed", lambda *a, **k: pytest.fail("started"))
    monkeypatch.setattr("gmm_volunteer.run.preflight.available_memory", lambda: 8 * 10**9)
    code, err = _run(["testbed", CASE, "--set", "steps=1000000000", "-o", tmp_path / "t.zarr", "-q"], capsys)
    assert code == 2 and "steps: 1,000,000,000 steps" in err and "per-step arrays need" in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["files {}", "a file not listed"])
def test_a_store_whose_manifest_does_not_describe_it_is_refused(tmp_path, capsys, damage):
    """0.8.8: `files: {}` let a damaged store through, summarize printing 0.0 for every
    percentile with exit 0."""
    store = tmp_path / "run.zarr"
    shutil.copytree(TESTBED_STORE, store)
    chunks = sorted(p for p in (store / "request_latency").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunks[0].unlink()  # the damage the manifest must see
    manifest = json.loads((store / MANIFEST_NAME).read_text())
    if damage == "files {}":
        manifest["files"] = {}
    else:
        del manifest["files"][chunks[0].relative_to(store).as_posix()]
        chunks[0].write_bytes(b"\0" * 8)  # back, with other bytes, and no longer listed
    (store / MANIFEST_NAME).write_text(json.dumps(manifest))
    code, err = _run(["summarize", store], capsys)
    assert code == 2 and MANIFEST_NAME in err and "does not describe the store" in err, err


def test_autoscaler_tables_of_a_sweep_without_autoscalers_are_exit_2(sweep_dir, capsys):  # noqa: F811
    """0.8.8 (and 0.7.0): a traceback."""
    out = sweep_dir.parent / "t.md"
    code, err = _run(["results", "table", sweep_dir, "autoscalers-paired", "-o", out], capsys)
    assert code == 2 and "no autoscaler dimension" in err, err
    assert not out.exists()


def test_hazard_batch_size_clamp_under_progress_work_is_refused(capsys):
    """0.8.8 accepted it silently (no hazard is evaluated under progress: work)."""
    code, err = _run(["validate", ROOT / "configs" / "quickstart.yaml", "--set", "execution.hazard_batch_size=clamp"],
                     capsys)
    assert code == 2 and "hazard_batch_size: clamp needs progress: paper" in err, err


def test_volunteer_factor_errors_name_the_files_keys(synthetic_model, tmp_path, capsys):
    """0.8.8 named pydantic's union members: ``volunteer_factor.dict[constrained-float,...]``."""
    bundle = tmp_path / "bundle"
    shutil.copytree(synthetic_model, bundle)
    data = yaml.safe_load((bundle / "bundle.yaml").read_text())
    data["subtask_types"][0]["work"]["volunteer_factor"] = {50: -2, "abc": 3}
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(data))
    code, err = _run(["validate", ROOT / "configs" / "quickstart.yaml", "--set", f"model={bundle}"], capsys)
    assert code == 2 and "work.volunteer_factor.50: Input should be greater than 0" in err, err
    assert "volunteer_factor: the key 'abc'" in err and "constrained" not in err and "[key]" not in err, err


def test_the_scalar_capacity_search_refuses_o(tmp_path, capsys, monkeypatch):
    """0.8.8 ignored -o in the scalar search (exit 0, nothing written)."""
    monkeypatch.setattr("gmm_volunteer.experiments.capacity.find_capacity", lambda *a, **k: pytest.fail("searched"))
    code, err = _run(["capacity", ROOT / "configs" / "quickstart.yaml", "--p99", "30s", "-o", tmp_path / "c"], capsys)
    assert code == 2 and "the scalar search writes no files" in err, err
