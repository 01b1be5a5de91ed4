"""Availability laws fitted per device class from session traces (fitting/availability.py,
traces/FORMAT.md "availability/", paper section 2.2)."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import norm

from gmm_volunteer.fitting import availability as av
from gmm_volunteer.fitting.synthetic_availability import SAMPLE_CLASSES, SAMPLE_SEED, write_sample
from gmm_volunteer.fitting.traces import TraceError

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "traces" / "availability"


@pytest.fixture(scope="module")
def shipped():
    return av.fit_availability(SAMPLE)


def _z(fit: av.LawFit, truth: dict) -> dict[str, float]:
    return {k: (fit.params[k] - truth[k]) / fit.se[k] for k in fit.params}


def test_the_shipped_sample_is_what_its_command_writes(tmp_path):
    write_sample(tmp_path, seed=SAMPLE_SEED)
    with gzip.open(SAMPLE / "sessions.csv.gz") as a, gzip.open(tmp_path / "sessions.csv.gz") as b:
        assert a.read() == b.read()
    assert json.loads((SAMPLE / "window.json").read_text())["laws"] == json.loads(
        (tmp_path / "window.json").read_text())["laws"]
    assert json.loads((SAMPLE / "window.json").read_text())["synthetic"] is True


def test_fit_recovers_the_laws_the_shipped_sample_was_drawn_from(shipped):
    """Each class gets the family it was drawn from, and every parameter lies within
    z* standard errors of the truth, z* = Phi^-1(1 - 0.01 / (2 m)) for the m parameters
    (Bonferroni: a correct fit fails with probability at most 1 %)."""
    m = sum(len(SAMPLE_CLASSES[cf.name][s]) - 1 for cf in shipped for s in av.STATES)
    z_star = norm.ppf(1 - 0.01 / (2 * m))
    assert {cf.name for cf in shipped} == set(SAMPLE_CLASSES)
    for cf in shipped:
        for state in av.STATES:
            truth = SAMPLE_CLASSES[cf.name][state]
            chosen = cf.chosen(state)
            assert chosen.dist == truth["dist"], (cf.name, state, [f.dist for f in cf.candidates[state]])
            z = _z(chosen, truth)
            assert all(abs(v) < z_star for v in z.values()), (cf.name, state, z, z_star)
    shares = {cf.name: cf.share for cf in shipped}
    total = sum(c["devices"] for c in SAMPLE_CLASSES.values())
    assert shares == {n: c["devices"] / total for n, c in SAMPLE_CLASSES.items()}


def test_standard_errors_cover_the_truth_as_often_as_they_say(tmp_path):
    """Over 12 independent smaller samples (a quarter of the devices), the 95 % intervals
    (estimate ± 1.96 se) of the true family's parameters cover the truth in a share of
    cases within 3 binomial standard errors of 0.95."""
    classes = {k: dict(v, devices=max(v["devices"] // 4, 10)) for k, v in SAMPLE_CLASSES.items()}
    zs = []
    for rep in range(12):
        folder = write_sample(tmp_path / str(rep), classes, seed=1000 + rep)
        for cf in av.fit_availability(folder):
            for state in av.STATES:
                truth = classes[cf.name][state]
                fit = next(f for f in cf.candidates[state] if f.dist == truth["dist"])
                zs += list(_z(fit, truth).values())
    zs = np.array(zs)
    n = len(zs)
    covered = np.mean(np.abs(zs) < 1.96)
    assert abs(covered - 0.95) < 3 * math.sqrt(0.95 * 0.05 / n), (covered, n)


def _write(folder: Path, rows: list[str], window=(0.0, 100.0), **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / av.SESSIONS, "wt") as f:
        f.write("device,class,start_s,end_s\n" + "\n".join(rows) + "\n")
    (folder / av.WINDOW).write_text(json.dumps({"start_s": window[0], "end_s": window[1], **extra}))
    return folder


def test_spells_leave_out_what_began_before_the_window_and_censor_what_is_still_running(tmp_path):
    folder = _write(tmp_path, [
        "a,x,,10",      # online since before the window: left out; offline 10 -> 30 ended
        "a,x,30,50",    # online 20 ended; offline 50 -> 100 censored at the window's end
        "b,x,20,",      # online 80 censored
        "c,x,,",        # online for the whole window: tells nothing
    ])
    df, window = av.read_sessions(folder)
    sp = av.spells(df, window)["x"]
    on = sorted(zip(sp["online"].duration, sp["online"].ended))
    off = sorted(zip(sp["offline"].duration, sp["offline"].ended))
    assert on == [(20.0, True), (80.0, False)]
    assert off == [(20.0, True), (50.0, False)]


def test_kaplan_meier_without_censoring_is_the_empirical_survival():
    sp = av.Spells(np.array([3.0, 1.0, 2.0, 2.0]), np.ones(4, bool))
    t, s = av.kaplan_meier(sp)
    assert list(t) == [1.0, 2.0, 2.0, 3.0]
    assert np.allclose(s, [0.75, 0.5, 0.25, 0.0])  # at a tie, the last value is S(t)
    assert s[-1] == 0.0 and np.mean(sp.duration > 2.0) == s[2]


def test_exponential_fit_is_the_closed_form_with_censoring():
    rng = np.random.default_rng(3)
    t = rng.exponential(100.0, 400)
    ended = t < 150.0
    sp = av.Spells(np.minimum(t, 150.0), ended)
    fit = next(f for f in av.fit_spells(sp) if f.dist == "exponential")
    mle = sp.duration.sum() / ended.sum()  # total time over ended spells
    assert fit.params["mean"] == pytest.approx(mle, rel=1e-6)
    assert fit.se["mean"] == pytest.approx(mle / math.sqrt(ended.sum()), rel=1e-3)


@pytest.mark.parametrize("rows, window, match", [
    (["a,x,5,3"], (0, 100), "line 2: start_s is after end_s"),
    (["a,x,5,30", "a,x,20,40"], (0, 100), "device a: sessions overlap"),
    (["a,x,5,300"], (0, 100), "end_s: outside the window"),
    (["a,x,five,30"], (0, 100), "start_s: not a number at line 2"),
    (["a,,5,30"], (0, 100), "class: empty at line 2"),
    (["a,x,5,30"], (0, 100), "class x, online: 1 ended spells"),
])
def test_bad_sessions_are_named_by_file_line_and_column(tmp_path, rows, window, match):
    folder = _write(tmp_path, rows, window)
    with pytest.raises(TraceError, match=match):
        av.fit_availability(folder)


def test_a_window_without_an_end_is_named(tmp_path):
    folder = _write(tmp_path, ["a,x,5,30"])
    (folder / av.WINDOW).write_text('{"start_s": 0}')
    with pytest.raises(TraceError, match="window.json: needs numbers start_s and end_s"):
        av.fit_availability(folder)


def test_the_written_laws_are_a_valid_availability_section(shipped, tmp_path):
    """What `gmmv fit` writes to availability.yaml validates as each class's config."""
    from gmm_volunteer.fitting.fit import _availability_files

    files = _availability_files(shipped, SAMPLE, tmp_path, report=True)
    data = yaml.safe_load(files["availability.yaml"].read_text())
    assert [c["name"] for c in data["classes"]] == sorted(SAMPLE_CLASSES)
    assert (tmp_path / "report" / "availability.md").is_file()
    assert (tmp_path / "report" / "availability.png").stat().st_size > 0
    phone = next(c for c in data["classes"] if c["name"] == "phone")
    config = tmp_path / "phone.yaml"
    base = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    config.write_text(yaml.safe_dump({**base, "availability": phone["availability"]}))
    res = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "validate", str(config)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_starter_files_carry_the_sample():
    from gmm_volunteer.starter import starter_files

    files = starter_files(REPO)
    assert {"traces/availability/sessions.csv.gz", "traces/availability/window.json"} <= set(files)
