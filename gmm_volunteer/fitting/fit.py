"""`fit_bundle`: traces folder -> model bundle (docs/formats.md, section 1).

Everything is read and checked first (`gmm_volunteer.fitting.traces.load_traces`), then fitted in
memory; the bundle directory (bundle.yaml + report/) is written only at the end and
atomically by `gmm_volunteer.io.bundlefiles.write_bundle`, so a failed fit leaves nothing
behind and an existing bundle stays untouched until the new one is complete.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from gmm_volunteer.fitting.arma import FULL_GRID, QUICK_GRID
from gmm_volunteer.fitting.hazard import DEGREES, HAZARD_FORM, HAZARD_LINK
from gmm_volunteer.fitting.traces import TraceError, load_traces
from gmm_volunteer.model.constants import RESOURCES


def _created(created: str | None) -> str:
    if created is not None:
        return created
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = _dt.datetime.fromtimestamp(int(epoch), _dt.UTC) if epoch else _dt.datetime.now(_dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _provenance(traces, traces_dir, candidates, degrees, hazard_form=HAZARD_FORM, hazard_link=HAZARD_LINK) -> str:
    m = traces.machine
    grid = "full ARMA grid" if set(candidates) == set(FULL_GRID) else f"reduced ARMA grid {sorted(candidates)}"
    levels = sorted(set(traces.downloads["level_mbps"].tolist()))
    return (
        f"fitted by `gmmv fit {traces_dir}` from resources/ ({m.get('cpu_model', '?')}, {m.get('date', '?')}, "
        f"{len(traces.resources)} samples), subtasks/ ({len(traces.runs)} runs of {len(traces.catalog)} subtask types), "
        f"downloads/ ({traces.downloads['run_id'].nunique()} downloads at {levels} Mbit/s); {grid}; "
        f"hazard degrees {list(degrees)}, execution form {hazard_form}, link {hazard_link}"
        + ("; download levels marked preliminary in levels.json" if (traces.levels or {}).get("preliminary") else "")
        + quota_provenance(traces)
    )


def quota_provenance(traces) -> str:
    """The provenance's words on the traces' quota/ collections (D38), empty without them."""
    q = traces.quota_runs
    if q is None:
        return ""
    quotas = ", ".join(f"{v:g}" for v in sorted(set(q["cpu_quota_pct"])))
    return f"; quota/ ({len(q)} execution runs at CPU quotas {quotas} %, read by the execution hazard alone, D38)"


def _worker_init() -> None:
    from gmm_volunteer.fitting.determinism import single_threaded

    single_threaded().__enter__()  # for the life of the worker: one BLAS thread, as in the parent


@contextlib.contextmanager
def _candidates_in_processes(workers: int):
    """With `workers` >= 2, the ARMA candidates of each series fitted side by side in that
    many worker processes (`arma.candidate_pool`; spawned: nothing of this process's
    state but the environment, the pinned BLAS threads included); in this process
    otherwise. The same fits on the same series, taken in the grid's order: the bundle
    is that of one process."""
    if workers < 2:
        yield
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from gmm_volunteer.fitting.arma import candidate_pool
    from gmm_volunteer.fitting.determinism import one_thread_in_children

    with one_thread_in_children(), ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init) as pool, candidate_pool(pool):
        yield


def build_bundle(traces, traces_dir, candidates=FULL_GRID, degrees=DEGREES, created: str | None = None,
                 log: Callable[[str], None] | None = None,
                 progress: Callable[[int, int, float], None] | None = None, workers: int = 1,
                 hazard_form: str = HAZARD_FORM, hazard_link: str = HAZARD_LINK) -> tuple[dict, dict]:
    """Fit every component; return (bundle dict, diagnostics for the report).

    `log(message)` is told which component is being fitted before each one starts;
    `progress(done, total, work_share)` of the ARMA candidates decided inside the two long
    stages, `work_share` the share of the stage's expected work done (`arma.candidate_work`
    of the candidates fitted, over that of every candidate not yet ruled out). With
    `workers` >= 2 the candidates of each series in the two long stages (allocation and
    consumption series) are fitted side by side in that many processes; the bundle is
    the same."""
    say = log or (lambda message: None)
    from gmm_volunteer.fitting.arma import candidate_progress, grid_work
    from gmm_volunteer.fitting.consumption import STAGES
    from gmm_volunteer.fitting.traces import RESOURCE_COLUMNS

    def counted(n_series: int):
        total, work = n_series * len(set(candidates)), n_series * grid_work(candidates)
        done = {"n": 0, "fitted": 0, "skipped": 0}

        def tick(decided) -> None:
            for key, value in zip(("n", "fitted", "skipped"), decided):
                done[key] += value
            if progress is not None:
                expected = max(work - done["skipped"], 1)
                progress(min(done["n"], total), total, min(done["fitted"] / expected, 1.0))

        return candidate_progress(tick)

    from gmm_volunteer.fitting.catalog import derived_base_profile, subtask_type_blocks, task_type_blocks
    from gmm_volunteer.fitting.consumption import fit_allocation, fit_consumption
    from gmm_volunteer.fitting.hazard_select import fit_hazard
    from gmm_volunteer.fitting.memory import memory_blocks
    from gmm_volunteer.fitting.work import work_blocks

    grid = f"{len(candidates)} ARMA (p, q) candidates per series" + (
        f", fitted in {workers} processes" if workers >= 2 else "")
    n_alloc = len(RESOURCE_COLUMNS)
    n_cons = sum(len(resources) for *_, resources in STAGES.values())
    with _candidates_in_processes(workers):
        say(f"fitting allocation series (resources available for volunteering; {grid})")
        with counted(n_alloc):
            allocation, alloc_diag = fit_allocation(traces, candidates)
        say(f"fitting consumption series (per subtask type and resource; {grid})")
        with counted(n_cons):
            consumption, cons_diag = fit_consumption(traces, candidates)
    say(f"fitting the completion hazard (degrees {list(degrees)}, each batch size left out in turn)")
    hazard, hazard_diag = fit_hazard(traces, degrees, hazard_form, hazard_link)
    say("fitting memory and work per subtask type")
    memory = memory_blocks(traces)
    work, work_diag = work_blocks(traces)
    say("deriving task types and the base profile")
    task_types, groups = task_type_blocks(traces)
    profile, profile_detail = derived_base_profile(traces)
    bundle = {
        "format": "gmmv-model-bundle",
        "format_version": 2,
        "provisional": False,
        "created": _created(created),
        "provenance": _provenance(traces, traces_dir, candidates, degrees, hazard_form, hazard_link),
        "resources": list(RESOURCES),
        "allocation": allocation,
        "subtask_types": subtask_type_blocks(traces, memory, work),
        "task_types": task_types,
        "consumption": consumption,
        "hazard": hazard,
        "derived_base_profile": profile,
    }
    diag = {
        "series": alloc_diag + cons_diag,
        "hazard": hazard_diag,
        "work": work_diag,
        "groups": groups,
        "profile": profile_detail,
    }
    return bundle, diag


def fit_bundle(
    traces_dir,
    out_dir,
    candidates=FULL_GRID,
    degrees=DEGREES,
    report: bool = True,
    created: str | None = None,
    log: Callable[[str], None] | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    workers: int = 1,
    hazard_form: str = HAZARD_FORM,
    hazard_link: str = HAZARD_LINK,
) -> Path:
    """Fit a bundle from `traces_dir` and write it to `out_dir` (atomically).

    Raises `TraceError` (naming the file and column) on unusable traces; nothing is
    written then. `candidates` is the ARMA (p, q) grid (`QUICK_GRID` for a fast fit).
    `log(message)` hears of each stage before it starts, `progress(done, total,
    work_share)` of the ARMA fits inside the long stages (`build_bundle`; `workers` >= 2
    fits each series' candidates side by side, with the same result).
    """
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.model.bundle import validate_bundle

    say = log or (lambda message: None)
    say(f"reading and checking traces in {traces_dir}")
    traces = load_traces(traces_dir)
    classes = _fit_availability(traces_dir, say)  # seconds, and bad sessions fail before the long stages
    from gmm_volunteer.fitting.determinism import single_threaded

    with single_threaded():  # the same traces give the same bundle, run to run
        bundle, diag = build_bundle(traces, traces_dir, candidates, degrees, created, log=log, progress=progress,
                                    workers=workers, hazard_form=hazard_form, hazard_link=hazard_link)
    model = validate_bundle(bundle, str(Path(out_dir) / "bundle.yaml"))
    say("checking the execution hazard against the traces")
    from gmm_volunteer.fitting.hazard_check import quota_table
    from gmm_volunteer.fitting.hazard_select import checks_of_fit

    diag["hazard"]["checks_text"], passed = checks_of_fit(model, traces, diag["hazard"])
    diag["hazard"]["quota_text"] = quota_table(model, traces)
    if not passed:
        import sys

        print(diag["hazard"]["checks_text"], file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="gmmv-fit-report-"))
    try:
        extra = {}
        if classes is not None:
            extra.update(_availability_files(classes, traces_dir, tmp, report))
        if report:
            from gmm_volunteer.fitting.report import write_report

            say("writing the diagnostics report")

            write_report(bundle, diag, traces, tmp / "report")
            extra["report"] = tmp / "report"
        return write_bundle(bundle, out_dir, extra_files=extra)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fit_availability(traces_dir, say):
    """The availability laws per device class, when the traces hold `availability/`
    (`fitting.availability`); None otherwise. Raises `TraceError` before anything is written."""
    from gmm_volunteer.fitting import availability

    folder = Path(traces_dir) / availability.FOLDER
    if not folder.exists():
        return None
    say(f"fitting the availability laws per device class from {folder}")
    return availability.fit_availability(folder)


def _availability_files(classes, traces_dir, tmp: Path, report: bool) -> dict:
    """`availability.yaml` (the chosen laws, as the config writes them) and its report."""
    import yaml

    from gmm_volunteer.fitting import availability

    source = Path(traces_dir) / availability.FOLDER
    path = tmp / "availability.yaml"
    header = (f"# Availability laws per device class, fitted by `gmmv fit` from {source}\n"
              "# (paper section 2.2; docs/fitting.md, 'Availability'). Each class's laws go in a\n"
              "# config's `availability:` section.\n")
    path.write_text(header + yaml.safe_dump(availability.classes_config(classes), sort_keys=False))
    files = {"availability.yaml": path}
    if report:
        availability.write_report(classes, tmp / "report", str(source))  # beside the bundle's report
    return files


__all__ = ["fit_bundle", "build_bundle", "TraceError", "FULL_GRID", "QUICK_GRID"]
