"""`gmmv results`: the committed result tables of the docs (docs/results/README.md).

    gmmv results table RESULTS NAME -o docs/results/FILE.md [--made-by CMD ...] [--sel DIM=VALUE ...]
    gmmv results join FILE... --on KEY --column COL... --label LABEL... -o docs/results/FILE.md
    gmmv results check [--root DIR]
    gmmv results sync [--root DIR]

`table` renders one of `gmmv report`'s tables from a sweep directory (or combined store)
as a result file whose header records what the stores recorded: the version, the
trajectory version, the bundle and its digest. `check` is the check `make test` runs;
`sync` copies every result file's table into the docs that include it.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path


# The tables `gmmv report` shows, one definition each: name -> (what it is, its module
# under gmm_volunteer.experiments, its function of the dataset, whether it needs the
# runs' SLO minutes read from their stores).
TABLES = {
    "findings": ("the paper's section 3.2 findings", "findings", "paper_findings", False),
    "overview": ("means over seeds per grid point", "report", "overview_table", False),
    "paired": ("paired P99 differences against centralized", "report", "paired_table", False),
    "latency-by-type": ("mean and P99 latency per request type per grid point", "report",
                        "latency_by_type_table", False),
    "autoscalers": ("the autoscaler comparison's means", "autoscale_report", "summary_table", True),
    "autoscalers-paired": ("the autoscalers' paired differences", "autoscale_report", "paired_table", True),
    "routing": ("the routing comparison per grid point", "routing_report", "comparison_table", False),
    "estimators": ("the delay estimators' error", "routing_report", "estimator_table", False),
    "mape": ("the delay estimators' MAPE per load level, whole run, every tier", "routing_report",
             "mape_table", False),
    "herding": ("the herding diagnostic per grid point", "routing_report", "herding_table", False),
    "seed-statistics": ("the seeds' own response-time statistics per grid point (from the run stores)",
                        "seed_metrics", "statistics_table", False),
    "phases": ("P99 latency / completions per 1,000 s in each scripted phase (from the run stores)",
               "seed_metrics", "phase_table", False),
    "phase-law": ("what the paper's phase law asks of the server per grid point (progress: paper)",
                  "phase_law_report", "phase_law_table", False),
    "classes": ("per user class per grid point: requests, P99, CPU-s given, energy (docs/model.md D36)",
                "class_metrics", "class_table", False),
    "asrb-paired": ("ASRB minus its baselines, paired, with the BCa interval and t-test (from the run stores)",
                    "seed_metrics", "paired_table", False),
    "queue-aware-paired": ("queue-aware minus seed 002's baselines, paired, with the BCa interval and t-test "
                           "(from the run stores)", "seed_metrics", "queue_aware_paired_table", False),
    "surge": ("mean latency and share to the server before, during and after a scripted surge "
              "(from the run stores)", "seed_metrics", "surge_table", False),
}


def render_table(name: str, ds, results):
    """The DataFrame of table `name` for a combined dataset `ds` of sweep `results`."""
    import importlib

    _, module, func, slo_minutes = TABLES[name]
    if slo_minutes and "autoscaler" not in ds.dims:  # the autoscaler tables compare its values
        raise ValueError("the sweep has no autoscaler dimension (a grid over `autoscaler`); dimensions: "
                         + (", ".join(map(str, ds.dims)) or "none"))
    if slo_minutes:
        from gmm_volunteer.experiments.autoscale_report import add_run_metrics

        ds = add_run_metrics(ds, results)
    return getattr(importlib.import_module(f"gmm_volunteer.experiments.{module}"), func)(ds)


def _cmd_table(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.cli.experiments import _open_results, _select
    from gmm_volunteer.io import resultfile

    if args.name not in TABLES:
        raise CommandError(f"no table {args.name!r}; tables: {', '.join(TABLES)}")
    from gmm_volunteer.cli.outputs import check_result_target

    out = check_result_target(args.output)
    ds = _open_results(args.results)
    if args.sel:
        ds = _select(ds, args.sel, args.results)
    try:
        df = render_table(args.name, ds, args.results)
    except ValueError as exc:  # a sweep that is not the grid the table is of
        raise CommandError(f"{args.results}: table {args.name!r}: {exc}") from None
    if df is None:
        raise CommandError(f"{args.results}: has no data for the table {args.name!r}")
    this = ["gmmv", "results", "table", args.results, args.name, *(f"--sel={s}" for s in args.sel),
            "-o", args.output]
    attrs = ds.attrs
    # The header describes the runs, as their stores recorded them, not this package.
    name = resultfile.bundle_name(str(attrs.get("model_bundle", ""))) or resultfile.UNKNOWN
    bundles = {name: resultfile.recorded_digest(name, attrs.get("model_sha256") or resultfile.UNKNOWN, Path.cwd())}
    from gmm_volunteer.trajectory import run_policy_versions

    path = resultfile.write(
        out, resultfile.markdown_table(df), command="\n".join([*args.made_by, shlex.join(this)]),
        bundles=bundles, gmmv_version=str(attrs.get("gmmv_version") or resultfile.UNKNOWN),
        trajectory_version=str(attrs.get("trajectory_version") or resultfile.UNKNOWN),
        title=args.title, note=args.note, policies=run_policy_versions(attrs))
    print(f"wrote {path}")
    return 0


def _release(version: str) -> tuple:
    """A version's numbers, to compare (0.10.0 after 0.6.0, which text comparison puts before)."""
    return tuple(int(x) if x.isdigit() else -1 for x in str(version).split("."))


def _one_model(name: str, a: str, b: str) -> str | None:
    """The digest a joined table records for bundle `name`, named with digests `a` and `b`
    by two of its sources: the bundle's digest now, when the other is an earlier one that
    differs from it in the hazard block alone (`resultfile.hazards_alone_differ`: a source
    made with it under the work law describes the bundle of now, and one under the paper's
    law is marked stale); None when they are two models."""
    from pathlib import Path

    from gmm_volunteer.io import resultfile

    now = resultfile.current_digest(name, Path.cwd())
    for kept, other in ((a, b), (b, a)):
        if kept == now and resultfile.hazards_alone_differ(name, other, Path.cwd()):
            return kept
    return None


def _cmd_join(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.cli.outputs import check_result_target
    from gmm_volunteer.io import resultfile

    for label in args.labels:  # a label heads columns of the joined table
        if "|" in label or "\n" in label or "\r" in label or not label.strip():
            raise CommandError(f"--label {label!r}: a table's column heading cannot hold '|' or a line "
                               "break, nor be empty")
    out = check_result_target(args.output, inputs=args.files)  # before anything is read
    try:
        results = [resultfile.read(f) for f in args.files]
        table = resultfile.join(results, args.on, args.keep, args.columns, args.labels)
    except resultfile.ResultFileError as exc:
        raise CommandError(str(exc)) from None
    # The joined table describes what its sources describe: one trajectory version, the
    # union of their bundles (a bundle named twice must be one digest).
    versions = {r.header["trajectory_version"] for r in results}
    if len(versions) > 1:
        raise CommandError(f"the result files were made by trajectory versions {', '.join(sorted(versions))}; "
                           "join tables of one model")
    stale = [f"{r.path}: {r.stale}" for r in results if r.stale]
    bundles: dict = {}
    for r in results:
        for name, digest in r.header["bundles"].items():
            if bundles.setdefault(name, digest) != digest:
                kept = _one_model(str(name), str(bundles[name]), str(digest))
                if kept is None:
                    raise CommandError(f"{r.path}: bundle {name!r} has another digest than in the other files")
                bundles[name] = kept
    this = ["gmmv", "results", "join", *args.files, "--on", args.on, *(x for k in args.keep for x in ("--keep", k)),
            *(x for c in args.columns for x in ("--column", c)), *(x for lab in args.labels for x in ("--label", lab)),
            "-o", args.output]
    command = "\n".join([*(f"# {r.path}: {r.header['command']}".replace("\n", "; ") for r in results), shlex.join(this)])
    policies: dict = {}
    for r in results:  # the policies the sources' runs used, each at the version they ran
        for name, version in (r.header.get("policies") or {}).items():
            if policies.setdefault(name, version) != version:
                raise CommandError(f"{r.path}: policy {name!r} ran at trajectory version {version}, "
                                   f"another file's at {policies[name]}; join tables of one model")
    path = resultfile.write(out, table, command=command, bundles=bundles,
                            gmmv_version=max((r.header["gmmv_version"] for r in results), key=_release),
                            trajectory_version=versions.pop(), title=args.title,
                            stale="; ".join(stale) or None, policies=policies or None)
    print(f"wrote {path}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.io import resultdocs, resultfile

    try:
        problems = resultdocs.check(Path(args.root))
    except resultfile.ResultFileError as exc:
        raise CommandError(str(exc)) from None
    for p in problems:
        print(p)
    if not problems:
        print(f"{len(resultdocs.result_files(Path(args.root)))} result files: current or marked stale, "
              "and the docs show them as they are")
    return 1 if problems else 0


def _cmd_sync(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.io import resultdocs, resultfile

    try:
        changed = resultdocs.sync(Path(args.root))
    except resultfile.ResultFileError as exc:
        raise CommandError(str(exc)) from None
    print("updated " + ", ".join(changed) if changed else "the docs already show every result file as it is")
    return 0


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "results", help="the docs' committed result tables: render, check, sync",
        description="Committed result tables of the docs (docs/results/README.md).")
    sub = p.add_subparsers(dest="results_command", metavar="ACTION", required=True)
    t = sub.add_parser("table", help="render a report table of a sweep as a result file",
                       description="Render one of `gmmv report`'s tables as a committed result file, "
                                   "its header taken from what the run stores recorded. Tables: "
                                   + "; ".join(f"{k}: {v[0]}" for k, v in TABLES.items()))
    t.add_argument("results", metavar="RESULTS", help="sweep output directory or combined store")
    t.add_argument("name", metavar="NAME", help="which table: " + ", ".join(TABLES))
    t.add_argument("-o", "--output", required=True, metavar="FILE", help="the result file, e.g. docs/results/NAME.md")
    t.add_argument("--made-by", action="append", default=[], metavar="CMD",
                   help="a command that made RESULTS, recorded before this one (repeatable), e.g. "
                        "'gmmv sweep configs/paper/grid_one_seed.yaml'")
    t.add_argument("--sel", action="append", default=[], metavar="DIM=VALUE", help="select one value of a dimension")
    t.add_argument("--title", help="a title for the header")
    t.add_argument("--note", help="a note for the header (what was run, caveats)")
    t.set_defaults(func=_cmd_table)
    j = sub.add_parser("join", help="put result tables side by side as one result file",
                       description="Join committed result files on a key column (e.g. the findings of two "
                                   "sweeps): the first file's rows and --keep columns, then each file's "
                                   "--column values under its --label.")
    j.add_argument("files", metavar="FILE", nargs="+", help="result files, in column order")
    j.add_argument("--on", required=True, help="the key column, e.g. finding")
    j.add_argument("--keep", action="append", default=[], metavar="COLUMN",
                   help="a column of the first file to keep (repeatable)")
    j.add_argument("--column", dest="columns", action="append", required=True, metavar="COLUMN",
                   help="a column taken from every file (repeatable)")
    j.add_argument("--label", dest="labels", action="append", required=True, metavar="LABEL",
                   help="one label per file, in order (repeatable)")
    j.add_argument("-o", "--output", required=True, metavar="FILE", help="the result file")
    j.add_argument("--title", help="a title for the header")
    j.set_defaults(func=_cmd_join)
    for name, func, what in (("check", _cmd_check, "check the result files and the docs that include them "
                                                    "(exit 1 naming each problem)"),
                             ("sync", _cmd_sync, "copy every result file's table (and stale note) into the docs")):
        c = sub.add_parser(name, help=what, description=what)
        c.add_argument("--root", default=".", help="the repository root (default: the current directory)")
        c.set_defaults(func=func)
