"""The `gmmv` command line (docs/usage.md).

Core subcommands live here (`run`, `summarize`); other packages add theirs through an
``add_subcommands(subparsers)`` function (see `EXTENSIONS`). A subcommand parser sets
``func=handler`` with ``handler(args) -> int``; `main` maps errors to exit codes:

    0 success, 1 unexpected failure, 2 usage / config / input error, 3 targets not met
    (`gmmv capacity`), 130 interrupted, 141 output pipe closed by the reader
    (`gmm_volunteer.cli.errors`).

Heavy modules (the engine, numba, xarray, zarr) are imported inside the handlers so
that ``gmmv --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
import traceback
from pathlib import Path

from gmm_volunteer._version import __version__

from gmm_volunteer.cli.errors import (  # noqa: F401 (re-exported: gmm_volunteer.cli.commands.CommandError)
    EXIT_BROKEN_PIPE, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_MEANINGS, EXIT_OK, EXIT_USAGE, CommandError,
)

# Modules that contribute subcommands when they are present.
EXTENSIONS = ("gmm_volunteer.cli.init", "gmm_volunteer.cli.validate", "gmm_volunteer.cli.schema",
              "gmm_volunteer.cli.compile", "gmm_volunteer.cli.experiments",
              "gmm_volunteer.fitting.cli", "gmm_volunteer.optimisation.cli", "gmm_volunteer.cli.results",
              "gmm_volunteer.testbed.cli", "gmm_volunteer.cli.hazards")


def add_output_flags(parser: argparse.ArgumentParser, quiet_help: str = "no progress or notes") -> None:
    """``--quiet`` and ``-v/--verbose``, with the same meaning on every command
    (`gmm_volunteer.cli.feedback`)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true",
                       help=f"{quiet_help}; results, warnings and errors only")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="more detail on stderr (timings, what is being done)")


class _Parser(argparse.ArgumentParser):
    """argparse that suggests a close name for an invalid choice (``gmmv rn`` -> did you
    mean 'run'?); Python 3.11's argparse lists the choices only."""

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            from gmm_volunteer.model.suggest import did_you_mean

            choices = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{did_you_mean(value, action.choices)} "
                        f"(choose from {choices})")
        super()._check_value(action, value)

    def parse_args(self, args=None, namespace=None):
        """argparse's, with a close option name suggested for an unknown option
        (``gmmv run --sett`` -> did you mean '--set'?), in the subcommand's usage."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            from gmm_volunteer.model.suggest import did_you_mean

            parser = self._subcommand_parser(parsed)
            options = [o for a in parser._actions for o in a.option_strings]
            hints = [f"{e.split('=')[0]}{did_you_mean(e.split('=')[0], options, prefix=': ')}"
                     for e in extras if e.startswith("-") and did_you_mean(e.split("=")[0], options)]
            hints += _set_hints(sys.argv[1:] if args is None else list(args))
            parser.error(f"unrecognized arguments: {' '.join(extras)}"
                         + (f" ({'; '.join(hints)})" if hints else ""))
        return parsed

    def _subcommand_parser(self, parsed) -> argparse.ArgumentParser:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, action.dest, None), self)
        return self


def _set_hints(argv: list[str]) -> list[str]:
    """For ``--set steps 300`` (a space for the '='), which leaves argparse a word over
    (300, or the CONFIG after it): the one word to write instead."""
    hints = []
    for option, key, value in zip(argv, argv[1:], argv[2:]):
        if option == "--set" and "=" not in key and not value.startswith("-"):
            hints.append(f"--set takes KEY=VALUE as one word: write --set {key}={value}")
    return hints


def config_error(exc, config, overrides) -> CommandError:
    """The CommandError (exit 2) of a ConfigError met loading or checking `config` with
    `overrides`: a problem at a key an override set names the override, also when the
    check that found it runs after loading (the bundle's request types, in preflight)."""
    from gmm_volunteer.run.config import blame_overrides

    return CommandError(blame_overrides(str(exc), str(config), list(overrides or ())))


def load_checked_config(config, overrides, workers: int | None):
    """The run config with its overrides, checked before anything runs (preflight: bundle
    consistency and the memory each of `workers` parallel runs may take); a bad config
    is a CommandError naming the key."""
    from gmm_volunteer.run.config import ConfigError, load_config
    from gmm_volunteer.run.preflight import available_memory, check_start

    try:
        cfg = load_config(config, overrides or ())
        avail = available_memory()
        workers = max(1, workers or 1)
        check_start(cfg, str(config), available=None if avail is None else avail // workers)
    except ConfigError as exc:
        raise config_error(exc, config, overrides) from None
    return cfg


def check_replaceable(paths, is_ours, command: str) -> None:
    """Refuse, before anything runs, to replace an output file this command did not write.
    `paths` maps a kind ("csv", "json", ...) to a path, `is_ours` maps the kind to a test
    of the file's first 256 bytes; `command` names the writer in the message."""
    from gmm_volunteer.cli.outputs import check_output_target

    for kind, path in paths.items():
        check_output_target(path)  # before the work: a long search that cannot write is wasted
        if path.is_dir():
            raise CommandError(f"-o: {path} is a directory")
        if not path.exists():
            continue
        try:
            head = path.open("rb").read(256)
        except OSError as exc:
            raise CommandError(f"-o: cannot read {path}: {exc}") from None
        if not is_ours[kind](head):
            raise CommandError(f"-o: {path} exists and was not written by {command}; refusing to replace it")


# ---------------------------------------------------------------------------------
# gmmv run
# ---------------------------------------------------------------------------------


def check_store_output(out, force: bool, option: str = "-o") -> Path:
    """The checks of a result store's path that `gmmv run` makes before it starts (and
    `gmmv validate` reports), changing nothing: a place this process can write, and only
    a store this program wrote replaced, with --force. `option` names where the path
    came from in the message."""
    from gmm_volunteer.cli.outputs import check_output_target
    from gmm_volunteer.io.storepath import OutputPathError, check_output_path

    check_output_target(out, option)
    try:
        return check_output_path(out, force=force)
    except OutputPathError as exc:
        raise CommandError(str(exc)) from None


def prepare_store_output(args: argparse.Namespace, cfg, command: str) -> Path:
    """The result store a run of `cfg` writes (-o, else output.path, else the default),
    checked before the run so that a long one is not wasted: only a store this program
    wrote is ever replaced, and only with --force. Sets `cfg.output.path`."""
    from gmm_volunteer.io.storepath import OutputPathError, check_output_path, clean_stale

    out = Path(args.output) if args.output else cfg.output_path(args.config)
    out = check_store_output(out, args.force, "-o" if args.output else "output.path")
    try:
        notes = clean_stale(out)  # may put back a store whose replacement was killed
        for note in notes:
            print(f"gmmv {command}: note: {note}", file=sys.stderr)
        if notes:
            check_output_path(out, force=args.force)
    except OutputPathError as exc:
        raise CommandError(str(exc)) from None
    cfg.output.path = str(out)
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    if args.resume is not None or args.checkpoint_every is not None:
        from gmm_volunteer.cli.resume import run_checkpointed  # checkpoints (docs/usage.md)

        return run_checkpointed(args, CommandError, load_checked_config)
    if args.config is None:
        args.run_parser.error("the following arguments are required: CONFIG (or --resume DIR)")
    from gmm_volunteer.run.config import ConfigError, load_config

    from gmm_volunteer.run.preflight import check_start

    try:
        cfg = load_config(args.config, args.set or ())
        bundle = check_start(cfg, str(args.config))  # the bundle, memory, policies: before any work
    except ConfigError as exc:
        raise config_error(exc, args.config, args.set) from None

    out = prepare_store_output(args, cfg, "run")

    from gmm_volunteer.cli import feedback

    feedback.detail(f"run: {cfg.users.count} users, {cfg.steps} steps, scheduler {cfg.scheduler}, "
                    f"executor {cfg.executor}, seed {cfg.seed}, model {cfg.model} -> {out}")
    from gmm_volunteer.run.engine import simulate

    from gmm_volunteer.cli.feedback import compile_stage

    compile_stage(cfg, show=not args.quiet)  # a stage with its own bar, before the run's
    from gmm_volunteer.model.kernels.compile_log import CompileLog

    with CompileLog().listening() as compiled:  # -v reports what the run had to compile
        record = simulate(cfg, progress=not args.quiet, bundle=bundle)
    feedback.detail(f"simulated in {record.attrs.get('wall_time_s', float('nan')):.1f} s; "
                    f"kernels: {compiled.summary()}")
    from gmm_volunteer.io.results import write_result  # xarray and zarr: after the run, not before its first step

    write_result(record, out, overwrite=args.force)
    print(f"wrote {out}")
    return EXIT_OK


# ---------------------------------------------------------------------------------
# gmmv summarize
# ---------------------------------------------------------------------------------


def _cmd_summarize(args: argparse.Namespace) -> int:
    from gmm_volunteer.io.results import IncompleteResultError, open_result
    from gmm_volunteer.experiments.summary import summarize
    from gmm_volunteer.io.sweepdir import MANIFEST, RUNS_DIR

    path = Path(args.result)
    if path.is_file():  # a store is a folder; "incomplete, re-run it" would mislead
        hint = f"; to run it as a config: gmmv run {path}" if path.suffix.lower() in (".yaml", ".yml") else ""
        raise CommandError(f"{path} is a file, not a result store (the folder `gmmv run` writes, "
                           f"e.g. results/quickstart.zarr){hint}")
    if (path / MANIFEST).is_file():
        raise CommandError(
            f"{path} is a sweep output directory, not the store of one run: open it with "
            f"`gmmv report {path}` (an HTML report) or, from Python, "
            f"gmm_volunteer.experiments.combine.open_combined({str(path)!r}); `gmmv summarize` takes one "
            f"run's store, e.g. one of {path / RUNS_DIR}/*.zarr")
    try:
        ds = open_result(path)
    except (FileNotFoundError, IncompleteResultError) as exc:
        raise CommandError(str(exc)) from None
    if "run_complete" in ds:  # a sweep's combined dataset: a grid of runs, not one
        raise CommandError(f"{path} is a sweep's combined dataset, not the store of one run: "
                           f"open it with `gmmv report {path.parent}`")
    print(summarize(ds))
    if args.verbose and ds.attrs.get("config"):
        print("\nconfig of this run:\n" + str(ds.attrs["config"]).rstrip())
    return EXIT_OK


# ---------------------------------------------------------------------------------
# Parser and entry point
# ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gmmv",
        description=(
            "Simulate the generative Markov model of user-assisted collaborative "
            "AI inference (volunteer user devices plus a dedicated server)."
        ),
        epilog="Exit codes: " + ", ".join(f"{code} {meaning}" for code, meaning in EXIT_MEANINGS.items()) + ".",
    )
    parser.add_argument("--version", action="version", version=f"gmmv {__version__}")
    parser.add_argument("--no-plugins", action="store_true",
                        help="refuse policies from outside the package (module:Class, entry points): "
                             "a config naming one runs its code; also GMMV_NO_PLUGINS=1")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = subparsers.add_parser(
        "run",
        help="simulate one trajectory from a YAML run config",
        description="Simulate one trajectory and write it as a result store (zarr).",
    )
    p.add_argument("config", metavar="CONFIG", nargs="?",
                   help="YAML run config (see docs/usage.md); optional with --resume")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="override a config key, e.g. --set users.count=5000 (value parsed as YAML; repeatable)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="result store path (default: output.path, else results/<config stem>.zarr)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing result store")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="save the whole run every N steps in OUT.checkpoint/, so that a killed "
                        "run can continue (--resume); removed once the store is written")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run saved in checkpoint folder DIR (OUT.checkpoint) to the "
                        "store an uninterrupted run writes; CONFIG, if given, must be its config")
    add_output_flags(p, "no progress bar or compile notice")
    p.set_defaults(func=_cmd_run, run_parser=p)

    p = subparsers.add_parser(
        "summarize",
        help="print a summary of a result store",
        description="Print request outcomes, latencies and resource use of one run.",
    )
    p.add_argument("result", metavar="RESULT", help="result store written by `gmmv run`")
    add_output_flags(p)
    p.set_defaults(func=_cmd_summarize)

    for name in EXTENSIONS:
        module = _import_extension(name)
        if module is not None:
            module.add_subcommands(subparsers)
    return parser


def _import_extension(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        # Only the absence of the extension module itself is tolerated; a broken
        # import inside it must surface.
        if exc.name is not None and (exc.name == name or name.startswith(exc.name + ".")):
            return None
        raise


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gmmv` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from gmm_volunteer.cli import feedback

    feedback.set_verbosity(feedback.level_of(args))
    if getattr(args, "no_plugins", False):  # inherited by the worker processes started here
        from gmm_volunteer.policies.guard import NO_PLUGINS_ENV

        os.environ[NO_PLUGINS_ENV] = "1"
    try:
        with _warnings_as_messages(parser, args):
            return int(args.func(args) or EXIT_OK)
    except CommandError as exc:
        _error(parser, args, str(exc))
        return exc.code
    except KeyboardInterrupt:
        _error(parser, args, "interrupted; no result store was written")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`gmmv summarize ... | head`): not a failure of ours.
        # Point stdout at devnull so that the interpreter's final flush stays quiet.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a name from the input (an option, a config key)
            _error(parser, args, f"{exc.filename or 'a path'}: a path component is longer than "
                                 f"the file system allows (255 bytes)")
            return EXIT_USAGE
        traceback.print_exc()
        _error(parser, args, f"unexpected failure: {type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    except Exception as exc:
        if isinstance(exc, _input_errors()):
            if getattr(args, "verbose", False) and exc.__cause__ is not None:  # a plugin's own traceback
                traceback.print_exception(exc.__cause__)
            _error(parser, args, str(exc))
            return EXIT_USAGE
        traceback.print_exc()
        _error(parser, args, f"unexpected failure: {type(exc).__name__}: {exc}")
        return EXIT_FAILURE


@contextlib.contextmanager
def _warnings_as_messages(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """Print a `FewSeedsWarning` once per command as ``gmmv COMMAND: warning: ...``
    (not as Python's file:line warning); other warnings are left as they are."""
    import warnings

    from gmm_volunteer.experiments.intervals import FewSeedsWarning

    prefix = f"{parser.prog} {args.command}" if getattr(args, "command", None) else parser.prog
    shown: set[str] = set()
    with warnings.catch_warnings():
        original = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, FewSeedsWarning):
                return original(message, category, filename, lineno, file, line)
            if str(message) not in shown:
                shown.add(str(message))
                print(f"{prefix}: warning: {message}", file=sys.stderr, flush=True)

        warnings.showwarning = show
        # every occurrence reaches `show`, which keeps one per command (Python's "once"
        # registry would outlive the command in a process that runs several)
        warnings.simplefilter("always", FewSeedsWarning)
        yield


def _input_errors() -> tuple[type[Exception], ...]:
    """Exception types that mean bad input (exit 2), wherever they are raised."""
    from gmm_volunteer.run.config import ConfigError

    from gmm_volunteer.policies.guard import PolicyError

    types: list[type[Exception]] = [ConfigError, PolicyError]
    try:
        from gmm_volunteer.model.bundle import BundleError
        from gmm_volunteer.io.results import IncompleteResultError
    except ImportError:
        pass
    else:
        # An incomplete or damaged store (its manifest disagrees or is gone) found while
        # a lazy computation reads it (combine, report): the message names the store.
        types += [BundleError, IncompleteResultError]
    return tuple(types)


def _error(parser: argparse.ArgumentParser, args: argparse.Namespace, message: str) -> None:
    prefix = f"{parser.prog} {args.command}" if getattr(args, "command", None) else parser.prog
    for line in message.splitlines() or [""]:
        print(f"{prefix}: error: {line}", file=sys.stderr)


if __name__ == "__main__":
    # `python -m gmm_volunteer.cli` runs this file as `__main__`; the extensions raise
    # `gmm_volunteer.cli.CommandError`, so run the package module's `main`, whose
    # handlers catch that class (a `__main__.CommandError` is another class).
    from gmm_volunteer.cli.commands import main as _main

    sys.exit(_main())
