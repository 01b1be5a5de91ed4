"""`gmmv sweep`, `gmmv combine`, `gmmv report`, `gmmv capacity` (docs/experiments.md).

Added to the `gmmv` parser by `gmm_volunteer.cli`. Handlers return 0 on success; bad
input raises `CommandError` (exit 2); a sweep with failed runs returns 1, a capacity
search whose targets are not met within the range returns 3 (`EXIT_NOT_MET`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from gmm_volunteer.cli.errors import EXIT_NOT_MET, EXIT_OK
from gmm_volunteer.cli import argtypes


def _add_output_flags(p, quiet_help: str = "no progress or notes") -> None:
    from gmm_volunteer.cli.commands import add_output_flags

    add_output_flags(p, quiet_help)


def _command_error():
    from gmm_volunteer.cli.commands import CommandError

    return CommandError


def _cmd_sweep(args: argparse.Namespace) -> int:
    from gmm_volunteer.run.config import ConfigError, parse_override
    from gmm_volunteer.io.results import is_complete
    from gmm_volunteer.experiments.sweep import (
        GridError, SchedulerUnreachable, StaleRunsError, load_grid, run_sweep, stale_reason,
    )

    CommandError = _command_error()
    if args.workers is not None and args.workers < 1:
        raise CommandError(f"--workers must be >= 1 (got {args.workers})")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise CommandError(f"--checkpoint-every: must be a number of steps >= 1 (got {args.checkpoint_every})")
    if args.old_scheduler is not None:
        print("gmmv sweep: warning: --scheduler is a deprecated spelling of --dask-address "
              "(the address of a Dask scheduler, not the sweep's scheduling policy)", file=sys.stderr)
        if args.dask_address is None:
            args.dask_address = args.old_scheduler
    if args.dask_address is not None:
        if args.serial:
            raise CommandError("--dask-address and --serial exclude each other")
        try:
            check_dask_address(args.dask_address)
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    try:
        overrides = dict(parse_override(o, "--set") for o in args.set)
        if isinstance(overrides.get("model"), str):  # like `gmmv run --set`: relative to here
            overrides["model"] = str(Path(overrides["model"]).expanduser().resolve())
        grid = load_grid(args.grid, output=args.output, overrides=overrides)
    except (GridError, ConfigError) as exc:
        raise CommandError(str(exc)) from None
    if not args.dry_run:  # a sweep's folder: never the root or the current folder
        from gmm_volunteer.cli.outputs import check_output_target

        check_output_target(grid.output, "-o" if args.output else f"{args.grid}: output")
    if args.dask_address is None and not args.dry_run:
        _check_local_memory(grid, 1 if args.serial else (args.workers or os.cpu_count() or 1))
    if args.checkpoint_every is not None:  # a policy without checkpoint hooks: said now, not per run
        from gmm_volunteer.run.checkpoint import CheckpointError, check_checkpointable

        for r in grid.runs():
            try:
                check_checkpointable(r.config)
            except CheckpointError as exc:
                raise CommandError(f"--checkpoint-every: {r.name}: {exc}") from None
    if args.dry_run:
        digests: dict = {}
        for r in grid.runs():
            done = is_complete(r.path)
            why = stale_reason(r, digests) if done else None
            state = ("stale" if why else "complete") if done else "to run"
            print(f"{state:9} {r.path}" + (f" ({why})" if why else ""))
        return 0
    from gmm_volunteer.cli import feedback

    n_workers = args.workers or os.cpu_count() or 1
    where = args.dask_address or ("this process" if args.serial else
                                  f"a local cluster of {n_workers} worker process{'es' if n_workers != 1 else ''}")
    n = len(grid.runs())
    feedback.info(f"sweep {grid.source}: {n} runs over {', '.join(f'{k}={len(v)}' for k, v in grid.coords().items())} "
                  f"-> {grid.output} (on {where})")
    todo = 0
    for r in grid.runs():
        done = is_complete(r.path)
        todo += not done
        feedback.detail(f"  {'complete' if done else 'to run':9} {r.path}")
    if todo and args.dask_address is None:
        feedback.announce_compile()  # the local workers compile, or load, the same kernels
    try:
        report = run_sweep(grid, address=args.dask_address, workers=args.workers, serial=args.serial,
                           progress=not args.quiet, combine=not args.no_combine,
                           checkpoint_every=args.checkpoint_every)
    except (SchedulerUnreachable, StaleRunsError) as exc:
        raise CommandError(str(exc)) from None
    print(report.text())
    return 0 if report.ok else 1


_ADDRESS = re.compile(r"^(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)?(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)"
                      r":(?P<port>[0-9]{1,5})/?$")


def check_dask_address(address: str, timeout: float = 5.0) -> None:
    """Refuse at once an address that is not ``[scheme://]host:port`` or where nothing
    answers (a TCP connection within `timeout` seconds); raises `ValueError`."""
    import socket

    m = _ADDRESS.match(address.strip())
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ValueError(
            f"--dask-address {address!r}: not a Dask scheduler address (expected "
            "[tcp://]HOST:PORT, e.g. tcp://10.0.0.5:8786). The sweep's scheduling policy "
            "is a config key: put `scheduler` in the grid or use --set scheduler=NAME")
    if m["scheme"] not in (None, "tcp", "tls"):
        return  # other transports (inproc, ucx) are left to Dask to check
    host = m["host"].strip("[]")
    try:
        socket.create_connection((host, int(m["port"])), timeout=timeout).close()
    except OSError as exc:
        raise ValueError(f"--dask-address {address!r}: no Dask scheduler answers there ({exc})") from None


def _check_local_memory(grid, workers: int) -> None:
    """Refuse a local sweep whose largest run, times the runs going at once, cannot fit
    in the memory available now."""
    from gmm_volunteer.run.preflight import _gb, available_memory, bundle_for, estimate_memory

    avail = available_memory()
    runs = grid.runs()
    if avail is None or not runs:
        return
    biggest = max(runs, key=lambda r: r.config.users.count * r.config.steps)
    need = estimate_memory(biggest.config, bundle_for(biggest.config, str(grid.source)))
    parallel = min(workers, len(runs))
    if need * parallel > avail:
        raise _command_error()(
            f"{grid.source}: users.count: run {biggest.name} needs about {_gb(need)} of memory"
            + (f", {parallel} at once {_gb(need * parallel)}" if parallel > 1 else "")
            + f", but only {_gb(avail)} are available; use fewer users or steps"
            + (" or fewer --workers" if parallel > 1 else ""))


def _cmd_combine(args: argparse.Namespace) -> int:
    from gmm_volunteer.experiments.combine import write_combined
    from gmm_volunteer.io.results import IncompleteResultError

    CommandError = _command_error()
    try:
        path = write_combined(args.output_dir, args.out, progress=not args.quiet)
    except (FileNotFoundError, FileExistsError, IncompleteResultError, ValueError) as exc:
        # ValueError: a sweep.json that is not one, runs that cannot share a grid
        raise CommandError(str(exc)) from None
    print(f"wrote {path}")
    return 0


def _open_results(path: str):
    from gmm_volunteer.experiments.combine import combine, open_combined
    from gmm_volunteer.io.results import IncompleteResultError, is_complete
    from gmm_volunteer.io.sweepdir import COMBINED, MANIFEST

    CommandError = _command_error()
    p = Path(path)
    try:
        if (p / MANIFEST).is_file() and not is_complete(p / COMBINED):
            ds = combine(p)  # runs missing or not yet combined: combine what is there
        else:
            ds = open_combined(p)
    except (FileNotFoundError, IncompleteResultError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if "run_complete" not in ds:
        raise CommandError(f"{path}: not a combined sweep dataset (run `gmmv sweep` first; "
                           "for one run use `gmmv summarize`)")
    if (p / MANIFEST).is_file():
        ds.attrs["results_dir"] = str(p.resolve())  # its run stores, for per-request tables and figures
    return ds


def _select(ds, selections: list[str], source: str):
    """Apply ``DIM=VALUE`` selections; refuse (exit 2) a grid dimension the report has
    no axis for, naming its values."""
    from gmm_volunteer.experiments import figures
    from gmm_volunteer.run.config import ConfigError, parse_override
    from gmm_volunteer.model.suggest import did_you_mean

    CommandError = _command_error()
    for text in selections:
        try:
            dim, value = parse_override(text, "--sel")
        except ConfigError as exc:
            raise CommandError(str(exc).replace("--set", "--sel")) from None
        if dim not in ds.dims:
            raise CommandError(f"--sel {text}: {source} has no dimension {dim!r}"
                               f"{did_you_mean(dim, map(str, ds.dims))} "
                               f"(dimensions: {', '.join(map(str, ds.dims))})")
        values = [v.item() if hasattr(v, "item") else v for v in ds[dim].values]
        match = [i for i, v in enumerate(values) if v == value or str(v) == str(value)]
        if not match:
            raise CommandError(f"--sel {text}: {dim} has no value {value!r}"
                               f"{did_you_mean(str(value), map(str, values))} (values: "
                               f"{', '.join(map(str, values))})")
        ds = ds.isel({dim: match[0]}, drop=True)
    for d in ds.dims:
        if d not in figures.GRID_DIMS and d not in figures.INNER_DIMS and ds.sizes[d] > 1:
            values = ", ".join(str(v) for v in ds[d].values) if d in ds.coords else f"{ds.sizes[d]} values"
            raise CommandError(f"{source}: dimension {d!r} ({values}): the report's figures have "
                               f"no axis for it; choose one value with --sel {d}=VALUE")
    return ds


def _cmd_report(args: argparse.Namespace) -> int:
    from gmm_volunteer.experiments.report import write_report

    CommandError = _command_error()
    from gmm_volunteer.cli.outputs import check_output_target

    out = check_output_target(args.output)
    if out.is_dir():
        raise CommandError(f"-o {args.output}: is a directory; give the report's file name")
    if out.exists():
        try:
            head = out.open("rb").read(64)
        except OSError as exc:
            raise CommandError(f"-o {args.output}: cannot read: {exc}") from None
        if not head.lstrip().lower().startswith(b"<!doctype html>"):
            raise CommandError(f"-o {args.output}: exists and is not an HTML report; "
                               "refusing to replace it")
    if args.regime_png:
        png = Path(args.regime_png)
        if png.is_dir() or not png.parent.is_dir() or png.suffix.lower() != ".png":
            raise CommandError(f"--regime-png {args.regime_png}: give a .png file in an existing folder")
    if args.figures_dir:
        fdir = Path(args.figures_dir)
        if fdir.exists() and not fdir.is_dir():
            raise CommandError(f"--figures-dir {args.figures_dir}: exists and is not a folder")
    from gmm_volunteer.cli import feedback

    feedback.info(f"report: reading {args.results}")
    ds = _open_results(args.results)
    from gmm_volunteer.experiments import autoscale_report

    if autoscale_report.is_autoscaler_sweep(ds) and not any(s.partition("=")[0].strip() == "autoscaler"
                                                             for s in args.sel):
        # a grid over autoscalers: its own figure and tables (docs/experiments.md section 7)
        feedback.info(f"report: autoscaler comparison into {out}")
        out = autoscale_report.write_report(ds, args.results, out, title=args.title)
        print(f"wrote {out}")
        return 0
    ds = _select(ds, args.sel, args.results)
    ds.attrs["results_dir"] = str(Path(args.results).resolve())  # run stores, for figures
    feedback.detail("report: dimensions " + ", ".join(f"{d}={n}" for d, n in ds.sizes.items()))
    feedback.info(f"report: drawing figures and tables into {out}")
    out = write_report(ds, out, title=args.title, progress=feedback.Stages("report"))
    print(f"wrote {out}")
    if args.regime_png:
        from gmm_volunteer.experiments import figures, regime

        png = Path(args.regime_png)
        png.write_bytes(figures.png_bytes(regime.regime_figure(regime.cell_verdicts(ds), args.title)))
        print(f"wrote {png}")
    if args.figures_dir:
        from gmm_volunteer.experiments import figures

        for p in figures.save_all(ds, args.figures_dir, prefix=args.figures_prefix):
            print(f"wrote {p}")
    return 0


def _cmd_capacity(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli import capacity_vector as capacity_vector_cli
    from gmm_volunteer.experiments.capacity import find_capacity, parse_targets
    from gmm_volunteer.cli import capacity_setting as capacity_setting_cli

    if capacity_setting_cli.wanted(args):
        return capacity_setting_cli.run(args)
    if capacity_vector_cli.wanted(args):
        return capacity_vector_cli.run(args)
    capacity_vector_cli.check_scalar(args)
    CommandError = _command_error()
    try:
        targets = parse_targets(args.p99)
    except ValueError as exc:
        raise CommandError(f"--p99: {exc}") from None

    from gmm_volunteer.cli.commands import load_checked_config

    cfg = load_checked_config(args.config, args.set, args.workers)
    from gmm_volunteer.cli import feedback

    try:
        seeds = argtypes.distinct_seeds(list(range(args.seeds)) if args.seed_list is None else args.seed_list,
                                        "--seed-list")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    feedback.info(f"capacity search: P{100 * args.quantile:g} targets "
                  + ", ".join(f"{'every type' if k == '*' else k} <= {v:g}s" for k, v in targets.items())
                  + f", {100 * args.confidence:g}% confidence, seeds {seeds}, range [{args.lo:g}, {args.hi:g}]x")
    started = []
    from gmm_volunteer.experiments.capacity import planned_evaluations

    budget = args.max_evaluations or 20
    planned = planned_evaluations(args.lo, args.hi, args.tol, budget) if 0 < args.lo < args.hi and args.tol > 0 else budget

    def before(m: float) -> None:
        if not started:
            feedback.announce_compile(feedback.run_dispatchers(cfg))
        started.append(time.monotonic())
        feedback.info(f"capacity {m:.3f}x: simulating {len(seeds)} seed{'s' if len(seeds) != 1 else ''} "
                      f"(evaluation {len(started)} of at most {planned}) ...")

    def log(text: str) -> None:
        print(text, flush=True)
        if started:
            feedback.detail(f"  evaluated in {time.monotonic() - started[-1]:.1f} s")

    try:
        res = find_capacity(cfg, targets, quantile=args.quantile, confidence=args.confidence,
                            seeds=seeds, lo=args.lo, hi=args.hi, rel_tol=args.tol,
                            max_evaluations=budget,
                            completed_only=args.completed_only, workers=args.workers,
                            log=log, before=before)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    print(res.text().splitlines()[-1])
    return EXIT_OK if res.capacity is not None else EXIT_NOT_MET


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of configs (local cores or a Dask cluster)",
        description="Expand a base config over a grid and seeds, run every run whose store "
                    "is not complete, then combine them (docs/experiments.md).",
    )
    p.add_argument("grid", metavar="GRID", help="grid file (YAML)")
    p.add_argument("--dask-address", metavar="ADDRESS",
                   help="address of a running Dask scheduler, e.g. tcp://host:8786 "
                        "(default: a local cluster on this machine)")
    p.add_argument("--scheduler", dest="old_scheduler", metavar="ADDRESS", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, metavar="N",
                   help="local worker processes (default: all cores)")
    p.add_argument("--serial", action="store_true", help="run in this process, one run at a time")
    p.add_argument("-o", "--output", metavar="DIR", help="output directory (default: the grid's output)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every run, e.g. --set steps=600 (repeatable)")
    p.add_argument("--no-combine", action="store_true", help="do not write combined.zarr")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="save each run every N steps beside its store; a run killed earlier "
                        "continues from its last checkpoint (docs/usage.md, Checkpoints)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the grid and list every run's store and state; run nothing")
    _add_output_flags(p, "no progress bar or compile notice")
    p.set_defaults(func=_cmd_sweep)

    p = subparsers.add_parser(
        "combine", help="(re)build combined.zarr of a sweep output directory",
        description="Reduce every complete run store of a sweep to its statistics and stack "
                    "them over the grid's dimensions; missing runs are NaN.",
    )
    p.add_argument("output_dir", metavar="DIR", help="sweep output directory")
    p.add_argument("-o", "--out", metavar="STORE", help="store path (default DIR/combined.zarr)")
    _add_output_flags(p)
    p.set_defaults(func=_cmd_combine)

    p = subparsers.add_parser(
        "report", help="self-contained HTML report of a sweep",
        description="Figures 2-5 of the paper and tables as one HTML file.",
    )
    p.add_argument("results", metavar="RESULTS", help="sweep output directory or combined store")
    p.add_argument("-o", "--output", metavar="HTML", default="report.html", help="default report.html")
    p.add_argument("--title", default="gmm-volunteer sweep report",
                   help="the report's title (default: %(default)s)")
    p.add_argument("--sel", action="append", default=[], metavar="DIM=VALUE",
                   help="keep one value of a grid dimension the figures have no axis for "
                        "(e.g. --sel model=/path/to/bundle); repeatable")
    p.add_argument("--figures-dir", metavar="DIR", default=None,
                   help="also write figures 2-5 as PNG files into DIR (created if missing)")
    p.add_argument("--figures-prefix", metavar="TEXT", default="",
                   help="prefix of those files' names, e.g. paper-scale-hazard- (default none)")
    p.add_argument("--regime-png", metavar="PNG", default=None,
                   help="also write the findings' regime map (a paper grid) as a PNG file")
    _add_output_flags(p)
    p.set_defaults(func=_cmd_report)

    p = subparsers.add_parser(
        "capacity", help="smallest server capacity (or cheapest autoscaler setting) meeting latency targets (paper eq. 3)",
        description="Bisect the server capacity multiplier with common random numbers until "
                    "the latency targets are met with the stated confidence; prints the path. "
                    "With --setting and --range: the autoscaler setting with the fewest "
                    "capacity-hours meeting the targets. With --vector, --search, --weights or --frontier: the cheapest capacity "
                    "vector per resource, or the feasible frontier over two resources.",
    )
    p.add_argument("config", metavar="CONFIG", help="YAML run config")
    p.add_argument("--p99", "--target", action="append", required=True, metavar="[TYPE=]DURATION[@LEVEL]",
                   help="latency target, e.g. 10s (every request type) or heavy10=30s; repeatable; "
                        "@LEVEL (vector search) sets this type's 1 - eps, e.g. light5=10s@0.999")
    p.add_argument("--quantile", type=argtypes.real(0.0, 1.0, lo_open=True, hi_open=True), default=0.99,
                   help="required fraction of requests within the target, 1 - eps (default 0.99)")
    p.add_argument("--confidence", type=argtypes.real(0.0, 1.0, lo_open=True, hi_open=True), default=0.95,
                   help="default 0.95")
    p.add_argument("--seeds", type=argtypes.count(1), default=3, help="replicates per candidate (default 3: seeds 0..2)")
    p.add_argument("--seed-list", type=argtypes.seed, nargs="+", metavar="SEED", help="explicit seeds (distinct)")
    p.add_argument("--lo", type=argtypes.real(0.0, lo_open=True), default=1.0, help="lowest multiplier (default 1)")
    p.add_argument("--hi", type=argtypes.real(0.0, lo_open=True), default=100.0, help="highest multiplier (default 100)")
    p.add_argument("--tol", type=argtypes.real(0.0, lo_open=True), default=0.05,
                   help="relative bracket width to stop at (default 0.05)")
    p.add_argument("--completed-only", action="store_true",
                   help="count completed requests only (default: every ended request, as eq. 3)")
    p.add_argument("--workers", type=argtypes.count(1, 1024), default=1, help="processes for the seeds of a candidate")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    from gmm_volunteer.cli import capacity_vector as capacity_vector_cli

    capacity_vector_cli.add_arguments(p)
    from gmm_volunteer.cli import capacity_setting as capacity_setting_cli

    capacity_setting_cli.add_arguments(p)
    _add_output_flags(p, "no progress lines or compile notice (the evaluations and the answer still print)")
    p.set_defaults(func=_cmd_capacity)
