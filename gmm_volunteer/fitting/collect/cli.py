"""Argument parsing for `gmmv collect resources|subtasks|downloads`.

`add_collect_parser(subparsers)` adds the `collect` command to an argparse
sub-parser collection; every leaf sets `func(args) -> int`. The heavy collectors are
imported only when run. `python -m gmm_volunteer.fitting.collect collect ...` gives the same commands
without the simulator's CLI.

`--testbed CONFIG [--node user|server]` measures inside the limits of a testbed node
(`gmm_volunteer.testbed.limits`). Exit codes: 0 written; 1 the measurement failed or the
machine cannot host the limits (not root, no cgroups, no iproute2); 2 bad arguments or
config (the message names the option or key); 130 interrupted (what the collection made
is removed first).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from gmm_volunteer.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE  # a leaf module


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.replace(",", " ").split()]


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.replace(",", " ").split()]


def _strs(s: str) -> list[str]:
    return [x for x in s.replace(",", " ").split()]


def _command_line() -> str:
    prog = sys.argv[0].rsplit("/", 1)[-1]
    if prog in ("__main__.py", "-m"):
        prog = "python -m gmm_volunteer.fitting.collect"
    return " ".join([prog] + [shlex.quote(a) for a in sys.argv[1:]])


class _BadInput(ValueError):
    """Bad arguments (exit 2)."""


def _fail(command: str, err: BaseException, code: int) -> int:
    print(f"gmmv collect {command}: {err}", file=sys.stderr)
    return code


def _node_limits(args: argparse.Namespace):
    """The testbed node's limits (`--testbed`, `--node`), or None; _BadInput on bad input."""
    if args.testbed is None:
        if args.node is not None:
            raise _BadInput("--node needs --testbed CONFIG (the testbed config whose node limits to use)")
        return None
    from gmm_volunteer.testbed.limits import LimitsError, node_limits

    try:
        return node_limits(args.testbed, args.node or "user")
    except LimitsError as err:
        raise _BadInput(str(err)) from None


def _refuse(args: argparse.Namespace, why: str, *options: str) -> None:
    """_BadInput if any of `options` (dest names) was given: `why` they do not apply."""
    given = [f"--{o.replace('_', '-')}" for o in options if getattr(args, o) is not None]
    if given:
        raise _BadInput(f"{', '.join(given)}: {why}")


def _limited_run(command: str, args: argparse.Namespace, limits, link: bool, collect) -> int:
    """Run `collect(limited)` inside a `LimitedWorker` of `limits`; exit code."""
    from gmm_volunteer.testbed.isolation import IsolationError
    from gmm_volunteer.testbed.limits import LimitedWorker

    from .quiet import NotQuietError
    from .subtasks import WorkerDiedError

    try:
        with LimitedWorker(limits, link=link) as lw:
            if not args.quiet:
                where = (f"link {lw.link.outer} / namespace {lw.link.ns}, {limits.band_in_mbps:g} Mbit/s in, "
                         f"{limits.band_out_mbps:g} out" if lw.link is not None else "loopback")
                print(f"{command}: worker in cgroup {lw.cg.name} ({limits.cpu_pct:g} % CPU, "
                      f"{limits.memory_mb:g} MB; the testbed's {limits.node} node of {limits.config}); {where}",
                      file=sys.stderr, flush=True)
            collect(lw)
    except (IsolationError, NotQuietError, WorkerDiedError) as err:
        return _fail(command, err, EXIT_FAILURE)
    except KeyboardInterrupt:
        return _fail(command, "interrupted; what it made is removed", EXIT_INTERRUPTED)
    return 0


def _run_resources(args: argparse.Namespace) -> int:
    from .resources import collect_resources, limits_resources

    try:
        limits = _node_limits(args)
        if limits is not None:
            _refuse(args, "a testbed node's resources are its configured limits (--testbed)",
                    "link_mbps", "path", "nics")
    except _BadInput as err:
        return _fail("resources", err, EXIT_USAGE)
    if limits is not None:
        print(limits_resources(args.out, limits, interval=args.interval, duration=args.duration,
                               n_samples=args.samples, command=_command_line()))
        return 0
    path = collect_resources(
        args.out,
        interval=args.interval,
        duration=args.duration,
        n_samples=args.samples,
        link_mbps=args.link_mbps,
        path=args.path if args.path is not None else ".",
        nics=args.nics,
        command=_command_line(),
        quiet=args.quiet,
    )
    print(path)
    return 0


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """``--quiet`` / ``-v`` as on every `gmmv` command (the collectors' progress lines)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress lines; results, warnings and errors only")
    group.add_argument("-v", "--verbose", action="store_true", help="more detail on stderr")


def _run_subtasks(args: argparse.Namespace) -> int:
    from .quiet import NotQuietError
    from .subtasks import collect_subtasks

    try:
        limits = _node_limits(args)
        if limits is not None and limits.shaped:
            _refuse(args, "with --testbed a device's shaped link sets the bandwidth (its band_in)",
                    "bandwidths")
            if limits.band_in_mbps != limits.band_out_mbps:
                raise _BadInput(f"--testbed {limits.config}: the device's band_in ({limits.band_in_mbps:g}) and "
                                f"band_out ({limits.band_out_mbps:g}) differ; a subtask run has one bandwidth "
                                "for its input download and its upload (traces/FORMAT.md)")
            args.bandwidths = [limits.band_in_mbps]
        if args.threads is None and limits is not None:
            args.threads = limits.threads
        if args.bandwidths is None:
            args.bandwidths = list(DEFAULT_BANDWIDTHS)
    except _BadInput as err:
        return _fail("subtasks", err, EXIT_USAGE)
    if limits is not None:
        return _limited_run("subtasks", args, limits, limits.shaped,
                            lambda lw: _collect_subtasks(collect_subtasks, args, lw))
    try:
        _collect_subtasks(collect_subtasks, args)
    except NotQuietError as err:
        # nothing is written: a partial trace measured on a busy machine is not wanted
        print(f"gmmv collect subtasks: {err}", file=sys.stderr)
        return 1
    return 0


def _collect_subtasks(collect_subtasks, args: argparse.Namespace, limited=None) -> None:
    collect_subtasks(
        args.out,
        types=args.types,
        batch_sizes=args.batch_sizes,
        bandwidths=args.bandwidths,
        repetitions=args.repetitions,
        model_dir=args.model_dir,
        sample_hz=args.sample_hz,
        threads=args.threads,
        seed=args.seed,
        command=_command_line(),
        quiet=args.quiet,
        quiet_threshold=args.quiet_threshold,
        quiet_attempts=args.quiet_attempts,
        quiet_wait=args.quiet_wait,
        limited=limited,
    )


def _run_downloads(args: argparse.Namespace) -> int:
    from .downloads import collect_downloads

    try:
        limits = _node_limits(args)
        if limits is not None:
            if not limits.shaped:
                raise _BadInput("--node server: the testbed's server downloads no subtask data (it holds the "
                                "model files) and its link is not shaped; collect downloads for --node user")
            _refuse(args, "with --testbed the device's link sets the one level (its band_in)",
                    "resource_trace", "levels", "fixed_levels")
    except _BadInput as err:
        return _fail("downloads", err, EXIT_USAGE)
    if limits is not None:
        return _limited_run("downloads", args, limits, True, lambda lw: _collect_downloads(collect_downloads, args, lw))
    _collect_downloads(collect_downloads, args)
    return 0


def _collect_downloads(collect_downloads, args: argparse.Namespace, limited=None) -> None:
    collect_downloads(
        args.out,
        resource_trace=args.resource_trace if args.resource_trace is not None else DEFAULT_RESOURCE_TRACE,
        n_levels=args.levels if args.levels is not None else 4,
        fixed_levels=args.fixed_levels,
        types=args.types,
        repetitions=args.repetitions,
        chunk_bytes=args.chunk_bytes,
        model_dir=args.model_dir,
        sample_hz=args.sample_hz,
        preliminary=args.preliminary,
        command=_command_line(),
        quiet=args.quiet,
        limited=limited,
    )


DEFAULT_BANDWIDTHS = (5.0, 20.0, 100.0)
DEFAULT_RESOURCE_TRACE = "traces/resources/resources.csv.gz"


def _add_testbed_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--testbed", metavar="CONFIG", default=None,
                   help=f"{what} inside the limits of a node of this testbed config (docs/testbed.md, "
                        "'Fitting from the testbed'; needs root for cgroups and links)")
    p.add_argument("--node", choices=("user", "server"), default=None,
                   help="which node's limits with --testbed: a user device (default; base_profile x "
                        "users.capacity, its shaped link) or the server (its maximum allocation)")


def add_collect_parser(subparsers) -> argparse.ArgumentParser:
    """Add `collect` (with `resources`, `subtasks`, `downloads`) to `subparsers`."""
    p = subparsers.add_parser(
        "collect",
        help="measure traces on this machine (needs the 'collect' extra for subtasks/downloads)",
        description="Measure traces on this machine; formats in traces/FORMAT.md.",
    )
    sub = p.add_subparsers(dest="collect_command", metavar="{resources,subtasks,downloads}")
    sub.required = True

    r = sub.add_parser("resources", help="sample resources available for volunteering")
    r.add_argument("--out", default="traces/resources", help="output folder")
    r.add_argument("--interval", type=float, default=3.0, help="seconds between samples")
    r.add_argument("--duration", type=float, default=3700.0, help="seconds to sample")
    r.add_argument("--samples", type=int, default=None, help="exact number of samples (overrides --duration)")
    r.add_argument("--link-mbps", type=float, default=None,
                   help="nominal link capacity for the bandwidth proxy (default: kernel link speed, else 100)")
    r.add_argument("--path", default=None, help="filesystem whose free space is storage (default: .)")
    r.add_argument("--nics", type=_strs, default=None, help="interfaces to count (default: all but loopback/virtual)")
    _add_testbed_flags(r, "write the configured limits (nothing is measured; no root needed)")
    _add_output_flags(r)
    r.set_defaults(func=_run_resources)

    s = sub.add_parser("subtasks", help="run CV inference subtasks and record their consumption")
    s.add_argument("--out", default="traces/subtasks", help="output folder")
    s.add_argument("--types", type=_strs, default=None,
                   help="subtask types (default: all: ppocr_det ppocr_cls ppocr_rec mobilenet_v2 resnet50)")
    s.add_argument("--batch-sizes", type=_ints, default=[1, 2, 5, 10, 20, 50])
    s.add_argument("--bandwidths", type=_floats, default=None,
                   help="rate limits (Mbit/s) of the local server (default 5, 20, 100; with --testbed "
                        "for a user device: its link's rate)")
    s.add_argument("--repetitions", type=int, default=2)
    s.add_argument("--model-dir", default=None, help="where built random-weight models are cached")
    s.add_argument("--sample-hz", type=float, default=10.0)
    s.add_argument("--threads", type=int, default=None,
                   help="onnxruntime intra-op threads (default 2, a volunteer's 200 %% CPU; with --testbed "
                        "the node's: one per whole core of its quota, at least 1; 0 = runtime default)")
    s.add_argument("--quiet-threshold", type=float, default=None,
                   help="largest CPU (cores) the rest of the machine may use during a kept run (default 0.2)")
    s.add_argument("--quiet-attempts", type=int, default=None,
                   help="tries per run before giving up on a busy machine (default 20)")
    s.add_argument("--quiet-wait", type=float, default=None,
                   help="seconds to wait for quiet per run before giving up (default 1800)")
    s.add_argument("--seed", type=int, default=0)
    _add_testbed_flags(s, "run the worker")
    _add_output_flags(s)
    s.set_defaults(func=_run_subtasks)

    d = sub.add_parser("downloads", help="download subtask data at Lloyd-Max bandwidth levels")
    d.add_argument("--out", default="traces/downloads", help="output folder")
    d.add_argument("--resource-trace", default=None,
                   help=f"resource trace whose band_in_mbps is quantized (default {DEFAULT_RESOURCE_TRACE})")
    d.add_argument("--levels", type=int, default=None, help="number of Lloyd-Max levels (default 4)")
    d.add_argument("--fixed-levels", type=_floats, default=None,
                   help="use these levels (Mbit/s) instead of Lloyd-Max")
    d.add_argument("--types", type=_strs, default=None, help="subtask types whose model files are downloaded")
    d.add_argument("--repetitions", type=int, default=1)
    d.add_argument("--chunk-bytes", type=int, default=1024)
    d.add_argument("--model-dir", default=None)
    d.add_argument("--sample-hz", type=float, default=10.0)
    d.add_argument("--preliminary", action="store_true",
                   help="mark the levels as coming from a preliminary resource trace")
    _add_testbed_flags(d, "download over a device's shaped link, in its cgroup (one level: its band_in)")
    _add_output_flags(d)
    d.set_defaults(func=_run_downloads)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gmmv")
    subparsers = parser.add_subparsers(dest="command")
    subparsers.required = True
    add_collect_parser(subparsers)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
