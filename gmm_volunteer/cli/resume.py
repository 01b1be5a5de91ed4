"""`gmmv run CONFIG --checkpoint-every N` and `gmmv run --resume DIR` (docs/usage.md,
"Checkpoints"): one run saved every N steps beside its result store, and continued
from its last checkpoint after a kill, to the store an uninterrupted run writes.

`gmm_volunteer.cli.commands._cmd_run` hands a run here when either flag is given, with
its error class and config loader (this module does not import `commands`, which
imports it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK = 0
CommandError = ValueError  # set by run_checkpointed: commands.CommandError (exit 2)
load_checked_config = None  # set by run_checkpointed: commands.load_checked_config


def _output(out: Path, force: bool, option: str = "-o") -> Path:
    """Checks of `gmmv run`'s output path and of its checkpoint folder's (before anything
    is simulated)."""
    from gmm_volunteer.cli.outputs import check_output_target
    from gmm_volunteer.io.storepath import OutputPathError, check_output_path, clean_stale
    from gmm_volunteer.run.checkpoint import checkpoint_dir

    check_output_target(out, option)  # a place this process can write: the store and its checkpoints
    check_output_target(checkpoint_dir(out), option)
    try:
        out = check_output_path(out, force=force)
        notes = clean_stale(out)
        for note in notes:
            print(f"gmmv run: note: {note}", file=sys.stderr)
        if notes:
            check_output_path(out, force=force)
    except OutputPathError as exc:
        raise CommandError(str(exc)) from None
    return out


def _check_every(every) -> None:
    if every is not None and every < 1:
        raise CommandError(f"--checkpoint-every: must be a number of steps >= 1 (got {every})")


def _check_checkpointable(cfg) -> None:
    """Refuse, before the run starts, a run whose policies cannot be checkpointed."""
    from gmm_volunteer.run import checkpoint as ck

    try:
        ck.check_checkpointable(cfg)
    except ck.CheckpointError as exc:
        raise CommandError(f"--checkpoint-every: {exc}") from None


def _check_folder(folder: Path) -> None:
    """Refuse a checkpoint folder that holds what this program did not write."""
    from gmm_volunteer.run import checkpoint as ck

    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise CommandError(f"{folder}: exists and is not a checkpoint folder; refusing to write checkpoints there")
    foreign = ck.foreign_entries(folder)
    if foreign:
        raise CommandError(f"{folder}: holds {foreign[0].name}, which gmmv did not write; refusing to "
                           "write checkpoints there: move it away or choose another output path (-o)")


def run_checkpointed(args: argparse.Namespace, error: type[Exception], load_config) -> int:
    """`gmmv run` with --checkpoint-every and/or --resume; `error` is the exception that
    reports bad input (exit 2), `load_config(config, overrides, workers)` loads and
    checks a run config (both from `gmm_volunteer.cli.commands`)."""
    global CommandError, load_checked_config
    CommandError, load_checked_config = error, load_config
    _check_every(args.checkpoint_every)
    if args.resume is not None:
        return _resume(args)
    return _fresh(args)


def _fresh(args: argparse.Namespace) -> int:
    from gmm_volunteer.run import checkpoint as ck

    if args.config is None:
        args.run_parser.error("the following arguments are required: CONFIG (or --resume DIR)")
    cfg = load_checked_config(args.config, args.set, 1)
    _check_checkpointable(cfg)
    out = _output(Path(args.output) if args.output else cfg.output_path(args.config), args.force,
                  "-o" if args.output else "output.path")
    cfg.output.path = str(out)
    folder = ck.checkpoint_dir(out)
    _check_folder(folder)
    ck.remove_unfinished(folder)
    found = ck.checkpoints(folder)
    if found and not args.force:
        raise CommandError(
            f"{folder}: holds a checkpoint of an earlier run ({found[-1].name}): continue it with "
            f"`gmmv run --resume {folder}`, or pass --force to discard it and start over")
    lock = _lock(folder, args)  # held until the run ends (released by _simulate)
    ck.clear(folder, keep=True)  # --force: the earlier run's, now that no process uses them
    from gmm_volunteer.run.engine import Simulation

    return _simulate(lambda: Simulation(cfg), cfg, out, folder, args.checkpoint_every, args, lock)


def _resume(args: argparse.Namespace) -> int:
    from gmm_volunteer.run import checkpoint as ck
    from gmm_volunteer.run.config import ConfigError, load_config

    try:
        path = ck.find(args.resume)
        man = ck.read_manifest(path)
        made = ck.config_of(path, man)
    except ck.CheckpointError as exc:
        raise CommandError(f"--resume: {exc}") from None
    if args.config is not None:
        # The config given must be the one the checkpoint was made from.
        try:
            cfg = load_config(args.config, args.set or ())
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        cfg.output.path = str(Path(args.output) if args.output else cfg.output_path(args.config))
        try:
            ck.check_config(path, man, cfg)
        except ck.CheckpointError as exc:
            raise CommandError(f"--resume: {exc}") from None
        cfg = made
    else:
        if args.set:
            raise CommandError("--set needs CONFIG: with --resume alone the run continues with the "
                               "checkpoint's own config, which --set cannot change")
        cfg = made
        if args.output and Path(args.output).expanduser().resolve() != Path(cfg.output.path).expanduser().resolve():
            raise CommandError(f"-o: the checkpointed run writes {cfg.output.path}; a resumed run "
                               "cannot write another store (its config names that path)")
    from gmm_volunteer.run.preflight import check_start

    try:  # the preflight of `gmmv run`, on the config the checkpoint continues
        check_start(cfg, f"{path / ck.MANIFEST} (config)")
    except ConfigError as exc:
        raise CommandError(f"--resume: {exc}") from None
    _check_checkpointable(cfg)
    out = _output(Path(cfg.output.path), args.force, "output.path")
    folder = ck.checkpoint_dir(out)
    _check_folder(folder)
    every = args.checkpoint_every or man.get("every") or max(1, int(cfg.steps) // 10)

    def restore():
        from gmm_volunteer.cli import feedback

        try:
            sim = ck.restore(path, cfg)
        except ck.CheckpointError as exc:
            raise CommandError(f"--resume: {exc}") from None
        feedback.info(f"resuming {out} from {path} (step {sim.t:,} of {sim.steps:,})")
        return sim

    return _simulate(restore, cfg, out, folder, every, args, _lock(folder, args))


def _lock(folder: Path, args):
    """The lock of checkpoint folder `folder` (`checkpoint.Hold`): one process at a time
    continues or writes its checkpoints."""
    from gmm_volunteer.run import checkpoint as ck

    try:
        return ck.Hold(folder)
    except ck.CheckpointError as exc:
        raise CommandError(f"--resume: {exc}" if args.resume is not None else str(exc)) from None


def _simulate(make_sim, cfg, out: Path, folder: Path, every: int, args, lock) -> int:
    from gmm_volunteer.cli import feedback
    from gmm_volunteer.io.results import write_result
    from gmm_volunteer.run import checkpoint as ck
    from gmm_volunteer.model.kernels.compile_log import CompileLog

    feedback.detail(f"run: {cfg.users.count} users, {cfg.steps} steps, scheduler {cfg.scheduler}, "
                    f"executor {cfg.executor}, seed {cfg.seed}, model {cfg.model} -> {out}; "
                    f"a checkpoint every {every:,} steps in {folder}")
    with lock:
        sim = make_sim()
        feedback.announce_compile()
        saver = ck.Checkpointer(folder, every)
        try:
            with CompileLog().listening() as compiled:
                record = sim.run(progress=not args.quiet, checkpoint=saver)
        except KeyboardInterrupt:
            if saver.last is not None:
                print(f"gmmv run: note: the run is saved at {saver.last.name}; continue it with "
                      f"`gmmv run --resume {folder}`", file=sys.stderr)
            raise
        feedback.detail(f"simulated in {record.attrs.get('wall_time_s', float('nan')):.1f} s; "
                        f"kernels: {compiled.summary()}")
        write_result(record, out, overwrite=args.force)
        ck.clear(folder)  # the store is complete: its checkpoints are no longer needed
    print(f"wrote {out}")
    return EXIT_OK
