"""Unusable traces fail with a message naming the file and column, and write nothing."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from gmm_volunteer.fitting.cli import EXIT_BAD_TRACES, main
from gmm_volunteer.fitting.fit import fit_bundle
from gmm_volunteer.fitting.synthetic import SyntheticSpec, write_synthetic_traces
from gmm_volunteer.fitting.traces import TraceError, load_traces

SMALL = SyntheticSpec(duration_s=600, n_types=2, batch_sizes=(1, 5), reps=2, download_reps=1)


@pytest.fixture(scope="module")
def good_traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    write_synthetic_traces(root, SMALL)
    return root


@pytest.fixture
def traces(good_traces, tmp_path):
    dst = tmp_path / "traces"
    shutil.copytree(good_traces, dst)
    return dst


def _edit(path, fn):
    df = pd.read_csv(path)
    df = fn(df)
    df.to_csv(path, index=False)


def _drop(col):
    return lambda df: df.drop(columns=[col])


def _set(col, row, value):
    def fn(df):
        df[col] = df[col].astype(float)
        df.loc[row, col] = value
        return df

    return fn


CASES = {
    "missing column": ("resources/resources.csv.gz", _drop("cpu_pct"), "cpu_pct"),
    "NaN": ("subtasks/consumption.csv.gz", _set("memory_mb", 5, np.nan), "memory_mb"),
    "too short": ("resources/resources.csv.gz", lambda df: df.iloc[:15], "time_s"),
    "negative": ("downloads/downloads.csv.gz", _set("band_in_mbps", 3, -1.0), "band_in_mbps"),
    "bytes instead of MB": ("subtasks/consumption.csv.gz", _set("memory_mb", 0, 3e9), "memory_mb"),
    "above machine capacity": ("resources/resources.csv.gz", _set("band_in_mbps", 2, 8000.0), "band_in_mbps"),
    "negative duration": ("subtasks/runs.csv.gz", _set("execution_s", 1, -0.5), "execution_s"),
    "unknown subtask type": ("subtasks/runs.csv.gz", lambda df: df.assign(subtask_type="nope"), "subtask_type"),
    "shuffled time": ("subtasks/consumption.csv.gz", lambda df: df.sample(frac=1.0, random_state=1), "'t'"),
    "duplicated rows": ("subtasks/consumption.csv.gz", lambda df: pd.concat([df.iloc[:3], df]), "duplicated rows"),
    "shuffled download time": ("downloads/downloads.csv.gz", lambda df: df.iloc[::-1], "'t'"),
    "zero execution times": ("subtasks/runs.csv.gz", lambda df: df.assign(execution_s=0.0), "execution_s"),
    "constant durations": ("subtasks/runs.csv.gz", lambda df: df.assign(upload_s=0.25), "upload_s"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_trace_names_file_and_column_and_writes_nothing(traces, tmp_path, case):
    rel, fn, column = CASES[case]
    _edit(traces / rel, fn)
    out = tmp_path / "models" / "bundle"
    with pytest.raises(TraceError) as err:
        fit_bundle(traces, out, candidates=[(1, 0)], degrees=(1,), report=False)
    msg = str(err.value)
    assert rel.split("/")[1] in msg and column in msg, msg
    assert not out.exists()
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


@pytest.mark.parametrize("rel, content, needle", [
    ("downloads/levels.json", "[44.8, 79.7]", "downloads/levels.json: must be a mapping"),
    ("downloads/levels.json", '{"levels_mbps": ["fast"]}', "downloads/levels.json: key 'levels_mbps'"),
    ("downloads/levels.json", '{"levels_mbps": [10.0], "preliminary": "no"}', "key 'preliminary'"),
    ("downloads/meta.json", "\x00\x01junk", "downloads/meta.json: not valid JSON"),
    ("downloads/meta.json", '["junk"]', "downloads/meta.json: must be a mapping"),
    ("downloads/meta.json", '{"runs": {"a": 1}}', "downloads/meta.json: key 'runs'"),
    ("downloads/meta.json", '{"runs": [{"run_id": "x"}]}', "downloads/meta.json: key 'runs.0'"),
    ("downloads/meta.json", '{"runs": [{"run_id": 0, "subtask_type": "nope"}]}', "key 'runs.0.subtask_type'"),
])
def test_bad_json_side_files_are_named(traces, tmp_path, rel, content, needle):
    (traces / rel).write_text(content)
    with pytest.raises(TraceError, match=re.escape(needle)):
        fit_bundle(traces, tmp_path / "b", candidates=[(1, 0)], degrees=(1,), report=False)
    assert not (tmp_path / "b").exists()


def test_integer_catalog_name_blames_the_catalog(traces, tmp_path):
    import json

    path = traces / "subtasks" / "catalog.json"
    catalog = json.loads(path.read_text())
    catalog[0]["name"] = 5
    path.write_text(json.dumps(catalog))
    with pytest.raises(TraceError, match=r"subtasks/catalog.json: entry 0: key 'name' must be a non-empty string"):
        fit_bundle(traces, tmp_path / "b", candidates=[(1, 0)], degrees=(1,), report=False)


def test_missing_file(traces, tmp_path):
    (traces / "subtasks" / "runs.csv.gz").unlink()
    with pytest.raises(TraceError, match="runs.csv.gz: file missing"):
        load_traces(traces)


def test_machine_json_without_capacity(traces):
    m = json.loads((traces / "resources" / "machine.json").read_text())
    del m["capacity"]["memory_mb"]
    (traces / "resources" / "machine.json").write_text(json.dumps(m))
    with pytest.raises(TraceError, match=r"machine.json.*memory_mb"):
        load_traces(traces)


def test_run_without_phase_rows(traces):
    _edit(traces / "subtasks" / "consumption.csv.gz", lambda df: df[~((df.run_id == 0) & (df.phase == "upload"))])
    with pytest.raises(TraceError, match=r"consumption.csv.gz: column 'phase': run 0 has no 'upload' rows"):
        load_traces(traces)


def test_uncompressed_table_is_accepted(traces):
    p = traces / "resources" / "resources.csv.gz"
    pd.read_csv(p).to_csv(traces / "resources" / "resources.csv", index=False)
    p.unlink()
    assert len(load_traces(traces).resources) > 100


def test_cli_exit_code_2_with_message(traces, tmp_path, capsys):
    _edit(traces / "resources" / "resources.csv.gz", _drop("storage_mb"))
    out = tmp_path / "b"
    assert main(["fit", str(traces), "-o", str(out), "--quick"]) == EXIT_BAD_TRACES
    err = capsys.readouterr().err
    assert "resources.csv.gz" in err and "storage_mb" in err
    assert not out.exists()


def test_existing_bundle_survives_a_failed_refit(traces, tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "bundle.yaml").write_text("old")
    _edit(traces / "subtasks" / "runs.csv.gz", _set("batch_size", 0, 2.5))
    with pytest.raises(TraceError, match="batch_size"):
        fit_bundle(traces, out, candidates=[(1, 0)], degrees=(1,), report=False)
    assert (out / "bundle.yaml").read_text() == "old"


def test_download_memory_per_type_from_meta_json(traces):
    from gmm_volunteer.fitting.memory import download_memory

    # synthetic downloads: run_id = level index * n_types + type index (download_reps = 1)
    n_types = SMALL.n_types
    d = pd.read_csv(traces / "downloads" / "downloads.csv.gz")
    runs = [{"run_id": int(r), "subtask_type": f"cv{int(r) % n_types}"} for r in sorted(d.run_id.unique())]
    (traces / "downloads" / "meta.json").write_text(json.dumps({"runs": runs}))
    d.loc[d.run_id % n_types == 1, "memory_mb"] += 500.0
    d.to_csv(traces / "downloads" / "downloads.csv.gz", index=False)
    got = download_memory(load_traces(traces))
    for k in range(n_types):
        mem = d.loc[d.run_id % n_types == k, "memory_mb"].to_numpy()
        assert got[f"cv{k}"] == pytest.approx(mem.mean() + 2 * mem.std(ddof=1))
    assert got["cv1"] - got["cv0"] > 400


def test_download_memory_pooled_without_attribution(traces):
    from gmm_volunteer.fitting.memory import download_memory

    got = download_memory(load_traces(traces))
    mem = pd.read_csv(traces / "downloads" / "downloads.csv.gz")["memory_mb"].to_numpy()
    assert list(got.values()) == pytest.approx([mem.mean() + 2 * mem.std(ddof=1)] * SMALL.n_types)
