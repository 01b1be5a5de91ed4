"""The simulator's prediction error against the testbed (docs/validation.md section 6).

For each case (a testbed config), the testbed's stores over a few seeds are compared with
the simulator on the same config (the `testbed:` section is the simulator's to ignore)
over many seeds: completed, abandoned and dropped requests per run, latency of completed
requests (mean, P50, P95, P99; pooled over the runs, all types and per request type),
and the server's CPU. Error = (simulator - testbed) / testbed.

    python -m gmm_volunteer.testbed.compare RESULTS_DIR CONFIG... [--sim-seeds 50]
        [--figure PATH] [--result-files PREFIX] [--calibration CASE,... --candidate S ...]
        [--variant S ...] [--from-step N]

reads RESULTS_DIR/<config stem>-seed<s>.zarr (written by `gmmv testbed`), prints the
tables, and writes the figure of the two latency distributions per case. The headline
(`verdict`) judges each case within target, outside, or cannot decide; with
--calibration and --candidate, the simulator's setting is chosen on the calibration cases
alone and the others are predicted with it (the held-out protocol). --variant sets other
settings beside the kept one, each with its signed errors (a mechanism measured by what it
changes); --from-step counts only the requests that started at that step or later.
Where every run of a case drew the simulator's users of its seed (testbed.draws: keyed),
the headline judges the case on pairs: each testbed run beside the simulator's run of its
seed (`verdict.judge_paired`).
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from pathlib import Path

import numpy as np

from gmm_volunteer.model.constants import CPU, OUTCOMES
from gmm_volunteer.testbed import report, speed, verdict

QUANTILES = (0.5, 0.95, 0.99)


def _stats(datasets, from_step: int = 0) -> dict:
    """Per-run counts, pooled latencies and each run's latency statistics
    (`_latency_stats`) of a list of result datasets, of the requests that started at step
    `from_step` or later (0: all; a later step leaves out the warm-up, when volunteers
    download their models and the testbed's load their sessions)."""
    from gmm_volunteer.io import conventions

    per_run = {o: [] for o in OUTCOMES}
    cpu, lat, lat_type, lat_runs = [], [], [], []
    for ds in datasets:
        records = conventions.flat_requests(ds)
        counted = records["request_start"] >= from_step
        out = np.where(counted, records["request_outcome"], -1)
        for i, o in enumerate(OUTCOMES):
            per_run[o].append(int((out == i).sum()))
        done = out == 0
        lat.append(records["request_latency"][done])
        lat_type.append(records[conventions.TYPE][done])
        lat_runs.append(_latency_stats(lat[-1]))
        cpu.append(float(np.asarray(ds["server_consumption"].values)[:, CPU].mean()))
    names = [str(v) for v in np.asarray(datasets[0][conventions.TYPE].values)]
    return {"runs": len(datasets), "counts": {o: np.array(v) for o, v in per_run.items()},
            "cpu": np.array(cpu), "latency": np.concatenate(lat), "type": np.concatenate(lat_type),
            "names": names, "latency_runs": np.array(lat_runs)}


def _latency_stats(lat: np.ndarray) -> list[float]:
    if lat.size == 0:
        return [float("nan")] * (1 + len(QUANTILES))
    return [float(lat.mean())] + [float(q) for q in np.quantile(lat, QUANTILES)]


def _simulate(config: Path, seeds, overrides=()) -> list:
    """The simulator's runs of `config` for `seeds` with `overrides`, made once: the
    held-out protocol's kept candidate is asked for again on the calibration cases."""
    return list(_simulated(str(config), tuple(seeds), tuple(overrides)))


@functools.lru_cache(maxsize=None)
def _simulated(config: str, seeds: tuple, overrides: tuple) -> tuple:
    from gmm_volunteer.io.results import build_dataset
    from gmm_volunteer.run.engine import simulate
    from gmm_volunteer.testbed.config import load_testbed

    out = []
    for s in seeds:
        cfg, _ = load_testbed(config, [*overrides, f"seed={s}"])
        out.append(build_dataset(simulate(cfg, progress=False)))
    return tuple(out)


def _cell(tb: float, tb_runs, sim: float, sim_runs, digits: int = 1) -> str:
    """``testbed [min, max over its runs] / simulator [5 %, 95 % of its runs] (error)``."""
    err = f"{(sim - tb) / tb * 100:+.0f} %" if tb else "no base"
    f = f".{digits}f"

    def rng(lo, hi):
        return f" [{lo:{f}}, {hi:{f}}]" if np.isfinite(lo) else ""

    tb_runs, sim_runs = np.asarray(tb_runs, float), np.asarray(sim_runs, float)
    t = rng(np.nanmin(tb_runs), np.nanmax(tb_runs)) if np.isfinite(tb_runs).any() else ""
    s = rng(*np.nanquantile(sim_runs, [0.05, 0.95])) if np.isfinite(sim_runs).any() else ""
    return f"{tb:{f}}{t} / {sim:{f}}{s} ({err})"


def _testbed_runs(results: Path, config: Path) -> tuple[list, list[str], list[Path]]:
    """The testbed's stores of one case: those kept, the names of those dropped because a
    process was killed for memory or lost (issue 33: such a run is not the config's
    system, and the comparison says so rather than average it in), and the kept ones' paths."""
    import json

    from gmm_volunteer.io.results import open_result

    kept, dropped, paths = [], [], []
    for p in sorted(results.glob(f"{config.stem}-seed*.zarr")):
        ds = open_result(p)
        account = json.loads(ds.attrs.get("testbed", "{}"))
        if sum(account.get("limits", {}).get("oom_kills", [])) or account.get("devices_lost"):
            dropped.append(p.name)
        else:
            kept.append(ds)
            paths.append(p)
    return kept, dropped, paths


def _scaled(overrides, speeds) -> list[str]:
    """`overrides` with the machine's speed in the runs at `speeds` (`testbed.speed`, D30);
    unchanged where the speeds are not measured (None)."""
    return [*overrides, speed.work_scale(speeds)] if speeds else list(overrides)


def _load(tb_ds, speeds=None) -> str:
    """The machine's 1-minute load average at the testbed runs' start, mean and range, and
    its CPU model (both recorded from 0.8.1), with its family and model numbers where
    recorded (0.8.3): the machine's CPU has changed between sessions under one name, and
    a batch's cost with it (docs/validation.md section 6)."""
    import json

    from gmm_volunteer.fitting.collect.procstat import cpu_label

    accounts = [json.loads(d.attrs["testbed"]) for d in tb_ds]
    loads = [a.get("load_average", {}).get("start", [None])[0] for a in accounts]
    loads = [x for x in loads if x is not None]
    cpus = sorted({cpu_label(a["machine"]["cpu_model"], a["machine"].get("cpu_ids")) for a in accounts
                   if "machine" in a})
    text = f"{np.mean(loads):.1f} [{min(loads):.1f}, {max(loads):.1f}]" if loads else "not recorded"
    if len(loads) < len(accounts):
        text += f" ({len(accounts) - len(loads)} of {len(accounts)} runs before 0.8.1 not recorded)"
    text += f"; {', '.join(cpus)}" if cpus else ""
    return text + (f"; speed {min(speeds):.2f}-{max(speeds):.2f} of the reference" if speeds else "")


def _per_run(stats: dict) -> dict:
    """The headline's measures, one value per run."""
    return {"completed per run": stats["counts"]["completed"], "mean latency (s)": stats["latency_runs"][:, 0],
            "P99 (s)": stats["latency_runs"][:, 3]}


def _keyed_seeds(tb_ds) -> list[int] | None:
    """The seeds of a case's testbed runs if every one drew the simulator's users of its
    seed (testbed.draws: keyed, 0.8.5 on), else None: the runs can then be paired."""
    import json

    seeds = []
    for d in tb_ds:
        if json.loads(d.attrs.get("testbed_config", "{}")).get("draws", "own") != "keyed":
            return None
        seeds.append(int(d.attrs["seed_entropy"]))
    return seeds


def _pairs(config: Path, tb_ds, overrides, speeds=None, from_step: int = 0) -> dict | None:
    """The simulator's runs of the testbed runs' seeds, in their order, each at its run's
    machine speed where `speeds` are given (D30); None where the runs are not keyed."""
    seeds = _keyed_seeds(tb_ds)
    if not seeds:
        return None
    if not speeds:
        return _stats(_simulate(config, seeds, overrides), from_step)
    return _stats([_simulate(config, [s], _scaled(overrides, [r]))[0] for s, r in zip(seeds, speeds)], from_step)


def _headline_row(case: str, role: str, tb: dict, sim: dict, dropped: list[str], load: str,
                  pairs: dict | None = None) -> list[str]:
    """One case of the headline; with `pairs` (the simulator's runs of the testbed runs'
    seeds, in their order) each measure is judged on the pairs (`verdict.judge_paired`)."""
    tb_m, sim_m = _per_run(tb), _per_run(pairs if pairs is not None else sim)
    judge = verdict.judge if pairs is None else verdict.judge_paired
    judged = {k: judge(tb_m[k], sim_m[k], target) for k, target in verdict.TARGETS.items()}
    runs = f"{tb['runs']} / {sim['runs']}" if pairs is None else f"{tb['runs']} paired with the simulator's seeds"
    runs += f" ({len(dropped)} dropped: {', '.join(dropped)})" if dropped else ""
    return [case, role, runs, load] + [verdict.cell(j) for j in judged.values()] + \
        [verdict.row_verdict(j["verdict"] for j in judged.values())]


def _case_means(tb_ds, config: Path, sim_seeds: int, overrides, from_step: int) -> tuple[dict, dict]:
    """The testbed's and the simulator's mean of each headline measure for one case."""
    sim_ds = _simulate(config, range(1000, 1000 + sim_seeds), overrides)
    tb_m, sim_m = _per_run(_stats(tb_ds, from_step)), _per_run(_stats(sim_ds, from_step))
    return ({k: float(np.nanmean(v)) for k, v in tb_m.items()}, {k: float(np.nanmean(v)) for k, v in sim_m.items()})


def calibrate(results: Path, configs: list[Path], calibration: list[str], candidates: list[str],
              sim_seeds: int, sim_overrides=(), from_step: int = 0, speeds=None) -> tuple[list[str], str]:
    """The held-out protocol's calibration (issue 33): each candidate setting of the
    simulator ("KEY=VALUE;KEY=VALUE") is run on the calibration cases only, and the one
    with the least mean |error| over their headline measures is kept for every case. The
    other cases are predicted with it untouched. Returns the kept overrides and the
    table of every candidate's errors."""
    cases = [c for c in configs if c.stem in calibration]
    runs = {c: _testbed_runs(results, c)[0] for c in cases}
    speeds = speeds or {}
    rows, scores = [], []
    for cand in candidates:
        errs = []
        for config in cases:
            if not runs[config]:
                continue
            tb, sim = _case_means(runs[config], config, sim_seeds,
                                  _scaled([*sim_overrides, *report.setting(cand)], speeds.get(config.stem)), from_step)
            errs.append([abs(sim[k] - tb[k]) / abs(tb[k]) for k in tb])
        score = float(np.mean(errs)) if errs else float("inf")
        scores.append(score)
        rows.append([cand or "(as configured)"] + [" / ".join(f"{e * 100:.0f} %" for e in row) for row in errs]
                    + [f"{score * 100:.1f} %"])
    best = int(np.argmin(scores))
    for r, row in enumerate(rows):
        row.append("kept" if r == best else "")
    head = ["candidate"] + [f"{c.stem}: abs. error of completed / mean / P99" for c in cases] + \
        ["mean abs. error", "chosen"]
    return report.setting(candidates[best]), report.markdown(head, rows)


def variants(results: Path, configs: list[Path], settings: list[str], sim_seeds: int, sim_overrides=(),
             from_step: int = 0, speeds=None) -> str:
    """Each setting ("KEY=VALUE;KEY=VALUE", on top of `sim_overrides`: the kept one) against
    every case's testbed runs, with the signed error of each headline measure: a mechanism
    measured by what the simulator predicts with and without it. Nothing is chosen here;
    a setting measured on a held-out case's own runs is a diagnosis, not a prediction."""
    runs = {c: _testbed_runs(results, c)[0] for c in configs}
    speeds = speeds or {}
    rows = []
    for setting in settings:
        for config in configs:
            if not runs[config]:
                continue
            tb, sim = _case_means(runs[config], config, sim_seeds,
                                  _scaled([*sim_overrides, *report.setting(setting)], speeds.get(config.stem)), from_step)
            cells = [f"{tb[k]:.1f} / {sim[k]:.1f}" + (f" ({(sim[k] - tb[k]) / tb[k] * 100:+.0f} %)" if tb[k] else "")
                     for k in tb]
            rows.append([setting or "(as set)", config.stem, f"{len(runs[config])} / {sim_seeds}"] + cells)
    head = ["setting", "case", "runs (testbed / sim)"] + [f"{k}: testbed / sim (error)" for k in
                                                          ("completed per run", "mean latency (s)", "P99 (s)")]
    return report.markdown(head, rows)


def compare(results: Path, configs: list[Path], sim_seeds: int = 50, figure: Path | None = None,
            sim_overrides=(), calibration=(), from_step: int = 0, speeds=None):
    """The tables of section 6: the headline (per case: testbed mean and 95 % interval,
    simulator, error and verdict of completions, mean latency and P99; `verdict`), the
    detailed one, per request type, and where the time goes. Requests count from
    `from_step` on (`_stats`); the CPU columns and where the time goes take whole runs."""
    rows, type_rows, curves, mech_rows, head_rows = [], [], [], [], []
    for config in configs:
        tb_ds, dropped, _ = _testbed_runs(results, config)
        rs = (speeds or {}).get(config.stem)
        for name in dropped:
            print(f"{config.stem}: {name} dropped: a process was killed for memory or lost", file=sys.stderr)
        role = ("calibration" if config.stem in calibration else "held-out") if calibration else ""
        if not tb_ds:
            print(f"{config.stem}: no testbed stores kept in {results}", file=sys.stderr)
            if dropped:  # the case stays in the headline, with nothing to judge
                head_rows.append([config.stem, role, f"0 / - ({len(dropped)} dropped: {', '.join(dropped)})", "-"]
                                 + ["-"] * len(verdict.TARGETS) + [verdict.UNDECIDED])
            continue
        sim_ds = _simulate(config, range(1000, 1000 + sim_seeds), _scaled(sim_overrides, rs))
        tb, sim = _stats(tb_ds, from_step), _stats(sim_ds, from_step)
        pairs = _pairs(config, tb_ds, sim_overrides, rs, from_step)
        head_rows.append(_headline_row(config.stem, role, tb, sim, dropped, _load(tb_ds, rs), pairs))
        row = [config.stem, f"{tb['runs']} / {sim['runs']}"]
        for o in OUTCOMES:
            c, cs = tb["counts"][o], sim["counts"][o]
            row.append(_cell(c.mean(), c, cs.mean(), cs))
        # latency: pooled over the runs; the ranges are of the per-run values
        tb_runs, sim_runs = tb["latency_runs"], sim["latency_runs"]
        for i, (t, s) in enumerate(zip(_latency_stats(tb["latency"]), _latency_stats(sim["latency"]))):
            row.append(_cell(t, tb_runs[:, i], s, sim_runs[:, i]))
        row.append(_cell(tb["cpu"].mean(), tb["cpu"], sim["cpu"].mean(), sim["cpu"]))
        rows.append(row)
        for k, name in enumerate(tb["names"]):
            t = _latency_stats(tb["latency"][tb["type"] == k])
            s = _latency_stats(sim["latency"][sim["type"] == k])
            n_t, n_s = int((tb["type"] == k).sum()), int((sim["type"] == k).sum())
            type_rows.append([config.stem, name, f"{n_t} / {n_s / sim['runs'] * tb['runs']:.0f}",
                              _cell(t[0], [np.nan], s[0], [np.nan]), _cell(t[3], [np.nan], s[3], [np.nan])])
        curves.append((config.stem, tb["latency"], sim["latency"]))
        with warnings.catch_warnings():  # nan means of a node class with no subtask
            warnings.simplefilter("ignore", RuntimeWarning)
            mech_rows.append([config.stem] + _mechanisms(tb_ds, sim_ds))
    head = ["case", "runs (testbed / sim)"] + [f"{o} per run" for o in OUTCOMES] + \
        ["mean latency (s)", "P50 (s)", "P95 (s)", "P99 (s)", "server CPU (%)"]
    table = report.markdown(head, rows)
    type_table = report.markdown(["case", "request type", "completed (testbed / sim, same runs)",
                                  "mean latency (s)", "P99 (s)"], type_rows)
    mech_table = report.markdown(["case", "subtasks on volunteers (%)", "server CPU-s per subtask",
                                  "volunteer CPU-s per subtask", "server CPU-s outside executions per step",
                                  "volunteer CPU-s outside executions per run",
                                  "volunteer CPU outside executions per online volunteer-second (% of a core; "
                                  "mean [min, max] over runs)",
                                  "volunteer CPU beside its executions, inside completed work (% of a core "
                                  "while executing; mean [min, max])",
                                  "quota throttling per volunteer (s)"],
                                 mech_rows)
    headline = report.markdown(["case", "set", "runs (testbed / sim)", "load at start (1 min); CPU"]
                               + [f"{k}: testbed ± 95 % / sim (error, verdict; target {t * 100:.0f} %)"
                                  for k, t in verdict.TARGETS.items()] + ["case verdict"], head_rows)
    if figure is not None and curves:
        report.figure(curves, figure)
    return headline, table, type_table, mech_table


def _mechanisms(tb_ds, sim_ds) -> list[str]:
    """Where the time goes: the share of subtasks on volunteers, the CPU an execution
    took (measured around the ONNX Runtime call; the simulator's drawn work), and, in the
    testbed only, the CPU its processes used outside executions (HTTP, polling, session
    loading), the volunteers' also per online volunteer-second (what
    `execution.volunteer_overhead_cpu` reads, docs/model.md D31), the part of it taken
    while a batch executed (inside the batch's counted CPU), and how long the quotas
    throttled the volunteers."""
    def per(ds_list, fn):
        return np.array([fn(d) for d in ds_list], float)

    def share(d):
        done = np.asarray(d["subtask_events"].sel(event="complete").sum("time").values, float)
        return 100 * done[1] / done.sum() if done.sum() else np.nan

    def work_per(d, k):
        done = float(d["subtask_events"].sel(event="complete").sum("time").values[k])
        return float(d["completed_work"].sum("time").values[k]) / done if done else np.nan

    def outside(d, k):
        cpu = np.asarray(d["node_cpu"].values, float) / 100  # CPU-s per step
        used = cpu[:, 0].sum() if k == 0 else cpu[:, 1:].sum()
        return used - float(d["completed_work"].sum("time").values[k])

    import json

    def throttled(d):
        return float(np.mean(json.loads(d.attrs["testbed"])["limits"]["throttled_s"][1:]))

    out = [_cell(np.nanmean(per(tb_ds, share)), per(tb_ds, share), np.nanmean(per(sim_ds, share)), per(sim_ds, share))]
    for k in (0, 1):
        t, s = per(tb_ds, lambda d: work_per(d, k)), per(sim_ds, lambda d: work_per(d, k))
        out.append(_cell(np.nanmean(t), t, np.nanmean(s), s, digits=3))
    steps = tb_ds[0].sizes["time"]
    out.append(f"{np.mean(per(tb_ds, lambda d: outside(d, 0))) / steps:.3f}")
    out.append(f"{np.mean(per(tb_ds, lambda d: outside(d, 1))):.1f}")

    def online_share(d):  # % of a core per online volunteer-second (docs/model.md D31)
        online = float(d["online_users"].sum())
        return 100 * outside(d, 1) / online if online else np.nan

    def beside_share(d):
        """% of a core the volunteer's other threads took while a batch executed: the
        process's CPU over the batch (what `completed_work` counts, one batch at a time)
        less the executing thread's, over the batches' wall time."""
        rows = [r for dev in json.loads(d.attrs["testbed"]).get("batches", {}).get("devices", []) for r in dev]
        busy = sum(r[4] for r in rows)
        return 100 * sum(r[2] - r[3] for r in rows) / busy if busy else np.nan

    for fn in (online_share, beside_share):
        shares = per(tb_ds, fn)
        out.append("nan" if np.isnan(shares).all() else
                   f"{np.nanmean(shares):.2f} [{np.nanmin(shares):.2f}, {np.nanmax(shares):.2f}]")
    out.append(f"{np.mean(per(tb_ds, throttled)):.1f}")
    return out


def check_arguments(args) -> str | None:
    """What is wrong with the command's arguments, found before anything is simulated or
    written (None when nothing is): RESULTS a folder holding, for every config, testbed
    stores that are not all dropped; the configs, ``--sim-set`` and each candidate's and
    variant's overrides loading as testbed configs; ``--sim-seeds`` at least 1; and every
    file the command would write held to the rules of output files
    (`cli.outputs.check_file_target`: not an input, not through a link, not a file gmmv
    did not write)."""
    from gmm_volunteer.cli.errors import CommandError
    from gmm_volunteer.cli.outputs import check_file_target, check_result_target, is_figure_file
    from gmm_volunteer.io.results import open_result
    from gmm_volunteer.run.config import ConfigError
    from gmm_volunteer.testbed.config import load_testbed

    if args.sim_seeds < 1:
        return f"--sim-seeds: {args.sim_seeds}; the simulator needs at least 1 seed"
    if not args.results.is_dir():
        return f"RESULTS {args.results}: {'not a folder' if args.results.exists() else 'no such folder'}"
    settings = [("--sim-set", "")] + [(f"--candidate {c!r}", c) for c in args.candidate] + \
        [(f"--variant {v!r}", v) for v in args.variant]
    for config in args.configs:
        if not config.is_file():
            return f"CONFIG {config}: {'not a file' if config.exists() else 'no such file'}"
        for option, text in settings:
            try:
                load_testbed(config, [*args.sim_set, *report.setting(text)])
            except (ConfigError, OSError, ValueError) as exc:
                return f"{option}: {exc}"
        stores = sorted(args.results.glob(f"{config.stem}-seed*.zarr"))
        if not stores:
            return f"RESULTS {args.results}: holds no testbed store of {config.stem} ({config.stem}-seed*.zarr)"
        for store in stores:
            try:
                attrs = open_result(store).attrs
            except Exception as exc:  # noqa: BLE001 (a damaged store: any reader error)
                return f"{store}: cannot be read as a result store ({type(exc).__name__}: {exc})"
            if "testbed" not in attrs:
                return f"{store}: a simulator's store, not a testbed run's (it records no testbed account)"
        if not _testbed_runs(args.results, config)[0]:
            return f"RESULTS {args.results}: every testbed store of {config.stem} was dropped (a process killed)"
    inputs = [args.results, *args.configs]
    targets = []
    if args.headline_file is not None:
        stem = str(args.headline_file).removesuffix(".md")
        targets += [("--headline-file", f"{stem}.md")] + ([("--headline-file", f"{stem}-calibration.md")]
                                                            if args.candidate else [])
    if args.result_files is not None:
        targets += [("--result-files", f"{args.result_files}{s}.md") for s in ("", "-types", "-mechanisms")]
    if args.variants_file is not None:
        targets.append(("--variants-file", f"{str(args.variants_file).removesuffix('.md')}.md"))
    try:
        for option, target in targets:
            check_result_target(target, option, inputs)
        if args.figure is not None:
            check_file_target(args.figure, "--figure", inputs, ours=is_figure_file, what="figure")
    except CommandError as exc:
        return str(exc)
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path)
    p.add_argument("configs", type=Path, nargs="+")
    p.add_argument("--sim-seeds", type=int, default=50)
    p.add_argument("--figure", type=Path)
    p.add_argument("--sim-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key for the simulator only, e.g. model=DIR (repeatable)")
    p.add_argument("--result-files", metavar="PREFIX", type=Path,
                   help="also write the tables as committed result files PREFIX.md, PREFIX-types.md, "
                        "PREFIX-mechanisms.md (docs/results/README.md)")
    p.add_argument("--headline-file", metavar="PATH", type=Path,
                   help="also write the headline (each case within target, outside, or cannot decide) as a "
                        "committed result file, and with --candidate the calibration beside it as "
                        "PATH-calibration.md")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE;KEY=VALUE",
                   help="a simulator setting to set beside the kept one (repeatable; '' for the simulator's own "
                        "setting): each case's signed errors under it, a table of its own")
    p.add_argument("--variants-file", metavar="PATH", type=Path,
                   help="also write the variants' table as a committed result file")
    p.add_argument("--from-step", type=int, default=0, metavar="N",
                   help="count only the requests that started at step N or later, on both sides (leaves out "
                        "the warm-up: model downloads and session loads); the CPU columns take whole runs")
    p.add_argument("--made-by", default=None, help="the command(s) to record in the result files")
    p.add_argument("--calibration", default="", metavar="CASE,CASE",
                   help="the held-out protocol: the cases (config stems) the simulator may be calibrated on; "
                        "the others are labelled held-out")
    p.add_argument("--candidate", action="append", default=[], metavar="KEY=VALUE;KEY=VALUE",
                   help="a simulator setting to try on the calibration cases (repeatable; '' for none); the "
                        "best is kept for every case")
    p.add_argument("--speed-reference", metavar="BUNDLE", type=Path,
                   help="predict each run at its machine's speed (docs/model.md D30): its sidecar "
                        "<store>.speed.txt (calibrate --cold, printed before the run) over this bundle's work, "
                        "the cold measurement the candidates' work derives from")
    args = p.parse_args(argv)
    calibration = [c for c in args.calibration.split(",") if c]
    stems = {c.stem for c in args.configs}
    unknown = [c for c in calibration if c not in stems]
    if unknown:
        p.error(f"--calibration: {', '.join(unknown)} is not among the configs' stems ({', '.join(sorted(stems))})")
    if args.variants_file is not None and not args.variant:
        p.error("--variants-file needs --variant (the settings to set beside the simulator's)")
    if args.from_step < 0:
        p.error(f"--from-step: {args.from_step} is negative (a step of the run, 0 counts every request)")
    if args.candidate and not calibration:
        p.error("--candidate needs --calibration (the cases to calibrate on)")
    problem = check_arguments(args)
    if problem:
        print(f"compare: {problem}", file=sys.stderr)
        return 2
    speeds = None
    if args.speed_reference is not None:
        try:
            from gmm_volunteer.testbed.batches import bundle_work

            reference = bundle_work(args.speed_reference)
            speeds = {c.stem: speed.store_speeds(_testbed_runs(args.results, c)[2], reference) for c in args.configs}
        except (speed.SpeedError, OSError, ValueError) as err:
            print(f"compare: --speed-reference: {err}", file=sys.stderr)
            return 2
    tables = {}
    if args.candidate:
        chosen, cal_table = calibrate(args.results, args.configs, calibration, args.candidate, args.sim_seeds,
                                      args.sim_set, args.from_step, speeds)
        print(cal_table)
        print()
        args.sim_set = [*args.sim_set, *chosen]
        tables["-calibration"] = (cal_table, "the held-out protocol's calibration")
    if args.variant:
        var_table = variants(args.results, args.configs, args.variant, args.sim_seeds, args.sim_set, args.from_step,
                             speeds)
        print(var_table)
        print()
        if args.variants_file is not None:
            report.write_results(args, {"": (var_table, "each setting's errors beside the kept one")},
                                 Path(str(args.variants_file).removesuffix(".md")), notes={"": report.VARIANTS_NOTE})
    headline, table, type_table, mech_table = compare(args.results, args.configs, args.sim_seeds, args.figure,
                                                      args.sim_set, calibration, args.from_step, speeds)
    if args.headline_file is not None:
        stem = str(args.headline_file).removesuffix(".md")
        report.write_results(args, {"": (headline, "per case: within target, outside, or cannot decide"), **tables},
                             Path(stem))
    if args.result_files is not None:
        report.write_results(args, {"": (table, "per case"), "-types": (type_table, "per request type"),
                                    "-mechanisms": (mech_table, "where the time goes")}, args.result_files,
                             notes={"": report.DEFAULT_NOTE})
    print(headline)
    print()
    print(table)
    print()
    print(type_table)
    print()
    print(mech_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
