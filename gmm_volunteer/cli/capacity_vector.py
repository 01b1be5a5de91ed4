"""`gmmv capacity` over a capacity vector (paper 2.4, eq. 3; docs/optimisation.md).

The options `--search`, `--weights`, `--vector` and `--frontier` switch `gmmv capacity`
from the scalar bisection of `gmm_volunteer.experiments.capacity` to `capacity_vector`'s search;
`experiments_cli` adds the options (`add_arguments`) and hands such calls to `run`.
Bad input raises `CommandError` (exit 2) before anything is simulated or written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from gmm_volunteer.cli.errors import EXIT_NOT_MET, EXIT_OK
from gmm_volunteer.experiments.capacity_vector import (
    NEEDED,
    RESOURCES,
    TABLE_KIND,
    VectorSearch,
    frontier,
    frontier_figure,
    parse_level_targets,
    parse_resource_list,
    parse_resource_values,
    path_table,
    simulation_evaluator,
)


def add_arguments(p) -> None:
    g = p.add_argument_group("capacity vector (eq. 3 with a weighted norm; docs/optimisation.md)")
    g.add_argument("--search", metavar="RES[,RES...]",
                   help="search these server resources' capacities (default with --vector or "
                        "--weights: the resources named in --weights, else band_in,band_out,cpu,memory; "
                        "storage is never needed by a subtask on the server)")
    g.add_argument("--weights", metavar="RES=W[,...]",
                   help="cost per base profile of each resource, e.g. cpu=1,memory=0.01 (default: "
                        "server.cost_weights of the config, else 1 for every resource)")
    g.add_argument("--vector", action="store_true", help="search the capacity vector with the defaults")
    g.add_argument("--frontier", metavar="RES,RES",
                   help="map the feasible frontier over two resources (PNG and CSV) instead of searching")
    g.add_argument("--frontier-points", type=int, default=7, metavar="N",
                   help="values of the first frontier resource (default 7)")
    g.add_argument("--no-exchange", action="store_true",
                   help="coordinate bisection only (skip the exchange moves between resources)")
    g.add_argument("--max-evaluations", type=int, metavar="N",
                   help="evaluation budget (default 20 for the scalar search, 60 for the vector, "
                        "80 for a frontier)")
    g.add_argument("-o", "--output", metavar="PREFIX",
                   help="vector search: write PREFIX.csv (the path) and PREFIX.json (the answer); "
                        "default results/capacity-<config name>")


def wanted(args) -> bool:
    """Whether this call is a vector search (or a frontier)."""
    return bool(args.vector or args.search or args.weights or args.frontier)


def check_scalar(args) -> None:
    """Refuse, in the scalar search, what only the vector search reads."""
    from gmm_volunteer.cli.commands import CommandError

    for spec in args.p99:
        if "@" in str(spec):
            raise CommandError(f"--p99 {spec}: a level per target (@LEVEL) needs the vector search "
                               "(add --vector, --search or --weights); the scalar search takes --quantile")
    if args.max_evaluations is not None and args.max_evaluations < 1:
        raise CommandError(f"--max-evaluations must be >= 1 (got {args.max_evaluations})")
    if getattr(args, "output", None) is not None:  # refused, not ignored: nothing would be written
        raise CommandError(f"-o {args.output}: the scalar search writes no files (it prints its evaluations "
                           "and answer); -o is the vector search's (add --vector, --search or --weights)")


def _outputs(prefix: Path, frontier_pair) -> dict[str, Path]:
    if frontier_pair:
        stem = f"{prefix.name}-frontier-{frontier_pair[0]}-{frontier_pair[1]}"
        return {"csv": prefix.with_name(stem + ".csv"), "png": prefix.with_name(stem + ".png")}
    return {"csv": prefix.with_name(prefix.name + ".csv"), "json": prefix.with_name(prefix.name + ".json")}


def _check_replaceable(paths: dict[str, Path]) -> None:
    """Refuse to replace a file this command did not write (by its content)."""
    from gmm_volunteer.cli.commands import check_replaceable

    check_replaceable(paths, {"csv": lambda head: head.startswith(b"evaluation,phase,"),
                              "png": lambda head: head.startswith(b"\x89PNG"),
                              "json": lambda head: TABLE_KIND.encode() in head},
                      "gmmv capacity")


def run(args) -> int:
    from gmm_volunteer.cli import feedback
    from gmm_volunteer.cli.commands import CommandError

    try:
        targets = parse_level_targets(args.p99, args.quantile)
    except ValueError as exc:
        raise CommandError(f"--p99: {exc}") from None
    if not 0 < args.quantile < 1:
        raise CommandError(f"--quantile must be in (0, 1), got {args.quantile}")
    if not 0 < args.confidence < 1:
        raise CommandError(f"--confidence must be in (0, 1), got {args.confidence}")
    if not 0 < args.lo < args.hi:
        raise CommandError(f"--lo, --hi: need 0 < lo < hi, got lo={args.lo}, hi={args.hi}")
    if args.tol <= 0:
        raise CommandError(f"--tol must be > 0, got {args.tol}")
    if args.max_evaluations is not None and args.max_evaluations < 1:
        raise CommandError(f"--max-evaluations must be >= 1 (got {args.max_evaluations})")
    if args.frontier_points < 2:
        raise CommandError(f"--frontier-points must be >= 2 (got {args.frontier_points})")
    try:
        pair = parse_resource_list(args.frontier, "--frontier") if args.frontier else None
        if pair is not None and len(pair) != 2:
            raise ValueError(f"--frontier: name two resources (got {len(pair)}: {args.frontier})")
        wtext = parse_resource_values(args.weights, "--weights", positive=False) if args.weights else None
        searched = parse_resource_list(args.search, "--search") if args.search else None
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    from gmm_volunteer.cli.commands import load_checked_config

    cfg = load_checked_config(args.config, args.set, args.workers)
    if cfg.autoscaler != "fixed":
        raise CommandError(f"{args.config}: autoscaler: the vector search sizes a fixed server "
                           f"(autoscaler: fixed), got {cfg.autoscaler!r}")

    weights = np.ones(len(RESOURCES))
    configured = cfg.server.cost_weights.values()
    chosen = wtext if wtext is not None else configured
    if chosen:
        weights = np.array([chosen.get(r, 0.0) for r in RESOURCES])
    if searched is None:
        searched = [r for r in RESOURCES if r in chosen] if chosen else list(NEEDED)
    if not searched:
        raise CommandError("--search: no resource to search")
    prefix = Path(args.output) if args.output else Path("results") / f"capacity-{Path(args.config).stem}"
    outputs = _outputs(prefix, pair)
    _check_replaceable(outputs)

    base = cfg.base_profile.as_array()
    start = cfg.server.multipliers(base)
    from gmm_volunteer.cli.argtypes import distinct_seeds

    try:
        seeds = distinct_seeds(list(range(args.seeds)) if args.seed_list is None else args.seed_list, "--seed-list")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    evaluator = simulation_evaluator(cfg, targets, seeds, confidence=args.confidence,
                                     completed_only=args.completed_only, workers=max(1, args.workers or 1))
    shown = pair or searched
    fixed = [r for r in RESOURCES if r not in shown]
    feedback.info("capacity vector search (eq. 3): targets "
                  + ", ".join(f"{'every type' if k == '*' else k} P(latency <= {t.tau:g} s) >= {t.level:g}"
                              for k, t in targets.items())
                  + f"; {'frontier over ' + ' x '.join(pair) if pair else 'searching ' + ', '.join(searched)} "
                  f"in [{args.lo:g}, {args.hi:g}]x; fixed at the config's values: "
                  + ", ".join(f"{r}={start[RESOURCES.index(r)]:g}x" for r in fixed)
                  + f"; weights {', '.join(f'{r}={w:g}' for r, w in zip(RESOURCES, weights))}; "
                  f"{100 * args.confidence:g}% confidence, seeds {seeds}")
    started: list[float] = []

    def before(n: int, phase: str, m: np.ndarray) -> None:
        if not started:
            feedback.announce_compile()
        started.append(time.monotonic())
        vec = " ".join(f"{r}={m[RESOURCES.index(r)]:.3g}x" for r in shown)
        feedback.info(f"evaluation {n} ({phase}): {vec}: simulating {len(seeds)} seed"
                      f"{'s' if len(seeds) != 1 else ''} ...")

    def log(point) -> None:
        print(point.line(shown, args.confidence), flush=True)
        if started:
            feedback.detail(f"  evaluated in {time.monotonic() - started[-1]:.1f} s")

    try:
        if pair:
            budget = args.max_evaluations or 80
            grid, minima, path, searched_points = frontier(evaluator, start, pair, lo=args.lo, hi=args.hi, tol=args.tol,
                                          points=args.frontier_points, max_evaluations=budget, weights=weights,
                                          log=log, before=before)
        else:
            search = VectorSearch(evaluator, start, searched, weights, lo=args.lo, hi=args.hi, tol=args.tol,
                                  max_evaluations=args.max_evaluations or 60, exchange=not args.no_exchange,
                                  log=log, before=before)
            res = search.run()
            res.confidence = args.confidence
    except ValueError as exc:  # an unknown request type in the targets, found in the first runs
        raise CommandError(f"--p99: {exc}") from None

    outputs["csv"].parent.mkdir(parents=True, exist_ok=True)
    if pair:
        table = path_table(path)
        table.to_csv(outputs["csv"], index=False)
        title = (f"Feasible frontier, {pair[0]} x {pair[1]} (others fixed); "
                 + ", ".join(f"{'all' if k == '*' else k} <= {t.tau:g}s @ {t.level:g}" for k, t in targets.items()))
        frontier_figure(path, pair, grid, minima, outputs["png"], weights=weights, title=title)
        for x, y, done in zip(grid, minima, searched_points):
            print(f"{pair[0]}={x:.3g}x: smallest {pair[1]} meeting the targets "
                  + (f"{y:.3g}x" if np.isfinite(y) else f"above {args.hi:g}x" if done
                     else "not searched (the evaluation budget ran out)"))
        if not searched_points.all():
            print(f"the search stopped at its budget of {budget} evaluations before every point was "
                  f"searched (--max-evaluations to go on)")
        print(f"wrote {outputs['png']} and {outputs['csv']}")
        return EXIT_OK if np.isfinite(minima).any() else EXIT_NOT_MET

    path_table(res.path).to_csv(outputs["csv"], index=False)
    summary = {
        "kind": TABLE_KIND,
        "config": str(args.config),
        "overrides": list(args.set or ()),
        "targets": {k: {"tau_s": t.tau, "level": t.level} for k, t in targets.items()},
        "weights": dict(zip(RESOURCES, map(float, weights))),
        "searched": searched,
        "fixed": {r: float(start[RESOURCES.index(r)]) for r in RESOURCES if r not in searched},
        "range": [args.lo, args.hi], "tolerance": args.tol, "confidence": args.confidence, "seeds": seeds,
        "evaluations": len(res.path), "stopped_by_budget": res.stopped_by_budget,
        "non_monotone_misses": res.non_monotone(),
        "best": None,
        "path": json.loads(path_table(res.path).to_json(orient="records")),
    }
    if res.best is not None:
        b = res.best
        summary["best"] = {
            "multipliers": dict(zip(RESOURCES, map(float, b.m))),
            "max_allocation": dict(zip(RESOURCES, map(float, b.m * base))),
            "cost": b.cost, "cost_bounds": list(res.cost_bounds()),
            # per searched resource: the largest value below the answer shown to miss
            # (evaluation number of the witness), null at the bottom or when not shown
            "missing_neighbours": {r: None if nb is None else {"value": nb[0], "evaluation": nb[1].index}
                                   for r, nb in res.neighbours.items()},
            "rows": {k: dict(zip(("tau_s", "level", "fraction", "lower_bound", "quantile_s", "requests"),
                                 map(float, row))) for k, row in b.rows.items()},
        }
    outputs["json"].write_text(json.dumps(summary, indent=1) + "\n")
    print(res.text())
    print(f"wrote {outputs['csv']} and {outputs['json']}")
    return EXIT_OK if res.best is not None else EXIT_NOT_MET
