"""`gmmv capacity --setting`: the cheapest autoscaler setting (issue 11 item 5;
docs/experiments.md, section 6, "Cheapest autoscaler setting").

`--setting autoscaler_options.KEY --range LO:HI` switches `gmmv capacity` from sizing a
fixed server to searching one numeric option of the config's autoscaler for the least
capacity-hours meeting the latency targets (`gmm_volunteer.experiments.capacity_setting`).
`experiments_cli` adds the options (`add_arguments`) and hands such calls to `run`. Bad
input raises `CommandError` (exit 2) before anything is simulated or written.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

from gmm_volunteer.cli.errors import EXIT_NOT_MET, EXIT_OK
from gmm_volunteer.experiments.capacity_setting import (
    TABLE_KIND,
    find_setting,
    parse_range,
    path_rows,
    resolve_setting,
    simulation_evaluator,
    with_setting,
)

CSV_HEAD = "evaluation,phase,setting,value,"


def add_arguments(p) -> None:
    g = p.add_argument_group("cheapest autoscaler setting (capacity-hours; docs/experiments.md)")
    g.add_argument("--setting", metavar="autoscaler_options.KEY",
                   help="search this numeric option of the config's autoscaler for the least "
                        "capacity-hours meeting the targets, e.g. autoscaler_options.rho_target")
    g.add_argument("--range", dest="setting_range", metavar="LO:HI",
                   help="the values of --setting searched (required with it), e.g. 0.3:0.9")
    g.add_argument("--grid-points", type=int, default=5, metavar="N",
                   help="evenly spaced values evaluated before the refinement (default 5)")


def wanted(args) -> bool:
    return args.setting is not None or args.setting_range is not None


def _check_replaceable(paths) -> None:
    from gmm_volunteer.cli.commands import check_replaceable

    check_replaceable(paths, {"csv": lambda head: head.startswith(CSV_HEAD.encode()),
                              "json": lambda head: TABLE_KIND.encode() in head},
                      "gmmv capacity --setting")


def _check_options(args) -> None:
    """Refuse what the setting search does not read, or reads out of range."""
    from gmm_volunteer.cli.commands import CommandError

    if args.setting is None:
        raise CommandError("--range needs --setting (the autoscaler option to search)")
    if args.setting_range is None:
        raise CommandError(f"--setting {args.setting}: give the values to search with --range LO:HI")
    for flag, on in (("--vector", args.vector), ("--search", args.search), ("--weights", args.weights),
                     ("--frontier", args.frontier)):
        if on:
            raise CommandError(f"--setting and {flag} exclude each other (an autoscaler scales the whole "
                               "profile; the vector search sizes a fixed server)")
    for spec in args.p99:
        if "@" in str(spec):
            raise CommandError(f"--p99 {spec}: a level per target (@LEVEL) needs the vector search; "
                               "--setting takes --quantile")
    if not 0 < args.quantile < 1:
        raise CommandError(f"--quantile must be in (0, 1), got {args.quantile}")
    if not 0 < args.confidence < 1:
        raise CommandError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.tol <= 0:
        raise CommandError(f"--tol must be > 0, got {args.tol}")
    if args.grid_points < 2:
        raise CommandError(f"--grid-points must be >= 2 (got {args.grid_points})")
    if args.max_evaluations is not None and args.max_evaluations < 1:
        raise CommandError(f"--max-evaluations must be >= 1 (got {args.max_evaluations})")


def run(args) -> int:
    from gmm_volunteer.cli import feedback
    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.experiments.capacity import parse_targets
    from gmm_volunteer.run.config import ConfigError, load_config
    from gmm_volunteer.run.preflight import available_memory, check_run

    _check_options(args)
    try:
        targets = parse_targets(args.p99)
    except ValueError as exc:
        raise CommandError(f"--p99: {exc}") from None
    try:
        cfg = load_config(args.config, args.set or ())
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    try:
        setting = resolve_setting(cfg, args.setting)
    except ValueError as exc:
        raise CommandError(f"--setting: {exc}") from None
    try:
        lo, hi = parse_range(args.setting_range, setting)
    except ValueError as exc:
        raise CommandError(f"--range {exc}") from None
    for end in (lo, hi):  # both ends within the option's own limits (e.g. rho_target <= 1)
        try:
            at_end = with_setting(cfg, setting, end)
        except ConfigError as exc:
            raise CommandError(f"--range {args.setting_range}: {setting.key}={end:g} is refused: "
                               f"{str(exc).split(': ', 1)[-1]}") from None
    workers = max(1, args.workers or 1)
    try:
        avail = available_memory()
        check_run(at_end, str(args.config), available=None if avail is None else avail // workers)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    from gmm_volunteer.cli.argtypes import distinct_seeds

    try:
        seeds = distinct_seeds(list(range(args.seeds)) if args.seed_list is None else args.seed_list, "--seed-list")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    prefix = (Path(args.output) if args.output
              else Path("results") / f"capacity-setting-{Path(args.config).stem}")
    outputs = {"csv": prefix.with_name(prefix.name + ".csv"), "json": prefix.with_name(prefix.name + ".json")}
    _check_replaceable(outputs)

    budget = args.max_evaluations or (args.grid_points + 10)
    feedback.info(f"autoscaler setting search: {cfg.autoscaler} {setting.name} in [{lo:g}, {hi:g}] "
                  f"({args.grid_points} grid values, then refinement to {args.tol:g} of the range; "
                  f"budget {budget}); P{100 * args.quantile:g} targets "
                  + ", ".join(f"{'every type' if k == '*' else k} <= {v:g}s" for k, v in targets.items())
                  + f", {100 * args.confidence:g}% confidence, seeds {seeds}")
    evaluator = simulation_evaluator(cfg, setting, targets, seeds, quantile=args.quantile,
                                     confidence=args.confidence, completed_only=args.completed_only,
                                     workers=workers)
    started: list[float] = []

    def before(n: int, phase: str, value: float) -> None:
        if not started:
            feedback.announce_compile()
        started.append(time.monotonic())
        feedback.info(f"evaluation {n} ({phase}): {setting.name}={value:g}: simulating {len(seeds)} "
                      f"seed{'s' if len(seeds) != 1 else ''} ...")

    def log(ev) -> None:
        print(ev.line(setting.name, args.quantile, args.confidence), flush=True)
        if started:
            feedback.detail(f"  evaluated in {time.monotonic() - started[-1]:.1f} s")

    try:
        res = find_setting(evaluator, setting, lo, hi, quantile=args.quantile, confidence=args.confidence,
                           grid_points=args.grid_points, tol=args.tol, max_evaluations=budget,
                           log=log, before=before)
    except ValueError as exc:  # an unknown request type in the targets, found in the first runs
        raise CommandError(f"--p99: {exc}") from None

    rows = path_rows(res)
    outputs["csv"].parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with outputs["csv"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    best = res.best
    summary = {
        "kind": TABLE_KIND,
        "config": str(args.config),
        "overrides": list(args.set or ()),
        "autoscaler": cfg.autoscaler,
        "setting": setting.key,
        "range": [lo, hi], "grid_points": args.grid_points, "tolerance": args.tol,
        "quantile": args.quantile, "confidence": args.confidence, "seeds": seeds,
        "targets": {k: v for k, v in targets.items()},
        "cost_unit": "capacity multiplier x h (x base_profile.cpu / 100 for CPU core-hours)",
        "evaluations": len(res.path), "stopped_by_budget": res.stopped_by_budget,
        "verdict_changes": res.verdict_changes(),
        "best": None if best is None else {
            "value": best.value, "capacity_hours": best.cost[0],
            "interval": [best.cost[1], best.cost[2]],
            "cpu_core_hours": best.cost[0] * float(cfg.base_profile.cpu) / 100.0,
            "neighbours": list(res.bracket()), "evaluation": best.index,
        },
        "path": rows,
    }
    outputs["json"].write_text(json.dumps(summary, indent=1, default=float) + "\n")
    print(res.text())
    print(f"wrote {outputs['csv']} and {outputs['json']}")
    return EXIT_OK if best is not None else EXIT_NOT_MET
