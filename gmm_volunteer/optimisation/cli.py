"""`gmmv tune`: policy search for eq. 2 and the held-out comparison (docs/optimisation.md)."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from gmm_volunteer.cli import argtypes
from gmm_volunteer.cli.argtypes import COUNT_MAX, SEED_MAX
from gmm_volunteer.cli.commands import CommandError, add_output_flags

DEFAULT_BASELINES = "centralized,uniform,affinity,asrb,queue_aware"
TUNE_HEAD = b'{\n "config": {'  # how every --output file of gmmv tune begins


def parse_seeds(text: str, option: str) -> list[int]:
    """``0-3`` (inclusive) or ``0,5,9`` -> the seeds; CommandError naming `option`."""
    try:
        if "-" in text and "," not in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            if not 0 <= lo <= hi <= SEED_MAX or hi - lo >= COUNT_MAX:  # before the list is built
                raise CommandError(f"{option}: a range of at most {COUNT_MAX:,} seeds in [0, 2^63), got {text!r}")
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CommandError(f"{option}: expected seeds like 0-3 or 0,5,9, got {text!r}") from None
    if not seeds or min(seeds) < 0 or max(seeds) > SEED_MAX or len(set(seeds)) != len(seeds):
        raise CommandError(f"{option}: need distinct non-negative seeds, got {text!r}")
    return seeds


def _check(args) -> tuple:
    from gmm_volunteer.run.config import ConfigError, load_config
    from gmm_volunteer.optimisation.problem import DEFAULT_CONFIG, resolve_config
    from gmm_volunteer.policies.registry import UnknownPolicyError, resolve
    from gmm_volunteer.policies.weighted import WEIGHTS

    train = parse_seeds(args.train_seeds, "--train-seeds")
    test = parse_seeds(args.test_seeds, "--test-seeds")
    if shared := sorted(set(train) & set(test)):
        raise CommandError(f"--train-seeds and --test-seeds share seeds {shared}: held-out seeds must be new")
    if args.trials < 1:
        raise CommandError(f"--trials: need at least 1, got {args.trials}")
    if not (args.bound > 0 and math.isfinite(args.bound)):
        raise CommandError(f"--bound: need a positive number, got {args.bound}")
    names = [n.strip() for n in args.weights.split(",") if n.strip()]
    if not names or any(n not in WEIGHTS for n in names) or len(set(names)) != len(names):
        raise CommandError(f"--weights: distinct names among {', '.join(WEIGHTS)}, got {args.weights!r}")
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    for b in baselines:
        try:
            resolve("scheduler", b)
        except UnknownPolicyError as exc:
            raise CommandError(f"--baselines: {exc}") from None
    if args.method != "random":
        try:
            __import__(args.method)
        except ImportError:
            raise CommandError(f"--method {args.method}: the package {args.method!r} is not installed "
                               "(pip install 'gmm-volunteer[optimise]', or --method random)") from None
    out = Path(args.output) if args.output else None
    if out is not None:
        from gmm_volunteer.cli.commands import check_replaceable
        from gmm_volunteer.cli.outputs import check_output_target

        check_output_target(out, "--output")
        if out.exists() and not args.force:
            raise CommandError(f"--output: {out} exists (use --force to replace it)")
        # --force replaces only a file this command wrote (a config, say, never)
        check_replaceable({"json": out}, {"json": lambda head: head.startswith(TUNE_HEAD)}, "gmmv tune")
    path = args.config or DEFAULT_CONFIG
    try:
        cfg = resolve_config(load_config(path, args.set or ()))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    if not 0 <= args.warmup < cfg.steps:
        raise CommandError(f"--warmup: need 0 <= warmup < steps ({cfg.steps}), got {args.warmup}")
    return cfg, train, test, names, baselines, out


def _cmd_tune(args: argparse.Namespace) -> int:
    cfg, train, test, names, baselines, out = _check(args)
    from gmm_volunteer.cli import feedback
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.optimisation.search import METRICS, compare, tune

    feedback.announce_compile()
    bundle = load_bundle(cfg.model)
    t0 = time.perf_counter()
    feedback.info(f"tuning {', '.join(names)} in [-{args.bound:g}, {args.bound:g}] with {args.method}: "
                  f"{args.trials} trials x {len(train)} training seeds")
    tuned = tune(cfg, train, args.trials, method=args.method, bound=args.bound, warmup=args.warmup,
                 names=names, seed=args.seed, bundle=bundle)
    shown = ", ".join(f"{k}={v:+.3f}" for k, v in tuned.weights.items())
    print(f"tuned weights: {shown}")
    print(f"training eq2 cost (mean latency increments per step, {len(train)} seeds): {tuned.train_value:.4f}")
    result = compare(cfg, tuned.weights, baselines, test, args.warmup, bundle)
    print(f"\nheld-out seeds {test[0]}..{test[-1]} ({len(test)}), mean over seeds:")
    print(f"{'scheduler':<18}" + "".join(f"{m:>14}" for m in METRICS))
    for name, runs in result["runs"].items():
        print(f"{name:<18}" + "".join(f"{_nanmean(runs[m]):>14.3f}" for m in METRICS))
    print("\npaired differences baseline - tuned, mean [95% t-interval] (n seeds):")
    for b, diffs in result["differences"].items():
        cells = [f"{m} {d:+.3f} [{lo:+.3f}, {hi:+.3f}] ({n})" for m, (d, lo, hi, n) in diffs.items()]
        print(f"  {b}: " + "; ".join(cells))
    feedback.detail(f"tune: {time.perf_counter() - t0:.0f} s")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "config": cfg.model_dump(mode="json"), "method": args.method, "trials": args.trials,
            "bound": args.bound, "warmup": args.warmup, "train_seeds": train, "test_seeds": test,
            "weights": tuned.weights, "train_value": tuned.train_value,
            "history": [{"x": x.tolist(), "value": v} for x, v in tuned.search.history],
            "runs": {k: {m: v.tolist() for m, v in r.items()} for k, r in result["runs"].items()},
            "differences": {b: {m: list(v) for m, v in d.items()} for b, d in result["differences"].items()},
        }, indent=1, allow_nan=True))
        feedback.info(f"wrote {out}")
    return 0


def _nanmean(x) -> float:
    import numpy as np

    x = np.asarray(x, float)
    return float(np.mean(x[np.isfinite(x)])) if np.isfinite(x).any() else math.nan


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "tune", help="tune the weighted scheduler for eq. 2 and compare it on held-out seeds",
        description="Policy search (paper 2.4, eq. 2): tune the weighted scheduler's weights with "
                    "common random numbers over training seeds, then run it and the baselines on "
                    "held-out seeds and print paired differences with 95% t-intervals "
                    "(docs/optimisation.md).",
    )
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="run config (default: the package's configs/scheduling_env.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set users.count=500 (repeatable)")
    p.add_argument("--method", choices=("cma", "optuna", "random"), default="cma",
                   help="optimiser (cma and optuna need the [optimise] extra; default cma)")
    p.add_argument("--trials", type=argtypes.count(1, 100_000), default=30, help="evaluated weight vectors (default 30)")
    p.add_argument("--train-seeds", default="0-3", metavar="SEEDS", help="training seeds (default 0-3)")
    p.add_argument("--test-seeds", default="100-109", metavar="SEEDS",
                   help="held-out seeds (default 100-109)")
    p.add_argument("--weights", default="server_weight,batch_weight,memory_weight,wait_weight",
                   metavar="NAMES", help="weights to tune (default all four; others keep their defaults)")
    p.add_argument("--bound", type=argtypes.real(0.0, 1e6, lo_open=True), default=10.0, help="search box [-bound, bound] (default 10)")
    p.add_argument("--warmup", type=argtypes.count(0, 10**9), default=300, help="steps left out of the metrics (default 300)")
    p.add_argument("--baselines", default=DEFAULT_BASELINES, metavar="NAMES",
                   help=f"schedulers to compare with (default {DEFAULT_BASELINES})")
    p.add_argument("--seed", type=argtypes.seed, default=0, help="seed of the optimiser (default 0)")
    p.add_argument("-o", "--output", metavar="JSON", help="also write everything to this JSON file")
    p.add_argument("--force", action="store_true", help="replace an existing --output file")
    add_output_flags(p, "no progress lines")
    p.set_defaults(func=_cmd_tune)
