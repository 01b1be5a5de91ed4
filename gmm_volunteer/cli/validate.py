"""`gmmv validate CONFIG [--set ...]`: everything `gmmv run` checks before its first
step, and the estimated memory and run time, without running (docs/usage.md).

Checked, with the messages and exit code 2 of `gmmv run`: the config and its overrides
(keys, types, values, policy names and their options), the model bundle and its
agreement with the config, the memory the run needs against the memory available now,
the parameters the kernels get, the policies' construction and scripted events, and the
output path (`-o`, `--force` as for `gmmv run`). Nothing is simulated, compiled or
written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gmm_volunteer.cli.commands import EXIT_OK, add_output_flags


# A `gmmv run` process before its state: Python, numba, xarray (about 200 MB at 1,000
# users in the 0.5.0 benchmarks, README "Speed", whose runs' state is a few MB).
PROCESS_BYTES = 200e6


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _duration(s: float) -> str:
    if s < 1:
        return "under 1 s"
    if s < 90:
        return f"about {s:.0f} s"
    if s < 5400:
        return f"about {s / 60:.0f} min"
    return f"about {s / 3600:.1f} h"


def check(config: str, overrides=(), output: str | None = None, force: bool = False) -> list[str]:
    """Check a run as `gmmv run` would before its first step; the lines of the report.
    Raises CommandError (exit 2) naming the file and key of the first problem found."""
    from gmm_volunteer.cli.commands import check_store_output, config_error
    from gmm_volunteer.run.config import ConfigError, load_config
    from gmm_volunteer.run.preflight import available_memory, check_start, estimate_memory
    from gmm_volunteer.model.timing import estimate_seconds

    try:
        cfg = load_config(config, overrides)
        bundle = check_start(cfg, str(config))  # run's own preflight: bundle, memory, policies, events
    except ConfigError as exc:
        raise config_error(exc, config, overrides) from None
    out = Path(output) if output else cfg.output_path(config)
    out = check_store_output(out, force, "-o" if output else "output.path")  # as `gmmv run` checks it
    exists = out.exists()

    need, avail = estimate_memory(cfg, bundle), available_memory()
    seconds, basis = estimate_seconds(cfg)
    from gmm_volunteer.cli.feedback import run_kernels_cached

    cached = run_kernels_cached(cfg)
    hours = cfg.steps / 3600
    return [
        f"{config}: valid: `gmmv run` would start",
        f"  run: {cfg.users.count:,} users, {cfg.steps:,} steps ({hours:.2f} simulated hours), "
        f"scheduler {cfg.scheduler}, executor {cfg.executor}, autoscaler {cfg.autoscaler}, seed {cfg.seed}",
        f"  model: {cfg.model} ({len(bundle.task_types)} request types)",
        f"  output: {out}" + (" (exists; replaced: --force)" if exists else ""),
        f"  memory: about {_size(need)} for the state and the record at the peak, plus about "
        f"{_size(PROCESS_BYTES)} for Python and its libraries"
        + (f" ({_size(avail)} available now)" if avail is not None else ""),
        f"  run time: {_duration(seconds)} of simulation ({basis})",
        "  compilation: " + ("none (the kernels are in the cache)" if cached else
                             "1-2 minutes first (kernels not in the cache; `gmmv compile CONFIG` does it ahead)"),
    ]


def _cmd_validate(args: argparse.Namespace) -> int:
    for line in check(args.config, args.set or (), args.output, args.force):
        print(line)
    return EXIT_OK


def add_subcommands(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="check a run config as `gmmv run` would, and estimate memory and time, without running",
        description="Check everything `gmmv run` checks before its first step (config, overrides, "
                    "policies and their options, model bundle, memory, output path) and print the "
                    "estimated memory and run time. Nothing is simulated or written. Exit 0 valid, "
                    "2 not (the message names the file and key).")
    p.add_argument("config", metavar="CONFIG", help="YAML run config (see docs/usage.md)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, as for `gmmv run` (repeatable)")
    p.add_argument("-o", "--output", metavar="OUT", help="the result store `gmmv run -o` would write")
    p.add_argument("--force", action="store_true", help="as `gmmv run --force`: an existing store may be replaced")
    add_output_flags(p, "no notes")
    p.set_defaults(func=_cmd_validate)
