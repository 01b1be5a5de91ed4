"""Execution runs measured under CPU quotas (`TRACES/quota/`, traces/FORMAT.md; docs/model.md
D38): read by the execution hazard alone, checked before any fitting, and predicted by the
work-fraction form at the CPU they used."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from gmm_volunteer.fitting.synthetic import SyntheticSpec, write_synthetic_traces
from gmm_volunteer.fitting.traces import QUOTA_RUN_IDS, TraceError, load_traces

SMALL = SyntheticSpec(duration_s=600, n_types=2, batch_sizes=(1, 5), reps=2, download_reps=1)
# Work per subtask (CPU-s) of the two synthetic types under the work law of the tests below
WORK = (0.6, 2.5)


def _write_collection(folder, catalog, runs, quota=None):
    """A subtasks-format collection of execution runs that follow the work law: each run
    (type k, size n, CPU c %) executes n WORK[k] / (c / 100) s at c % every second."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "catalog.json").write_text(json.dumps(catalog))
    if quota is not None:
        (folder / "meta.json").write_text(json.dumps({"limits": {"cpu_pct": quota, "node": "server"}}))
    rows, cons = [], []
    for rid, (k, n, cpu, factor) in enumerate(runs):
        seconds = n * WORK[k] * factor / (cpu / 100.0)
        rows.append((rid, catalog[k]["name"], n, 100.0, 0.05 + 0.001 * rid, seconds, 0.01 + 0.001 * rid))
        cons += [(rid, "download", 0, 5.0, 100.0, 50.0, 0.1), (rid, "upload", 0, 5.0, 100.0, 0.1, 0.5)]
        cons += [(rid, "execution", t, cpu, 300.0, 0.01, 0.01) for t in range(int(np.ceil(seconds)))]
    pd.DataFrame(rows, columns=["run_id", "subtask_type", "batch_size", "bandwidth_mbps", "download_s",
                                "execution_s", "upload_s"]).to_csv(folder / "runs.csv.gz", index=False)
    pd.DataFrame(cons, columns=["run_id", "phase", "t", "cpu_pct", "memory_mb", "band_in_mbps",
                                "band_out_mbps"]).to_csv(folder / "consumption.csv.gz", index=False)


def _plan(sizes, cpu, reps=3):
    # the work of repeated runs scatters by a few per cent around its mean
    factors = (0.97, 1.0, 1.03)[:reps]
    return [(k, n, cpu, f) for k in range(2) for n in sizes for f in factors]


@pytest.fixture(scope="module")
def quota_traces(tmp_path_factory):
    """Synthetic traces whose subtasks/ and quota/ runs all follow the work law: subtasks/
    at 180 % (sizes 1, 2, 4, 8), quota/ at 200 % (using 190), 100 % (95) and 50 % (48),
    sizes 1, 2, 5, 10 (the 50 % one to 5)."""
    root = tmp_path_factory.mktemp("quota-traces")
    write_synthetic_traces(root, SMALL)
    catalog = json.loads((root / "subtasks" / "catalog.json").read_text())
    _write_collection(root / "subtasks", catalog, _plan((1, 2, 4, 8), 180.0))
    _write_collection(root / "quota" / "cpu200", catalog, _plan((1, 2, 5, 10), 190.0, 2), 200)
    _write_collection(root / "quota" / "cpu100", catalog, _plan((1, 2, 5, 10), 95.0, 1), 100)
    _write_collection(root / "quota" / "cpu50", catalog, _plan((1, 2, 5), 48.0, 1), 50)
    return root


def test_quota_collections_are_read_beside_subtasks(quota_traces):
    traces = load_traces(quota_traces)
    q = traces.quota_runs
    assert sorted(set(q["collection"])) == ["quota/cpu100", "quota/cpu200", "quota/cpu50"]
    assert dict(q.groupby("collection")["cpu_quota_pct"].first()) == {
        "quota/cpu100": 100.0, "quota/cpu200": 200.0, "quota/cpu50": 50.0}
    assert (q["run_id"] >= QUOTA_RUN_IDS).all() and not q["run_id"].duplicated().any()
    assert set(traces.quota_consumption["run_id"]) == set(q["run_id"])
    assert (traces.runs["run_id"] < QUOTA_RUN_IDS).all() and len(traces.runs) == 2 * 4 * 3


def test_only_the_execution_hazard_reads_quota_runs(quota_traces, tmp_path):
    """The consumption, work and base-profile fits take a run's per-second CPU as what its
    batch asks; under a quota it is not, so they read subtasks/ alone: the same with and
    without quota/."""
    from gmm_volunteer.fitting.catalog import derived_base_profile
    from gmm_volunteer.fitting.consumption import stage_table
    from gmm_volunteer.fitting.hazard import person_period
    from gmm_volunteer.fitting.work import work_blocks

    bare = tmp_path / "bare"
    shutil.copytree(quota_traces, bare, ignore=shutil.ignore_patterns("quota"))
    with_q, without = load_traces(quota_traces), load_traces(bare)
    assert without.quota_runs is None
    assert work_blocks(with_q) == work_blocks(without)
    assert derived_base_profile(with_q)[0] == derived_base_profile(without)[0]
    pd.testing.assert_frame_equal(stage_table(with_q, "execution"), stage_table(without, "execution"))
    ex, ex0 = person_period(with_q, "execution"), person_period(without, "execution")
    assert set(np.unique(ex.group)) == {0, 1} and (ex0.group == 0).all()
    assert set(np.unique(ex.run_id[ex.group == 1])) == set(with_q.quota_runs["run_id"])
    assert len(person_period(with_q, "download").age) == len(person_period(without, "download").age)


def test_quota_work_is_that_of_the_largest_quota(quota_traces):
    """Group 1's W is the 200 % collection's measured work, not the throttled runs': the
    50 % runs' work enters nowhere but their own durations."""
    from gmm_volunteer.fitting.work import QUOTA_GROUP, work_tables

    tables = work_tables(load_traces(quota_traces))
    for k in range(2):
        assert tables[QUOTA_GROUP, k][5] == pytest.approx(5 * WORK[k] * (0.97 + 1.0) / 2, rel=1e-9)
        assert tables[0, k][4] == pytest.approx(4 * WORK[k], rel=1e-9)
    # size 10 left out of group 1: extrapolated from sizes 2 and 5, linear as the work is
    held = work_tables(load_traces(quota_traces), {QUOTA_GROUP: 10.0})
    assert held[QUOTA_GROUP, 0][10] == pytest.approx(10 * WORK[0] * (0.97 + 1.0) / 2, rel=1e-9)
    assert held[0, 0][4] == tables[0, 0][4]


def test_the_work_fraction_hazard_predicts_every_quota(quota_traces):
    """Fitted on runs that follow the work law, the work-fraction form predicts the mean
    steps of every (quota, type, size) cell within the checks' tolerance: at 48 % a batch
    takes about four times its steps at 190 % (the CPU enters through s = c / W)."""
    from gmm_volunteer.fitting.hazard_check import quota_cells
    from gmm_volunteer.fitting.hazard_select import fit_hazard

    traces = load_traces(quota_traces)
    block, _ = fit_hazard(traces)
    ex = block["phases"]["execution"]
    bundle = SimpleNamespace(hazard=SimpleNamespace(phases={"execution": SimpleNamespace(model_dump=lambda: ex)}),
                             subtask_types=[SimpleNamespace(name=e["name"]) for e in traces.catalog])
    cells = quota_cells(bundle, traces)
    assert len(cells) == 2 * (4 + 4 + 3)
    assert cells["within"].all(), cells[~cells["within"]].to_string()
    slow = cells[(cells["collection"] == "quota/cpu50") & (cells["batch size"] == 5)]
    fast = cells[(cells["collection"] == "quota/cpu200") & (cells["batch size"] == 5)]
    assert (slow["hazard: mean steps"].to_numpy() > 3 * fast["hazard: mean steps"].to_numpy()).all()


@pytest.mark.parametrize("edit, where, what", [
    (lambda r: (r / "quota" / "cpu50" / "meta.json").write_text("{}"), "quota/cpu50/meta.json", "limits.cpu_pct"),
    (lambda r: (r / "quota" / "cpu50" / "meta.json").write_text(json.dumps({"limits": {"cpu_pct": -5}})),
     "quota/cpu50/meta.json", "limits.cpu_pct"),
    (lambda r: (r / "quota" / "cpu50" / "runs.csv.gz").unlink(), "cpu50/runs.csv.gz", "missing"),
    (lambda r: (r / "quota" / "cpu100" / "catalog.json").write_text(json.dumps(
        [{"name": "other", "description": "", "data_size_mb": 1, "input_size_mb": 0, "output_size_mb": 0}])),
     "quota/cpu100/", "other"),
    (lambda r: shutil.rmtree(r / "quota" / "cpu200"), "quota/cpu100/runs.csv.gz", "largest quota"),
])
def test_bad_quota_collections_are_refused_naming_the_file(quota_traces, tmp_path, edit, where, what):
    copy = shutil.copytree(quota_traces, tmp_path / "traces")
    edit(copy)
    if where == "quota/cpu100/runs.csv.gz":  # the largest quota left lacks a type the others have
        runs = pd.read_csv(copy / "quota" / "cpu100" / "runs.csv.gz")
        keep = runs[runs["subtask_type"] == "cv0"]
        keep.to_csv(copy / "quota" / "cpu100" / "runs.csv.gz", index=False)
        cons = pd.read_csv(copy / "quota" / "cpu100" / "consumption.csv.gz")
        cons[cons["run_id"].isin(keep["run_id"])].to_csv(copy / "quota" / "cpu100" / "consumption.csv.gz", index=False)
        cat = json.loads((copy / "quota" / "cpu100" / "catalog.json").read_text())
        (copy / "quota" / "cpu100" / "catalog.json").write_text(json.dumps(cat[:1]))
    with pytest.raises(TraceError) as err:
        load_traces(copy)
    assert where in str(err.value) and what in str(err.value)


def test_gmmv_hazards_quota_needs_traces_with_quota_collections(capsys):
    from gmm_volunteer.cli.commands import main

    assert main(["hazards", "default", "--quota"]) == 2
    assert "--quota needs --traces" in capsys.readouterr().err
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    assert main(["hazards", "default", "--traces", str(root / "traces"), "--quota"]) == 2  # no quota/ there
    assert "no quota/ collections" in capsys.readouterr().err
