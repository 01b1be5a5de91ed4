"""`gmmv init DIR`: write the example configs, a small traces sample and the docs
(`gmm_volunteer.starter`) into DIR, so that a user who installed the wheel can follow
the README from there (docs/usage.md, "Starting from a wheel").

The files come from the installed package (``gmm_volunteer/starter/``, copied from the
repository by the build); an editable install reads them from its source tree. A file
that already exists in DIR is left alone when it is the same and refused when it differs
(exit 2, nothing written): `init` never replaces what it did not write.
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
    from gmm_volunteer.cli.outputs import check_output_target
    from gmm_volunteer.starter import starter_files

    root = starter_root()
    if root is None:
        raise CommandError("this installation holds no starter files (gmm_volunteer/starter/): "
                           "reinstall from a wheel built by `python -m build`", EXIT_FAILURE)
    out = Path(args.directory)
    if out.exists() and not out.is_dir():
        raise CommandError(f"DIR {out}: exists and is not a directory")
    if not out.exists():
        check_output_target(out, "DIR")
    files = starter_files(root)
    differing, to_write = [], []
    for rel in files:
        target = out / rel
        if target.is_dir() or (target.exists() and not target.is_file()):
            differing.append(rel)
        elif not target.exists():
            to_write.append(rel)
        elif target.read_bytes() != (root / rel).read_bytes():
            differing.append(rel)
    if differing:
        shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more" if len(differing) > 5 else "")
        raise CommandError(f"DIR {out}: {len(differing)} file(s) exist and differ from the starter files "
                           f"({shown}); nothing written: choose an empty or new folder")
    for rel in to_write:
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((root / rel).read_bytes())
    kept = len(files) - len(to_write)
    print(f"wrote {len(to_write)} files to {out}" + (f" ({kept} already there, the same)" if kept else ""))
    feedback.info(f"next:\n  cd {out}\n  gmmv run configs/quickstart.yaml\n  gmmv summarize results/quickstart.zarr\n"
                  f"docs: {out / 'README.md'} and {out / 'docs'}/ (usage.md first)")
    return EXIT_OK


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
