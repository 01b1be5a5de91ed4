"""`gmmv init DIR`: write the example configs, a small traces sample and the docs
(`gmm_volunteer.starter`) into DIR, so that a user who installed the wheel can follow
the README from there (docs/usage.md, "Starting from a wheel").

The files come from the installed package (``gmm_volunteer/starter/``, copied from the
repository by the build); an editable install reads them from its source tree. A file
that already exists in DIR is left alone when it is the same and refused when it differs
(exit 2, nothing written): `init` never replaces what it did not write, never writes
through a symbolic link (DIR itself or one inside it) and never into the file system
root; a write that fails part way removes what it had written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gmm_volunteer.cli.errors import EXIT_FAILURE, EXIT_OK, CommandError


def starter_root() -> Path | None:
    """The folder holding the starter files: the package's ``starter/`` in an installed
    wheel, else the source tree of an editable install (None when neither has them)."""
    import gmm_volunteer
    from gmm_volunteer.starter import PACKAGE_DIR

    package = Path(gmm_volunteer.__file__).resolve().parent
    for root in (package / PACKAGE_DIR, package.parent):
        if (root / "configs" / "quickstart.yaml").is_file():
            return root
    return None


def _cmd_init(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli import feedback
    from gmm_volunteer.starter import starter_files

    root = starter_root()
    if root is None:
        raise CommandError("this installation holds no starter files (gmm_volunteer/starter/): "
                           "reinstall from a wheel built by `python -m build`", EXIT_FAILURE)
    if not args.directory.strip():
        raise CommandError(f"DIR {args.directory!r}: an empty path; name a folder for the starter files")
    out = Path(args.directory)
    _check_folder(out)
    files = starter_files(root)
    differing, linked, to_write = [], [], []
    for rel in files:
        target = out / rel
        if any(part.is_symlink() for part in (target, *target.parents) if part != out and out in part.parents):
            linked.append(rel)  # a link inside DIR may point anywhere: never written through
        elif target.is_dir() or (target.exists() and not target.is_file()):
            differing.append(rel)
        elif not target.exists():
            to_write.append(rel)
        elif target.read_bytes() != (root / rel).read_bytes():
            differing.append(rel)
    if linked:
        raise CommandError(f"DIR {out}: {linked[0]} is a symbolic link or lies under one"
                           + (f" (and {len(linked) - 1} more)" if len(linked) > 1 else "")
                           + "; nothing written: init never writes through a link")
    if differing:
        shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more" if len(differing) > 5 else "")
        raise CommandError(f"DIR {out}: {len(differing)} file(s) exist and differ from the starter files "
                           f"({shown}); nothing written: choose an empty or new folder")
    _write(root, out, to_write)
    kept = len(files) - len(to_write)
    print(f"wrote {len(to_write)} files to {out}" + (f" ({kept} already there, the same)" if kept else ""))
    feedback.info(f"next:\n  cd {out}\n  gmmv run configs/quickstart.yaml\n  gmmv summarize results/quickstart.zarr\n"
                  f"docs: {out / 'README.md'} and {out / 'docs'}/ (usage.md first)")
    return EXIT_OK


def _check_folder(out: Path) -> None:
    """Refuse, before anything is written, a DIR init cannot fill: the file system root,
    a symbolic link (dangling or not: init writes into the folder it is given, never
    through a link), something that is not a folder, and a place this process cannot
    create files in (`check_output_target`, probed in DIR or its nearest existing parent)."""
    from gmm_volunteer.cli.outputs import check_output_target, path_problem

    problem = path_problem(out / "README.md")  # a NUL byte, a name too long, unresolvable
    if problem:
        raise CommandError(f"DIR {out}: {problem}")
    if out.is_symlink():
        raise CommandError(f"DIR {out}: is a symbolic link; init writes only into a folder of its own path")
    try:
        resolved = out.resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise CommandError(f"DIR {out}: cannot be resolved ({exc})") from None
    if resolved == Path(resolved.anchor):
        raise CommandError(f"DIR {out}: is the file system root; name a folder for the starter files")
    if out.exists() and not out.is_dir():
        raise CommandError(f"DIR {out}: exists and is not a directory")
    try:  # writable: probed in DIR, or where it would be made
        check_output_target(out / "README.md", "DIR")
    except CommandError as exc:
        raise CommandError(str(exc).replace(f"DIR {out / 'README.md'}:", f"DIR {out}:")) from None


def _write(root: Path, out: Path, rels: list[str]) -> None:
    """Copy the starter files `rels` into `out`; on a failure, remove what this call
    made (files and the folders it created) and report it (exit 2)."""
    made: list[Path] = []
    try:
        for rel in rels:
            target = out / rel
            for folder in reversed([target.parent, *target.parent.parents]):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
            target.write_bytes((root / rel).read_bytes())
            made.append(target)
    except OSError as exc:
        for path in reversed(made):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass
        raise CommandError(f"DIR {out}: cannot write {exc.filename or out} ({exc.strerror or exc}); "
                           "what it had written is removed again") from None


def add_subcommands(subparsers) -> None:
    from gmm_volunteer.cli.commands import add_output_flags

    p = subparsers.add_parser(
        "init",
        help="write the example configs, a traces sample and the docs into a folder",
        description="Write configs/ (quickstart, the reduced grid, the paper's configs), traces/ (a "
                    "small sample in the format `gmmv fit` reads), README.md and docs/ into DIR, from "
                    "the installed package. Files already there are kept when they are the same; if "
                    "any differs, nothing is written (exit 2).",
    )
    p.add_argument("directory", metavar="DIR", help="folder to write into (created if missing)")
    add_output_flags(p, "no next-steps note")
    p.set_defaults(func=_cmd_init)
