"""The files `gmmv init DIR` writes: the repository's example configs, a small traces
sample and the documentation, so that an installation from a wheel has what the README
and docs point at (docs/usage.md, "Starting from a wheel").

One definition, read by the build (setup.py copies these paths of the source tree into
the wheel's ``gmm_volunteer/starter/``, so the wheel's copy is the repository's, byte for
byte) and by `gmm_volunteer.cli.init` (which writes them out). Standard library only:
setup.py loads this file before the package's dependencies exist.
"""

from __future__ import annotations

from pathlib import Path

# Paths relative to the repository root; a folder stands for every file under it, a
# pattern with * for the files it matches.
STARTER = (
    "configs/quickstart.yaml",      # one simulated hour, 1,000 users (README, "Quickstart")
    "configs/grid_small.yaml",      # the reduced sweep and its report (docs/experiments.md)
    "configs/paper",                # the paper's base config and grids (section 3.1)
    "traces/FORMAT.md",             # what `gmmv fit` reads (docs/fitting.md)
    "traces/resources",
    "traces/subtasks",
    "traces/downloads",
    "traces/availability",          # a synthetic session sample: availability per device class
    "README.md",
    "docs/*.md",                    # the pages (their figures stay in the repository)
)
PACKAGE_DIR = "starter"  # inside the installed package: gmm_volunteer/starter/


def starter_files(root: Path) -> list[str]:
    """Every file `STARTER` names under `root`, as sorted relative POSIX paths (only
    regular files; generated caches and partial collections are not examples)."""
    out = []
    for entry in STARTER:
        path = root / entry
        if "*" in entry:
            out += [p.relative_to(root).as_posix() for p in root.glob(entry) if p.is_file()]
        elif path.is_dir():
            out += [p.relative_to(root).as_posix() for p in path.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and ".partial" not in p.parts]
        elif path.is_file():
            out.append(entry)
    return sorted(out)
