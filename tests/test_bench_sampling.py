"""The benchmark's workload sampling (benchmarks/one.py): running in windows leaves the
trajectory bit for bit as one `run()` gives it, and the consumers it counts between
steps are those found by an independent walk of the state."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.model.constants import LOADING
from gmm_volunteer.run.engine import Simulation

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) leaves the root out
    sys.path.insert(0, str(ROOT))
from benchmarks.one import sampled_consumers, window_ends  # noqa: E402

STEPS = 2500


def _assert_same_record(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "attrs":
            x, y = dict(x, wall_time_s=None), dict(y, wall_time_s=None)
        if isinstance(x, dict):
            assert x.keys() == y.keys(), f.name
            for k in x:
                if isinstance(x[k], tuple):  # policy series: (dims, array, attrs)
                    assert x[k][0] == y[k][0] and x[k][2] == y[k][2], (f.name, k)
                    np.testing.assert_array_equal(x[k][1], y[k][1], err_msg=f"{f.name}.{k}")
                else:
                    np.testing.assert_array_equal(x[k], y[k], err_msg=f"{f.name}.{k}")
        else:
            np.testing.assert_array_equal(x, y, err_msg=f.name)


def test_window_ends_cover_the_run_once():
    assert window_ends(1, 2, 100) == [2]
    assert window_ends(1, 301, 100) == [101, 201, 301]
    assert window_ends(1, 350, 100) == [101, 201, 301, 350]


@pytest.mark.parametrize("how", ["run_until", "run_to"])
def test_windows_give_the_record_of_one_run(synthetic_model, how):
    """Windows of 37 steps (not a divisor of the runner's 1000-step chunks) after a first
    step apart, as benchmarks.one runs them: the same record as one run()."""
    cfg = make_config(synthetic_model, users=200, steps=STEPS, seed=5)
    whole = Simulation(cfg).run(progress=False)
    sim = Simulation(cfg)
    sim.run(progress=False, until=1)
    for end in window_ends(1, STEPS, 37)[:-1]:
        if how == "run_until":
            sim.run(progress=False, until=end)
        else:
            sim.run_to(end)
    _assert_same_record(whole, sim.run(progress=False))


def _direct_count(a) -> tuple[int, int]:
    """Batches by walking every node's batch list; running downloads from the readiness
    matrix (online nodes, LOADING), without the download list."""
    batches = 0
    for v in range(a.nd_bhead.shape[0]):
        b = a.nd_bhead[v]
        while b >= 0:
            batches += 1
            b = a.b_nnext[b]
    loading = a.rd_state == LOADING
    running = int(np.count_nonzero(loading & (a.online[:, None] != 0)))
    return batches, running


def test_sampled_consumers_equal_a_direct_count(synthetic_model):
    # users start empty, so that downloads run (and some freeze when their node leaves)
    cfg = make_config(synthetic_model, users=200, steps=STEPS, seed=5, initial_data="empty")
    sim = Simulation(cfg)
    seen = []
    for end in window_ends(0, STEPS, 50):
        sim.run_to(end)
        got = sampled_consumers(sim.arrays)
        assert got == _direct_count(sim.arrays), end
        a = sim.arrays
        seen.append((*got, int(a.n_dl[0])))
    seen = np.array(seen)
    # The counts were exercised: batches and running downloads were present, and some
    # downloads were stopped by their node being offline (the online test mattered).
    assert seen[:, 0].max() > 0 and seen[:, 1].max() > 0
    assert (seen[:, 2] > seen[:, 1]).any()


def test_compare_reads_result_files_without_the_sampled_fields():
    """A baseline written before the consumption samples: compare still runs, shows "-"
    for us/sample and derives KB/user from the memory fields the file has."""
    from benchmarks.compare import compare, load
    from benchmarks.run import kb_per_user

    old = load(str(ROOT / "benchmarks" / "baselines" / "0.3-scaling-2026-12-01.json"))
    row = old["sections"]["scaling"]["rows"][-1]
    assert "us_per_sample" not in row and "kb_per_user" not in row
    rows = [dict(r) for r in old["sections"]["scaling"]["rows"]]
    rows[-1].update(us_per_sample=2.0, mean_active_batches=5.0, mean_running_downloads=7.0)
    new = dict(old, sections={"scaling": {"rows": rows}})
    text = compare(old, new)
    kb = kb_per_user(row)
    base = row["rss_after_import_mb_median"]
    assert kb == (row["peak_rss_mb_median"] - base) * 1024 / row["users"]
    last = [line for line in text.splitlines() if line.lstrip().startswith(f"{row['users']:,}")]
    assert len(last) == 1
    cells = last[0].split()
    assert f"{kb:.2f}" in cells  # KB/user, derived, in both files
    assert "2.000" in cells and "-" in cells  # us/sample only in the new file
