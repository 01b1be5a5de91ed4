"""The testbed comparison's verdicts (gmm_volunteer.testbed.verdict, issue 33): a 95 % t
interval of the testbed's mean decides whether the runs can judge the simulator's error
against its target; the held-out protocol's options are checked before any simulation.
No root needed: these are the comparison's arithmetic and its argument checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from gmm_volunteer.testbed import verdict
from gmm_volunteer.testbed.compare import main as compare_main


def test_half_width_is_the_t_interval():
    x = [10.0, 12.0, 11.0, 13.0]
    expected = stats.t.ppf(0.975, 3) * np.std(x, ddof=1) / 2.0
    assert verdict.half_width(x) == pytest.approx(expected, rel=1e-12)
    assert verdict.half_width([5.0]) == math.inf


def test_one_run_cannot_decide_even_with_zero_error():
    j = verdict.judge([100.0], [100.0] * 50, 0.05)
    assert j["verdict"] == verdict.UNDECIDED and j["error"] == 0.0


def test_tight_runs_decide_both_ways():
    tb = [100.0, 101.0, 99.0, 100.0, 100.5, 99.5]  # half-width about 0.8 % of the mean
    assert verdict.judge(tb, [103.0] * 10, 0.05)["verdict"] == verdict.WITHIN
    assert verdict.judge(tb, [110.0] * 10, 0.05)["verdict"] == verdict.OUTSIDE


def test_wide_runs_cannot_decide_and_say_how_many_runs_would():
    tb = [80.0, 120.0, 100.0]  # sd 20 % of the mean
    j = verdict.judge(tb, [100.0] * 10, 0.05)
    assert j["verdict"] == verdict.UNDECIDED
    n = j["needed"]
    # the smallest n whose t half-width at this spread is within 5 % of the mean
    assert stats.t.ppf(0.975, n - 1) * 0.2 / math.sqrt(n) <= 0.05
    assert stats.t.ppf(0.975, n - 2) * 0.2 / math.sqrt(n - 1) > 0.05


def test_row_verdict():
    W, O, U = verdict.WITHIN, verdict.OUTSIDE, verdict.UNDECIDED
    assert verdict.row_verdict([W, W, W]) == W
    assert verdict.row_verdict([W, U, W]) == U
    assert verdict.row_verdict([U, O, W]) == O


def test_cell_names_the_interval_and_the_verdict():
    j = verdict.judge([10.0, 12.0], [13.0] * 5, 0.15)
    text = verdict.cell(j)
    assert text.startswith("11.0 ± ") and "+18 %" in text and verdict.UNDECIDED in text


@pytest.mark.parametrize("argv, message", [
    (["--calibration", "nope"], "--calibration: nope is not among the configs' stems"),
    (["--candidate", "model=x"], "--candidate needs --calibration"),
    (["--from-step", "-5"], "--from-step: -5 is negative"),
    (["--variants-file", "x.md"], "--variants-file needs --variant"),
])
def test_compare_refuses_bad_protocol_options(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        compare_main([str(tmp_path), "configs/testbed/light-uniform.yaml", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_from_step_counts_the_requests_that_started_then_or_later():
    """`--from-step` leaves the warm-up out on both sides: the counts and the latencies of
    `_stats` are those of the requests that started at that step or later, read here from
    one simulated run's own records."""
    from gmm_volunteer.io import conventions
    from gmm_volunteer.testbed.compare import _simulate, _stats

    (ds,) = _simulate("configs/testbed/light-uniform.yaml", [7], ["steps=90"])
    rec = conventions.flat_requests(ds)
    late = rec["request_start"] >= 45
    assert late.any() and (~late).any()  # both windows hold requests, so the cut is tested
    whole, cut = _stats([ds]), _stats([ds], from_step=45)
    done = rec["request_outcome"] == 0
    assert whole["counts"]["completed"][0] == int(done.sum())
    assert cut["counts"]["completed"][0] == int((done & late).sum())
    np.testing.assert_array_equal(np.sort(cut["latency"]), np.sort(rec["request_latency"][done & late]))
    assert cut["cpu"][0] == whole["cpu"][0]  # the CPU columns take the whole run


def test_a_variant_is_measured_against_the_runs(tmp_path):
    """`--variant`: the simulator's run of seed 1000 stored as a "testbed" run gives every
    measure +0 % under the setting that made it, and a setting that changes the system
    changes the errors (so the overrides reach the simulator)."""
    from gmm_volunteer.io.results import write_result
    from gmm_volunteer.testbed.compare import _simulate, variants

    config = Path("configs/testbed/light-uniform.yaml")
    (ds,) = _simulate(config, [1000], ["steps=90"])
    write_result(ds, tmp_path / "light-uniform-seed1.zarr")
    table = variants(tmp_path, [config], ["", "users.count=2"], 1, ["steps=90"]).splitlines()
    same, fewer = (row.rstrip(" |").split(" | ") for row in table[2:4])
    assert same[0] == "| (as set)" and all(c.endswith("(+0 %)") for c in same[3:6])
    assert fewer[0] == "| users.count=2" and not fewer[3].endswith("(+0 %)")


class _FakeCgroup:
    """Holds `held` bytes; records the limit it is given."""

    def __init__(self, held: int):
        self.held, self.limit = held, None

    def memory_held(self) -> int:
        return self.held

    def set_memory_limit(self, memory_bytes: int) -> None:
        self.limit = memory_bytes


@pytest.mark.parametrize("mode", ["added", "none"])
def test_footprint_is_added_to_the_configs_memory(mode):
    from gmm_volunteer.testbed.run import MB, add_footprints

    cgs = [_FakeCgroup(400_000_000), _FakeCgroup(90_000_000)]
    footprint = add_footprints(cgs, [2500.0, 300.0], mode)
    assert footprint == pytest.approx([400.0, 90.0])
    if mode == "added":  # the batches keep the config's memory; the process gets its own on top
        assert [c.limit for c in cgs] == [int(2900 * MB), int(390 * MB)]
    else:
        assert [c.limit for c in cgs] == [None, None]


def test_pairs_decide_on_their_differences():
    """Pairs whose differences hold still decide where the testbed's own spread cannot:
    a spread of 16 % of the mean, the same difference of 2 % or -10 % of the mean in every
    pair."""
    tb = np.array([80.0, 120.0, 100.0, 90.0, 110.0])
    assert verdict.judge(tb, tb + 2.0, 0.05)["verdict"] == verdict.UNDECIDED
    within = verdict.judge_paired(tb, tb + 2.0, 0.05)
    assert within["verdict"] == verdict.WITHIN and within["error"] == pytest.approx(0.02)
    assert within["error_hw"] == pytest.approx(0.0, abs=1e-12)
    assert verdict.judge_paired(tb, tb - 10.0, 0.05)["verdict"] == verdict.OUTSIDE
    # the interval is the t interval of the differences, over the testbed's mean
    sim = tb + np.array([6.0, -4.0, 2.0, -2.0, 12.0])  # half-width about 8 % of the mean
    j = verdict.judge_paired(tb, sim, 0.05)
    d = sim - tb
    assert j["error_hw"] == pytest.approx(stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5) / 100.0)
    assert j["verdict"] == verdict.UNDECIDED and j["needed"] > 5
    assert f"± {j['error_hw'] * 100:.0f} % paired, cannot decide" in verdict.cell(j)
    assert verdict.judge_paired(tb, sim, 0.10)["verdict"] == verdict.WITHIN  # a wider target decides


def test_pairs_leave_out_a_pair_with_a_missing_value_and_must_match():
    j = verdict.judge_paired([10.0, np.nan, 12.0], [11.0, 5.0, 13.0], 0.15)
    assert j["pairs"] == 2 and j["tb"] == 11.0 and j["sim"] == 12.0
    with pytest.raises(ValueError, match="as many simulator runs"):
        verdict.judge_paired([1.0, 2.0], [1.0], 0.15)


def test_keyed_runs_are_judged_on_pairs():
    """The simulator's runs of seeds 3-5 stored as keyed "testbed" runs: the headline pairs
    each with the simulator's run of its seed (+0 % ± 0 %, within target); one store
    without keyed draws makes the case unpaired."""
    import json

    from gmm_volunteer.testbed.compare import _headline_row, _keyed_seeds, _simulate, _stats

    config = Path("configs/testbed/light-uniform.yaml")
    runs = [ds.copy() for ds in _simulate(config, [3, 4, 5], ["steps=90"])]
    for ds in runs:
        ds.attrs["testbed_config"] = json.dumps({"draws": "keyed"})
    assert _keyed_seeds(runs) == [3, 4, 5]
    pairs = _stats(_simulate(config, [3, 4, 5], ["steps=90"]))
    others = _stats(_simulate(config, range(1000, 1010), ["steps=90"]))
    row = _headline_row("light-uniform", "", _stats(runs), others, [], "-", pairs)
    assert row[2] == "3 paired with the simulator's seeds"
    assert all("(+0 % ± 0 % paired, within target" in c for c in row[4:7]) and row[7] == verdict.WITHIN
    runs[1].attrs["testbed_config"] = json.dumps({"draws": "own"})
    assert _keyed_seeds(runs) is None
    assert _headline_row("light-uniform", "", _stats(runs), others, [], "-")[2] == "3 / 10"
