"""The collector's quiet gate (gmm_volunteer/fitting/collect/quiet.py), on a fake clock.

A fake machine: `busy` and `own` CPU-seconds advance at rates the test sets for each
phase (a run, a wait); no /proc reading and no onnxruntime are needed.
"""

from __future__ import annotations

import pytest

from gmm_volunteer.fitting.collect.quiet import NotQuietError, QuietGate, Reading, other_load_cores


class FakeMachine:
    """`other` cores used by other processes and `own` by the collector, per phase."""

    def __init__(self):
        self.t = 0.0
        self.busy = 0.0
        self.own_s = 0.0
        self.other = 0.0
        self.own = 0.0

    def advance(self, dt: float) -> None:
        self.t += dt
        self.busy += (self.other + self.own) * dt
        self.own_s += self.own * dt

    def read(self) -> Reading:
        return Reading(self.t, self.busy, self.own_s)


def _gate(m: FakeMachine, **kw) -> QuietGate:
    return QuietGate(reader=m.read, sleep=m.advance, **kw)


def test_other_load_subtracts_own_cpu():
    r0, r1 = Reading(10.0, 100.0, 50.0), Reading(12.0, 104.0, 53.6)
    # 4 busy CPU-seconds in 2 s, 3.6 of them the collector's: 0.2 cores of other load
    assert other_load_cores(r0, r1) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        other_load_cores(r1, r0)


def test_quiet_run_is_kept_at_first_try():
    m = FakeMachine()
    m.other, m.own = 0.05, 2.0  # the worker busy on both cores, the rest nearly idle
    gate = _gate(m, threshold_cores=0.2)

    def run():
        m.advance(3.0)
        return "result"

    result, load, tries = gate.measure(run, "x")
    assert (result, tries) == ("result", 1)
    assert load == pytest.approx(0.05)
    assert gate.repeats == 0 and gate.waited_s == 0


def test_short_run_window_is_extended_to_one_second():
    m = FakeMachine()
    m.other = 0.1
    gate = _gate(m, threshold_cores=0.2)
    t0 = m.t
    gate.measure(lambda: m.advance(0.01), "x")
    assert m.t - t0 == pytest.approx(1.0)  # the gate slept the rest of the 1 s window


def test_loaded_run_is_repeated_after_the_machine_is_quiet():
    m = FakeMachine()
    tries = []

    def run():
        # the first try shares the machine with 1.5 cores of other work; it ends later
        m.other = 1.5 if not tries else 0.0
        tries.append(m.t)
        m.advance(2.0)
        if len(tries) == 1:
            m.other = 0.0  # the other work stops right after the first try
        return len(tries)

    gate = _gate(m, threshold_cores=0.2)
    result, load, n = gate.measure(run, "x")
    assert (result, n) == (2, 2)
    assert load == 0.0
    assert gate.repeats == 1 and gate.rejected == [pytest.approx(1.5)]
    assert gate.waited_s >= 5.0  # it saw 5 quiet seconds in a row before repeating


def test_gives_up_after_max_attempts_with_a_clear_message():
    m = FakeMachine()

    def run():
        m.other = 0.5  # busy during every run, quiet in between
        m.advance(1.0)
        m.other = 0.0

    gate = _gate(m, threshold_cores=0.2, max_attempts=3)
    with pytest.raises(NotQuietError, match=r"resnet50 run 7: 3 tries.*above 0.2 cores \(0.50, 0.50, 0.50\)"):
        gate.measure(run, "resnet50 run 7")
    assert gate.repeats == 3


def test_gives_up_when_the_machine_never_becomes_quiet():
    m = FakeMachine()
    m.other = 1.0

    def run():
        m.advance(1.0)

    gate = _gate(m, threshold_cores=0.2, max_attempts=5, max_wait_s=30.0)
    with pytest.raises(NotQuietError, match=r"stayed busy for 30 s of waiting \(other load 1.00 cores"):
        gate.measure(run, "x")
    assert gate.waited_s == pytest.approx(30.0)


@pytest.mark.parametrize("kw", [{"threshold_cores": 0}, {"max_attempts": 0}, {"max_wait_s": -1}])
def test_bad_bounds_are_refused(kw):
    with pytest.raises(ValueError, match="quiet gate"):
        QuietGate(**kw)


def test_reads_this_machine():
    """On Linux the default reader works for this process (busy time and own time grow)."""
    import os

    gate = QuietGate(pids=[os.getpid()])
    r0 = gate.read()
    sum(i * i for i in range(200_000))
    r1 = gate.read()
    assert r1.t > r0.t and r1.busy_s >= r0.busy_s and r1.own_s >= r0.own_s


def test_a_single_quiet_second_inside_a_burst_is_not_enough():
    """Other work alternating 1 s busy / 1 s idle never gives 5 quiet seconds in a row:
    the gate keeps waiting (and gives up at its bound) rather than retrying in the gaps."""
    m = FakeMachine()
    state = {"n": 0}

    def sleep(dt):
        state["n"] += 1
        m.other = 1.0 if state["n"] % 2 else 0.0
        m.advance(dt)

    def run():
        m.other = 1.0
        m.advance(1.0)

    gate = QuietGate(reader=m.read, sleep=sleep, threshold_cores=0.2, max_attempts=3, max_wait_s=20.0)
    with pytest.raises(NotQuietError, match="stayed busy for 20 s"):
        gate.measure(run, "x")
    assert gate.repeats == 1  # no retry happened in the 1 s gaps


def test_a_stopped_collection_resumes_with_the_same_plan_only(tmp_path):
    """collect_subtasks keeps each finished type in out/.partial/; a rerun with the same
    plan takes the finished prefix, another plan starts afresh."""
    import json

    from gmm_volunteer.fitting.collect.subtasks import _load_partial

    key = {"types": ["a", "b", "c"], "batch_sizes": [1, 2], "gate": {"threshold_cores": 0.4}}
    (tmp_path / "plan.json").write_text(json.dumps(key))
    (tmp_path / "a.json").write_text(json.dumps({"runs": [1]}))
    (tmp_path / "c.json").write_text(json.dumps({"runs": [3]}))  # b missing: c is not trusted
    assert _load_partial(tmp_path, key) == {"a": {"runs": [1]}}
    assert _load_partial(tmp_path, {**key, "batch_sizes": [1, 2, 4]}) == {}
    assert _load_partial(tmp_path / "none", key) == {}
