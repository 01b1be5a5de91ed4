"""`gmmv sweep`, `gmmv combine`, `gmmv report`, `gmmv capacity` (docs/experiments.md).

Added to the `gmmv` parser by `gmm_volunteer.cli`. Handlers return 0 on success; bad
input raises `CommandError` (exit 2); a sweep with failed runs and a capacity search
whose targets are not met within the range return 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _command_error():
    from gmm_volunteer.cli import CommandError

    return CommandError


def _cmd_sweep(args: argparse.Namespace) -> int:
    from gmm_volunteer.config import ConfigError, parse_override
    from gmm_volunteer.results import is_complete
    from gmm_volunteer.sweep import GridError, SchedulerUnreachable, load_grid, run_sweep

    CommandError = _command_error()
    if args.workers is not None and args.workers < 1:
        raise CommandError(f"--workers must be >= 1 (got {args.workers})")

    try:
        overrides = dict(parse_override(o, "--set") for o in args.set)
        if isinstance(overrides.get("model"), str):  # like `gmmv run --set`: relative to here
            overrides["model"] = str(Path(overrides["model"]).expanduser().resolve())
        grid = load_grid(args.grid, output=args.output, overrides=overrides)
    except (GridError, ConfigError) as exc:
        raise CommandError(str(exc)) from None
    if args.dry_run:
        for r in grid.runs():
            state = "complete" if is_complete(r.path) else "to run"
            print(f"{state:9} {r.path}")
        return 0
    where = args.scheduler or ("this process" if args.serial else
                               f"a local cluster of {args.workers or os.cpu_count() or 1} worker processes")
    n = len(grid.runs())
    print(f"sweep {grid.source}: {n} runs over {', '.join(f'{k}={len(v)}' for k, v in grid.coords().items())} "
          f"-> {grid.output} (on {where})", file=sys.stderr)
    try:
        report = run_sweep(grid, address=args.scheduler, workers=args.workers, serial=args.serial,
                           progress=not args.quiet, combine=not args.no_combine)
    except SchedulerUnreachable as exc:
        raise CommandError(str(exc)) from None
    print(report.text())
    return 0 if report.ok else 1


def _cmd_combine(args: argparse.Namespace) -> int:
    from gmm_volunteer.combine import write_combined

    CommandError = _command_error()
    try:
        path = write_combined(args.output_dir, args.out)
    except FileNotFoundError as exc:
        raise CommandError(str(exc)) from None
    print(f"wrote {path}")
    return 0


def _open_results(path: str):
    from gmm_volunteer.combine import combine, open_combined
    from gmm_volunteer.results import IncompleteResultError, is_complete

    CommandError = _command_error()
    p = Path(path)
    try:
        if (p / "sweep.json").is_file() and not is_complete(p / "combined.zarr"):
            return combine(p)  # runs missing or not yet combined: combine what is there
        ds = open_combined(p)
    except (FileNotFoundError, IncompleteResultError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if "run_complete" not in ds:
        raise CommandError(f"{path}: not a combined sweep dataset (run `gmmv sweep` first; "
                           "for one run use `gmmv summarize`)")
    return ds


def _cmd_report(args: argparse.Namespace) -> int:
    from gmm_volunteer.report import write_report

    ds = _open_results(args.results)
    out = write_report(ds, args.output, title=args.title)
    print(f"wrote {out}")
    return 0


def _cmd_capacity(args: argparse.Namespace) -> int:
    from gmm_volunteer.capacity import find_capacity, parse_targets
    from gmm_volunteer.config import ConfigError, load_config

    CommandError = _command_error()
    try:
        targets = parse_targets(args.p99)
    except ValueError as exc:
        raise CommandError(f"--p99: {exc}") from None
    try:
        cfg = load_config(args.config, args.set or ())
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    seeds = list(range(args.seeds)) if args.seed_list is None else args.seed_list
    print(f"capacity search: P{100 * args.quantile:g} targets "
          + ", ".join(f"{'every type' if k == '*' else k} <= {v:g}s" for k, v in targets.items())
          + f", {100 * args.confidence:g}% confidence, seeds {seeds}, range [{args.lo:g}, {args.hi:g}]x",
          file=sys.stderr)
    try:
        res = find_capacity(cfg, targets, quantile=args.quantile, confidence=args.confidence,
                            seeds=seeds, lo=args.lo, hi=args.hi, rel_tol=args.tol,
                            completed_only=args.completed_only, workers=args.workers)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    print(res.text().splitlines()[-1])
    return 0 if res.capacity is not None else 1


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of configs (local cores or a Dask cluster)",
        description="Expand a base config over a grid and seeds, run every run whose store "
                    "is not complete, then combine them (docs/experiments.md).",
    )
    p.add_argument("grid", metavar="GRID", help="grid file (YAML)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="address of a running Dask scheduler, e.g. tcp://host:8786 "
                        "(default: a local cluster on this machine)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="local worker processes (default: all cores)")
    p.add_argument("--serial", action="store_true", help="run in this process, one run at a time")
    p.add_argument("-o", "--output", metavar="DIR", help="output directory (default: the grid's output)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every run, e.g. --set steps=600 (repeatable)")
    p.add_argument("--no-combine", action="store_true", help="do not write combined.zarr")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the grid and list every run's store and state; run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_sweep)

    p = subparsers.add_parser(
        "combine", help="(re)build combined.zarr of a sweep output directory",
        description="Reduce every complete run store of a sweep to its statistics and stack "
                    "them over the grid's dimensions; missing runs are NaN.",
    )
    p.add_argument("output_dir", metavar="DIR", help="sweep output directory")
    p.add_argument("-o", "--out", metavar="STORE", help="store path (default DIR/combined.zarr)")
    p.set_defaults(func=_cmd_combine)

    p = subparsers.add_parser(
        "report", help="self-contained HTML report of a sweep",
        description="Figures 2-5 of the paper and tables as one HTML file.",
    )
    p.add_argument("results", metavar="RESULTS", help="sweep output directory or combined store")
    p.add_argument("-o", "--output", metavar="HTML", default="report.html", help="default report.html")
    p.add_argument("--title", default="gmm-volunteer sweep report")
    p.set_defaults(func=_cmd_report)

    p = subparsers.add_parser(
        "capacity", help="smallest server capacity meeting latency targets (paper eq. 3)",
        description="Bisect the server capacity multiplier with common random numbers until "
                    "the latency targets are met with the stated confidence; prints the path.",
    )
    p.add_argument("config", metavar="CONFIG", help="YAML run config")
    p.add_argument("--p99", "--target", action="append", required=True, metavar="[TYPE=]DURATION",
                   help="latency target, e.g. 10s (every request type) or heavy10=30s; repeatable")
    p.add_argument("--quantile", type=float, default=0.99,
                   help="required fraction of requests within the target, 1 - eps (default 0.99)")
    p.add_argument("--confidence", type=float, default=0.95, help="default 0.95")
    p.add_argument("--seeds", type=int, default=3, help="replicates per candidate (default 3: seeds 0..2)")
    p.add_argument("--seed-list", type=int, nargs="+", metavar="SEED", help="explicit seeds")
    p.add_argument("--lo", type=float, default=1.0, help="lowest multiplier (default 1)")
    p.add_argument("--hi", type=float, default=100.0, help="highest multiplier (default 100)")
    p.add_argument("--tol", type=float, default=0.05, help="relative bracket width to stop at (default 0.05)")
    p.add_argument("--completed-only", action="store_true",
                   help="count completed requests only (default: every ended request, as eq. 3)")
    p.add_argument("--workers", type=int, default=1, help="processes for the seeds of a candidate")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.set_defaults(func=_cmd_capacity)
