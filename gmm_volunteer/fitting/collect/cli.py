"""Argument parsing for `gmmv collect resources|subtasks|downloads`.

`add_collect_parser(subparsers)` adds the `collect` command to an argparse
sub-parser collection; every leaf sets `func(args) -> int`. The heavy collectors are
imported only when run. `python -m gmm_volunteer.fitting.collect collect ...` gives the same commands
without the simulator's CLI.
"""

from __future__ import annotations

import argparse
import shlex
import sys


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


def _run_resources(args: argparse.Namespace) -> int:
    from .resources import collect_resources

    path = collect_resources(
        args.out,
        interval=args.interval,
        duration=args.duration,
        n_samples=args.samples,
        link_mbps=args.link_mbps,
        path=args.path,
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
        _collect_subtasks(collect_subtasks, args)
    except NotQuietError as err:
        # nothing is written: a partial trace measured on a busy machine is not wanted
        print(f"gmmv collect subtasks: {err}", file=sys.stderr)
        return 1
    return 0


def _collect_subtasks(collect_subtasks, args: argparse.Namespace) -> None:
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
    )


def _run_downloads(args: argparse.Namespace) -> int:
    from .downloads import collect_downloads

    collect_downloads(
        args.out,
        resource_trace=args.resource_trace,
        n_levels=args.levels,
        fixed_levels=args.fixed_levels,
        types=args.types,
        repetitions=args.repetitions,
        chunk_bytes=args.chunk_bytes,
        model_dir=args.model_dir,
        sample_hz=args.sample_hz,
        preliminary=args.preliminary,
        command=_command_line(),
        quiet=args.quiet,
    )
    return 0


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
    r.add_argument("--path", default=".", help="filesystem whose free space is storage")
    r.add_argument("--nics", type=_strs, default=None, help="interfaces to count (default: all but loopback/virtual)")
    _add_output_flags(r)
    r.set_defaults(func=_run_resources)

    s = sub.add_parser("subtasks", help="run CV inference subtasks and record their consumption")
    s.add_argument("--out", default="traces/subtasks", help="output folder")
    s.add_argument("--types", type=_strs, default=None,
                   help="subtask types (default: all: ppocr_det ppocr_cls ppocr_rec mobilenet_v2 resnet50)")
    s.add_argument("--batch-sizes", type=_ints, default=[1, 2, 5, 10, 20, 50])
    s.add_argument("--bandwidths", type=_floats, default=[5.0, 20.0, 100.0],
                   help="rate limits (Mbit/s) of the local server")
    s.add_argument("--repetitions", type=int, default=2)
    s.add_argument("--model-dir", default=None, help="where built random-weight models are cached")
    s.add_argument("--sample-hz", type=float, default=10.0)
    s.add_argument("--threads", type=int, default=None,
                   help="onnxruntime intra-op threads (default 2, a volunteer's 200 %% CPU; 0 = runtime default)")
    s.add_argument("--quiet-threshold", type=float, default=None,
                   help="largest CPU (cores) the rest of the machine may use during a kept run (default 0.2)")
    s.add_argument("--quiet-attempts", type=int, default=None,
                   help="tries per run before giving up on a busy machine (default 20)")
    s.add_argument("--quiet-wait", type=float, default=None,
                   help="seconds to wait for quiet per run before giving up (default 1800)")
    s.add_argument("--seed", type=int, default=0)
    _add_output_flags(s)
    s.set_defaults(func=_run_subtasks)

    d = sub.add_parser("downloads", help="download subtask data at Lloyd-Max bandwidth levels")
    d.add_argument("--out", default="traces/downloads", help="output folder")
    d.add_argument("--resource-trace", default="traces/resources/resources.csv.gz",
                   help="resource trace whose band_in_mbps is quantized")
    d.add_argument("--levels", type=int, default=4, help="number of Lloyd-Max levels")
    d.add_argument("--fixed-levels", type=_floats, default=None,
                   help="use these levels (Mbit/s) instead of Lloyd-Max")
    d.add_argument("--types", type=_strs, default=None, help="subtask types whose model files are downloaded")
    d.add_argument("--repetitions", type=int, default=1)
    d.add_argument("--chunk-bytes", type=int, default=1024)
    d.add_argument("--model-dir", default=None)
    d.add_argument("--sample-hz", type=float, default=10.0)
    d.add_argument("--preliminary", action="store_true",
                   help="mark the levels as coming from a preliminary resource trace")
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
