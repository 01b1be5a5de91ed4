"""`gmmv hazards BUNDLE [--traces DIR] [-o RESULT_FILE]`: what a bundle's fitted
execution hazard implies per subtask type and batch size, beside the measured runs
(`gmm_volunteer.fitting.hazard_check`; docs/model.md D27)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from gmm_volunteer.cli.commands import EXIT_OK, CommandError
from gmm_volunteer.cli.errors import EXIT_NOT_MET


def _cmd_hazards(args: argparse.Namespace) -> int:
    import pandas as pd

    from gmm_volunteer.fitting.hazard_check import SIZES, checks_text, hazard_checks, hazard_durations, quota_cells
    from gmm_volunteer.io import resultfile
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
    from gmm_volunteer.model.bundle import BundleError, bundle_digest

    source = args.bundle if Path(args.bundle).is_dir() else (packaged_bundle(args.bundle) or args.bundle)
    try:
        bundle = load_bundle(source)
    except BundleError as exc:
        raise CommandError(f"{args.bundle}: {exc}") from None
    traces = runs = None
    if args.quota and args.traces is None:
        raise CommandError("--quota needs --traces DIR (the traces whose quota/ collections to show)")
    if args.traces is not None:
        from gmm_volunteer.fitting.traces import TraceError, load_traces

        try:
            traces = load_traces(args.traces)
        except TraceError as exc:
            raise CommandError(f"--traces {args.traces}: {exc}") from None
        runs = traces.runs
        known = {st.name for st in bundle.subtask_types}
        if not set(runs["subtask_type"]) <= known:
            raise CommandError(f"--traces {args.traces}: subtask types "
                               f"{sorted(set(runs['subtask_type']) - known)} are not in the bundle {args.bundle}")
        if args.quota and traces.quota_runs is None:
            raise CommandError(f"--quota: --traces {args.traces} has no quota/ collections (traces/FORMAT.md)")
    sizes = SIZES if not args.sizes else tuple(args.sizes)
    if any(n < 1 for n in sizes):
        raise CommandError(f"--sizes: batch sizes must be >= 1 (got {list(sizes)})")
    try:
        df = hazard_durations(bundle, runs, sizes)
        quota = quota_cells(bundle, traces)
        checks = hazard_checks(bundle, traces)
    except ValueError as exc:
        raise CommandError(f"{args.bundle}: {exc}") from None
    if args.quota:  # the table -o writes: one table per result file
        df = quota
    status = EXIT_OK if all(c["passed"] for c in checks) else EXIT_NOT_MET
    if args.output is None:
        with pd.option_context("display.width", 200, "display.max_rows", None):
            print(df.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
            if len(quota) and not args.quota:
                print("\nquota/ collections (docs/model.md D38):")
                print(quota.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        print()
        print(checks_text(checks))
        return status
    from gmm_volunteer._version import __version__
    from gmm_volunteer.cli.outputs import check_result_target
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION

    out = check_result_target(args.output)
    fmt = df.copy()
    for col in fmt.columns:
        if fmt[col].dtype.kind == "f":
            fmt[col] = fmt[col].map(lambda x: "-" if x != x else f"{x:.3g}")
    name = resultfile.bundle_name(str(source)) or str(args.bundle)
    this = ["gmmv", "hazards", args.bundle, *(["--traces", args.traces] if args.traces else []),
            *(["--sizes", *map(str, args.sizes)] if args.sizes else []), *(["--quota"] if args.quota else []),
            "-o", args.output]
    path = resultfile.write(out, resultfile.markdown_table(fmt), note="checks (docs/model.md D32): "
                            + "; ".join(f"{'PASS' if c['passed'] else 'FAIL'} {c['check']}"
                                        + "".join(f" [{f}]" for f in c["failures"][:12]) for c in checks),
                            command=shlex.join(this),
                            bundles={name: bundle_digest(bundle)}, gmmv_version=__version__,
                            trajectory_version=TRAJECTORY_VERSION, title=args.title)
    print(f"wrote {path}")
    if status != EXIT_OK:
        import sys

        print(checks_text([c for c in checks if not c["passed"]]), file=sys.stderr)
    return status


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "hazards",
        help="what a bundle's fitted execution hazard implies per subtask type and batch size",
        description="For each subtask type and batch size: the CPU an uncontended batch asks, the "
                    "probability that the fitted execution hazard ends it in its first step, its mean "
                    "steps, the same at half the CPU, and the steps the measured runs took "
                    "(execution.progress: paper; docs/model.md D27); with --traces the cells its quota/ "
                    "collections measured at other CPU quotas (D38); then the checks of D32 "
                    "(measured cells, every batch up to 64 ends, mean steps monotone in batch size "
                    "and CPU). Exit status 3 when a check fails.")
    p.add_argument("bundle", metavar="BUNDLE", help="model bundle: a directory, or a shipped name (default, paper-scale)")
    p.add_argument("--traces", metavar="DIR", help="the traces the bundle was fitted on, for the measured steps")
    p.add_argument("--sizes", type=int, nargs="+", metavar="N", help="batch sizes (default 1 2 4 8 16 32 64)")
    p.add_argument("--quota", action="store_true",
                   help="show (and write with -o) the cells of the traces' quota/ collections instead: measured "
                        "and predicted steps per collection, subtask type and batch size (docs/model.md D38)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the table as a result file (docs/results/README.md)")
    p.add_argument("--title", help="the result file's title")
    p.set_defaults(func=_cmd_hazards)
