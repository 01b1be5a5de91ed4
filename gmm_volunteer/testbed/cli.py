"""`gmmv testbed CONFIG -o STORE` (docs/testbed.md). Exit codes as every command: 0 written,
1 the run failed or the machine cannot host it (not root, no cgroups or namespaces),
2 bad config or arguments (the message names the key), 130 interrupted (everything the
run made is removed first)."""

from __future__ import annotations

import argparse
import sys


def _cmd_testbed(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli.commands import CommandError, prepare_store_output
    from gmm_volunteer.cli.errors import EXIT_FAILURE, EXIT_OK
    from gmm_volunteer.io.results import write_result
    from gmm_volunteer.run.config import ConfigError
    from gmm_volunteer.testbed.config import check_before_start, load_testbed

    try:
        cfg, tb = load_testbed(args.config, args.set or ())
        # Bad input is exit 2 before any cgroup, namespace, link or process exists.
        check_before_start(cfg, tb, str(args.config))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    out = prepare_store_output(args, cfg, "testbed")
    side = None
    if args.speed:
        from gmm_volunteer.testbed.speed import SpeedError, measure, sidecar

        side = sidecar(out)
        if side.exists() and not args.force:
            raise CommandError(f"--speed: {side} exists; --force replaces it with the store")

    from gmm_volunteer.testbed.isolation import IsolationError
    from gmm_volunteer.testbed.run import TestbedError, run_testbed

    every = max(1, cfg.steps // 10)

    def progress(t: int) -> None:
        if not args.quiet and ((t + 1) % every == 0 or t + 1 == cfg.steps):
            print(f"gmmv testbed: step {t + 1}/{cfg.steps}", file=sys.stderr, flush=True)

    speed_text = None
    if side is not None:
        if not args.quiet:
            print("gmmv testbed: measuring the machine's speed (cold batches of every type, about half a "
                  "minute)", file=sys.stderr, flush=True)
        try:
            speed_text = measure(cfg.model, tb.mmap_threshold_kb)
        except SpeedError as exc:
            raise CommandError(f"--speed: {exc}", code=EXIT_FAILURE) from None
    if not args.quiet:
        print(f"gmmv testbed: starting {cfg.users.count} volunteers and the server "
              f"({cfg.scheduler}, {cfg.steps} steps of 1 s)", file=sys.stderr, flush=True)
    try:
        record = run_testbed(cfg, tb, progress)
    except (IsolationError, TestbedError) as exc:
        raise CommandError(f"{exc}", code=EXIT_FAILURE) from None
    write_result(record, out, overwrite=args.force)
    print(f"wrote {out}")
    if speed_text is not None:
        side.write_text(speed_text)
        print(f"wrote {side}")
    return EXIT_OK


def add_subcommands(subparsers) -> None:
    from gmm_volunteer.cli.commands import add_output_flags

    p = subparsers.add_parser(
        "testbed",
        help="run the model live: a real server, volunteer processes and users on this machine",
        description="Run a live testbed of the config (a `gmmv run` config with a `testbed:` "
                    "section): a server process and one process per user device, each with its "
                    "own cgroup CPU quota and memory limit and its own tc-shaped link in a network "
                    "namespace, running the bundle's ONNX subtasks; write the same result store as "
                    "`gmmv run` (docs/testbed.md). Needs root, cgroups, iproute2.")
    p.add_argument("config", metavar="CONFIG", help="YAML run config with a testbed: section")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set testbed.link_delay_ms=20 (repeatable)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="result store path (default: output.path, else results/<config stem>.zarr)")
    p.add_argument("--force", action="store_true", help="replace an existing result store")
    p.add_argument("--speed", action="store_true",
                   help="measure the machine's speed right before the run (cold batches, as "
                        "`testbed.calibrate --cold`) and write it beside the store as STORE.speed.txt, "
                        "for `testbed.compare --speed-reference` (docs/testbed.md)")
    add_output_flags(p, "no progress lines")
    p.set_defaults(func=_cmd_testbed)
