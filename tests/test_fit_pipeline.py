"""End to end: synthetic traces with known parameters -> bundle (gmm_volunteer/fitting/fit.py)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import yaml

from gmm_volunteer.fitting.catalog import _round_above, execution_time_rank
from gmm_volunteer.fitting.fit import fit_bundle
from gmm_volunteer.fitting.synthetic import SyntheticSpec, execution_profile, write_synthetic_traces
from gmm_volunteer.fitting.traces import load_traces
from gmm_volunteer.io.bundlefiles import load_bundle, write_bundle

SPEC = SyntheticSpec(duration_s=900, n_types=3, batch_sizes=(1, 5), reps=3, download_reps=1)
GRID = ((1, 0), (2, 0))
DEGREES = (1, 2)
CREATED = "2026-01-01T00:00:00Z"
STAGES: list[str] = []  # what fit_bundle told its log, in order
PROGRESS: list[tuple[str, int, int]] = []  # (stage, done, total) of the ARMA fits
WARNINGS: list = []  # every warning the fit raised


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    import warnings

    root = tmp_path_factory.mktemp("fit")
    write_synthetic_traces(root / "traces", SPEC)
    stages = STAGES
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fit_bundle(root / "traces", root / "bundle", candidates=GRID, degrees=DEGREES, report=True,
                         created=CREATED, log=stages.append,
                         progress=lambda done, total, share: PROGRESS.append((stages[-1], done, total)))
    WARNINGS.extend(caught)
    data = yaml.safe_load((out / "bundle.yaml").read_text())
    return root, out, data


def test_fit_says_which_component_it_is_fitting(fitted):
    stages = STAGES
    wanted = ["reading and checking traces", "fitting allocation", "fitting consumption",
              "fitting the completion hazard", "fitting memory and work", "deriving task types",
              "writing the diagnostics report"]
    at = [next(i for i, s in enumerate(stages) if s.startswith(w)) for w in wanted]
    assert at == sorted(at), stages  # in the order they run


def test_fit_reports_progress_inside_the_arma_stages_and_no_library_warnings(fitted):
    from gmm_volunteer.fitting.consumption import STAGES as CONSUMPTION_STAGES
    from gmm_volunteer.fitting.traces import RESOURCE_COLUMNS

    expected = {"fitting allocation": len(RESOURCE_COLUMNS) * len(GRID),
                "fitting consumption": sum(len(r) for *_, r in CONSUMPTION_STAGES.values()) * len(GRID)}
    for prefix, total in expected.items():
        seen = [(d, t) for stage, d, t in PROGRESS if stage.startswith(prefix)]
        assert seen and {t for _, t in seen} == {total}, (prefix, seen)
        done = [d for d, _ in seen]
        assert done == sorted(done) and done[-1] == total  # counts up to the stage's total
    assert not [str(w.message) for w in WARNINGS], [f"{w.category.__name__}: {w.message}" for w in WARNINGS]


def test_bundle_validates_and_round_trips(fitted, tmp_path):
    root, out, data = fitted
    load_bundle(out)  # raises BundleError if the simulator could not read it
    again = write_bundle(data, tmp_path / "copy")
    assert (again / "bundle.yaml").read_text() == (out / "bundle.yaml").read_text()
    assert load_bundle(again).model_dump() == load_bundle(out).model_dump()


def test_refit_is_byte_identical(fitted, tmp_path):
    root, out, _ = fitted
    second = fit_bundle(root / "traces", tmp_path / "b2", candidates=GRID, degrees=DEGREES, report=False, created=CREATED)
    assert (second / "bundle.yaml").read_bytes() == (out / "bundle.yaml").read_bytes()


def test_allocation_mean_fraction_recovered(fitted):
    # The synthetic fraction is mean + 0.05 * AR(1, phi=0.9) on a 1 s grid, n = 901 s.
    # SE of a mean of an AR(1): sd * sqrt((1+phi)/(1-phi)/n) = 0.0073; allow 4 SE.
    _, _, data = fitted
    se = SPEC.fraction_sd * np.sqrt((1 + SPEC.phi) / (1 - SPEC.phi) / (SPEC.duration_s + 1))
    for res, col in (("band_in", "band_in_mbps"), ("cpu", "cpu_pct"), ("storage", "storage_mb")):
        assert abs(data["allocation"][res]["mean"] - SPEC.fraction_mean[col]) < 4 * se
        assert data["allocation"][res]["arma"]["order"] in ([1, 0], [2, 0])


def test_execution_memory_is_mean_plus_two_sd(fitted):
    # Synthetic execution memory: mean m(k, b) + 10 * AR(1, phi=0.7) noise per second.
    # With n rows per group and autocorrelation inflation f = (1+phi)/(1-phi):
    # SE(mean) = 10 sqrt(f/n), SE(sd) ~ 10 sqrt(f/(2n)); SE(mean + 2 sd) = sqrt(SE_m^2 + 4 SE_sd^2). 4 SE.
    root, _, data = fitted
    tr = load_traces(root / "traces")
    runs = tr.runs.set_index("run_id")
    ex = tr.consumption[tr.consumption.phase == "execution"]
    f = (1 + 0.7) / (1 - 0.7)
    for k, st in enumerate(data["subtask_types"]):
        assert st["memory"]["batch_sizes"] == list(SPEC.batch_sizes)
        for b, est in zip(st["memory"]["batch_sizes"], st["memory"]["execution_mb"]):
            sel = (runs.loc[ex.run_id, "subtask_type"].to_numpy() == st["name"]) & (runs.loc[ex.run_id, "batch_size"].to_numpy() == b)
            n = int(sel.sum())
            se = 10 * np.sqrt(f / n + 4 * f / (2 * n))
            truth = execution_profile(k, b)[1] + 2 * 10
            assert abs(est - truth) < 4 * se, (st["name"], b, est, truth, se)


def test_consumption_stats_shapes_and_levels(fitted):
    _, _, data = fitted
    stages = data["consumption"]["stages"]
    assert set(stages) == {"data_download", "input_download", "execution", "upload"}
    assert stages["execution"]["level"] == "batch_size" and stages["execution"]["levels"] == [1.0, 5.0]
    assert stages["upload"]["level"] == "band_out" and stages["upload"]["levels"] == list(SPEC.bandwidths_mbps)
    assert stages["data_download"]["levels"] == list(SPEC.download_levels_mbps)
    dd = stages["data_download"]["resources"]["band_in"]["stats"]["mean"]
    assert all(row == dd[0] for row in dd)  # data download does not depend on the subtask type
    cpu = np.array(stages["execution"]["resources"]["cpu"]["stats"]["mean"])
    truth = np.array([[execution_profile(k, b)[0] for b in SPEC.batch_sizes] for k in range(SPEC.n_types)])
    # cpu = m * (1 + 0.1 u): sd 0.1 m, AR(1) 0.7; rows per group >= 6 -> 4 SE <= 4 * 0.1 m * sqrt(5.7/6)
    assert np.all(np.abs(cpu - truth) < 4 * 0.1 * truth * np.sqrt(5.7 / 6))


def test_task_types_cycle_light_and_heavy(fitted):
    root, _, data = fitted
    ranked = [n for n, _ in execution_time_rank(load_traces(root / "traces"))]
    light, heavy = ranked[:2], ranked[2:]
    tt = {t["name"]: t["subtasks"] for t in data["task_types"]}
    assert list(tt) == ["light5", "light10", "heavy5", "heavy10"]
    assert tt["light5"] == [light[i % 2] for i in range(5)]
    assert tt["heavy10"] == heavy * 10


def test_hazard_block(fitted):
    _, _, data = fitted
    hz = data["hazard"]
    assert hz["degree"] in DEGREES
    assert {p: b["consumption_resource"] for p, b in hz["phases"].items()} == {
        "download": "band_in",
        "execution": "cpu",
        "upload": "band_out",
    }
    for b in hz["phases"].values():
        assert len(b["type_coef"]) == SPEC.n_types and b["type_coef"][0] == 0.0


def test_base_profile_rule(fitted):
    _, _, data = fitted
    prof = data["derived_base_profile"]
    assert (_round_above(374.0, 500), _round_above(500.0, 500), _round_above(2400.0, 500)) == (500, 1000, 2500)
    # heaviest synthetic type at batch size 2: memory 200 + 150*2 + 24 = 524 MB -> 1000 MB
    assert prof["memory_mb"] == 1000.0
    assert prof["paper_memory_mb"] == 2500.0 and prof["paper_cpu_pct"] == 200.0


def test_report_links_every_figure(fitted):
    _, out, _ = fitted
    md = (out / "report" / "report.md").read_text()
    for png in ("aic_grids.png", "acf.png", "survival.png", "memory.png"):
        assert (out / "report" / png).stat().st_size > 1000
        assert f"]({png})" in md


def test_cli_registers_fit():
    from gmm_volunteer.fitting.cli import add_subcommands

    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["fit", "traces/", "-o", "gmm_volunteer/bundles/default", "--quick"])
    assert args.quick and args.output == "gmm_volunteer/bundles/default" and callable(args.func)


def test_report_states_the_allocation_fractions(fitted):
    _, out, data = fitted
    md = (out / "report" / "report.md").read_text()
    assert "## Allocation fractions (paper 2.2)" in md
    for res, model in data["allocation"].items():
        assert f"| {res} | {float(model['mean']):.4g} | {float(model['sd']):.4g} |" in md
