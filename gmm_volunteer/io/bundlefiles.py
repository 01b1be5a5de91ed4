"""Model bundles on disk (docs/formats.md, section 1): finding a bundle (a directory with
its `bundle.yaml`, or one shipped with the package), reading and validating it against
the schema of `gmm_volunteer.model.bundle`, and writing one atomically.

`gmm_volunteer/fitting/` writes bundles, the simulator reads them; what a bundle holds is
defined by the model, and this module is the one place that knows its files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from gmm_volunteer.model.bundle import Bundle, BundleError, validate_bundle

FILENAME = "bundle.yaml"


# Bundles shipped inside the package (package data): `model: default` names
# gmm_volunteer/bundles/default when no such directory is next to the config.
PACKAGED = Path(__file__).resolve().parent.parent / "bundles"


def packaged_bundle(name: str) -> Path | None:
    """The directory of the bundle shipped under `name`, or None when `name` is not a
    bare name (it has a path separator) or no such bundle is shipped."""
    if not name or name in (".", "..") or "/" in name or os.sep in name or name.startswith("~"):
        return None
    path = PACKAGED / name
    return path if (path / FILENAME).is_file() else None


def bundle_file(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p / FILENAME if p.is_dir() or p.suffix == "" else p


def load_bundle(path: str | os.PathLike) -> Bundle:
    """Read and validate `path` (a bundle directory or its bundle.yaml)."""
    from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

    try:
        f = bundle_file(path)
        if not f.exists():
            raise BundleError(f"{f}: model bundle not found")
        raw = f.read_bytes()
    except (OSError, ValueError) as exc:
        if isinstance(exc, BundleError):
            raise
        raise BundleError(f"{path}: cannot read the model bundle: {exc}") from None
    try:
        data = load_yaml(raw, str(f))
    except YAMLInputError as err:
        raise BundleError(str(err)) from None
    return validate_bundle(data, str(f))


def check_bundle_destination(path: str | os.PathLike) -> Path:
    """Refuse a destination a bundle must not be written to: an existing file, or an
    existing directory that is not a model bundle (anything but ``bundle.yaml`` and a
    ``report`` directory in it). Only a bundle is ever replaced. Raises `BundleError`."""
    dest = Path(path)
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise BundleError(f"{dest}: exists and is not a model bundle directory; refusing to replace it")
    if dest.exists():
        names = {p.name for p in dest.iterdir()}
        if FILENAME not in names or not names <= {FILENAME, "report"}:
            raise BundleError(f"{dest}: exists and is not a model bundle (a directory with "
                              f"{FILENAME} and report/ only); refusing to replace it")
    cwd = Path.cwd().resolve()
    if dest.resolve() == cwd or dest.resolve() in cwd.parents:
        raise BundleError(f"{dest}: is the current directory or one of its parents")
    return dest


def _is_bundle_dir(path: Path, allow_empty: bool = False) -> bool:
    """A folder that a bundle writer made: a bundle.yaml with a format_version (or, for an
    unfinished write, nothing yet)."""
    try:
        entries = [e.name for e in path.iterdir()]
    except OSError:
        return False
    if not entries:
        return allow_empty
    try:
        head = yaml.safe_load((path / FILENAME).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    return isinstance(head, dict) and "format_version" in head


def clean_bundle_leftovers(dest: Path) -> list[str]:
    """Deal with ``.<name>.tmp-<pid>`` and ``.<name>.old-<pid>`` folders that a killed
    bundle writer left beside `dest` (only those of processes that are gone, and only
    folders that are provably a bundle writer's): an unfinished write is removed; a
    replaced bundle is removed when a bundle is at `dest` and renamed back when nothing
    is. Anything else is left alone. Returns one line per action."""
    from gmm_volunteer.io.storepath import _pid_alive

    notes: list[str] = []
    try:
        siblings = sorted(dest.parent.iterdir())
    except OSError:
        return notes
    for entry in siblings:
        name = entry.name
        for kind in ("tmp", "old"):
            prefix = f".{dest.name}.{kind}-"
            if not name.startswith(prefix) or not name[len(prefix):].isdigit():
                continue
            if _pid_alive(int(name[len(prefix):])) or entry.is_symlink() or not entry.is_dir():
                continue
            if kind == "tmp" and _is_bundle_dir(entry, allow_empty=True):
                shutil.rmtree(entry, ignore_errors=True)
                notes.append(f"removed {entry} (an unfinished bundle write of a process that is gone)")
            elif kind == "old" and _is_bundle_dir(entry):
                if not dest.exists() and not dest.is_symlink():
                    os.rename(entry, dest)
                    notes.append(f"restored {dest} from {entry.name} (its replacement was interrupted)")
                elif _is_bundle_dir(dest):
                    shutil.rmtree(entry, ignore_errors=True)
                    notes.append(f"removed {entry} (a bundle replaced by a process that is gone)")
    return notes


def write_bundle(data: dict, path: str | os.PathLike, extra_files: dict[str, Path] | None = None) -> Path:
    """Validate and write a bundle directory atomically (tmp dir, then rename).

    An invalid bundle raises before anything is written; an existing bundle at `path` is
    replaced only once the new one is complete, and anything else there is refused
    (`check_bundle_destination`). `extra_files` maps names inside the bundle
    directory to files or directories to copy in (e.g. a diagnostics report).
    """
    validate_bundle(data, str(path))
    dest = check_bundle_destination(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_bundle_leftovers(dest)
    # the writer's pid in the name: a killed writer's folder is recognised and cleaned later
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)  # this process's own earlier, failed attempt
    tmp.mkdir()
    try:
        (tmp / FILENAME).write_text(yaml.safe_dump(data, sort_keys=False, width=100))
        for name, src in (extra_files or {}).items():
            src = Path(src)
            if src.is_dir():
                shutil.copytree(src, tmp / name)
            else:
                shutil.copy2(src, tmp / name)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old)
        else:
            tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
