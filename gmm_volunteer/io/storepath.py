"""Where a result store may go, and what is at a store's path: the checks `gmmv run`
makes before it starts (`check_output_path`), the stores this program wrote
(`is_own_store`, `is_complete`, `store_attrs`) and the leftovers of a killed writer
(`clean_stale`). Standard library only (zarr only to read a store's ``complete`` flag),
so that a run's checks before its first step do not import xarray or dask; writing and
reading stores is `gmm_volunteer.io.results`, which re-exports these names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from gmm_volunteer.io.manifest import MANIFEST_NAME

COMPLETE_ATTR = "complete"


class OutputPathError(ValueError):
    """An output path that a result store must not be written to (or replace)."""


def is_complete(path) -> bool:
    """True when `path` is a result store whose ``complete`` attribute is set."""
    path = Path(path)
    meta = path / "zarr.json"
    if not meta.is_file():
        return False
    try:
        import zarr

        group = zarr.open_group(str(path), mode="r")
        return bool(group.attrs.get(COMPLETE_ATTR, False))
    except Exception:  # a half-written zarr.json is simply "not complete"
        return False


def store_attrs(path) -> dict | None:
    """The attributes in ``path/zarr.json`` when it is a zarr v3 group, else None."""
    path = Path(path)
    try:
        meta = json.loads((path / "zarr.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("node_type") != "group":
        return None
    attrs = meta.get("attributes")
    return attrs if isinstance(attrs, dict) else None


def _only_zarr_entries(path: Path) -> bool:
    """Every entry of `path` is zarr metadata or an array/group directory with its own
    metadata: nothing a person or another program put there."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    for e in entries:
        if e.name in ("zarr.json", MANIFEST_NAME) and e.is_file(follow_symlinks=False):
            continue
        if e.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(e.path, "zarr.json")):
            continue
        return False
    return True


def is_own_store(path) -> bool:
    """True when `path` is a result store this program wrote (complete or not): a real
    directory holding a zarr group whose attributes carry ``gmmv_version``, with no
    entry zarr did not put there. Only such a directory is ever replaced or removed."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return False
    attrs = store_attrs(path)
    return attrs is not None and "gmmv_version" in attrs and _only_zarr_entries(path)


def check_output_path(path, force: bool = False) -> Path:
    """Refuse, before anything is simulated, an output path a result store cannot go to.

    Refused: a path with a NUL byte or an unknown ``~user``; the current directory, one
    of its parents or a filesystem root; an existing file, symbolic link or directory
    that is not a result store this program wrote (even with `force`); a complete store
    without `force`; a parent that is a file or not writable. Returns the path with
    ``~`` expanded. Raises `OutputPathError`.
    """
    text = os.fspath(path)
    if "\0" in text:
        raise OutputPathError(f"{text!r}: output path contains a NUL byte")
    try:
        p = Path(text).expanduser()
    except RuntimeError as exc:  # ~nosuchuser
        raise OutputPathError(f"{text}: cannot expand the output path: {exc}") from None
    resolved = p.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise OutputPathError(
            f"{text}: is the current directory or one of its parents; a result store "
            "needs a path of its own (e.g. results/run.zarr)")
    if p.is_symlink():
        raise OutputPathError(f"{text}: is a symbolic link; refusing to write a result store there")
    if p.exists():
        if not p.is_dir():
            raise OutputPathError(f"{text}: exists and is not a directory (not a result store); "
                                  "refusing to replace it")
        if not is_own_store(p):
            raise OutputPathError(
                f"{text}: exists and is not a result store written by gmmv; refusing to "
                "replace it (even with --force): remove it yourself or choose another path")
        if "sweep_grid_file" in (store_attrs(p) or {}):  # another kind: a sweep's combined dataset
            raise OutputPathError(f"{text}: is a sweep's combined dataset; a run store never "
                                  "replaces it (even with --force)")
        if not force:
            if is_complete(p):
                raise OutputPathError(f"{text}: a complete result store already exists; "
                                      "use --force to replace it")
            raise OutputPathError(f"{text}: exists and is not a complete result store; "
                                  "use --force to replace it")
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"{text}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{text}: cannot write in {parent} (permission denied)")
    return p


_STALE = re.compile(r"^(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>[0-9]+)$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process, or not ours to judge: keep its files
    return True


def _looks_like_partial_store(path: Path) -> bool:
    """A directory a killed writer may have left: empty, or zarr entries only."""
    return path.is_dir() and not path.is_symlink() and _only_zarr_entries(path) and (
        not (path / "zarr.json").exists() or store_attrs(path) is not None)


def clean_stale(path) -> list[str]:
    """Deal with ``<path>.tmp-<pid>`` and ``<path>.old-<pid>`` left by a killed writer.

    Only entries whose process (on this machine) is gone are touched. A partial
    ``.tmp-`` store is removed. An ``.old-`` store is the previous store moved aside
    while a new one was renamed into place: it is removed when a complete store is at
    `path`, and renamed back when nothing is. Anything that does not look like a store
    this program wrote is left alone and reported. Returns one line per action.
    """
    path = Path(path)
    parent = path.parent
    notes: list[str] = []
    try:
        siblings = sorted(parent.iterdir()) if parent.is_dir() else []
    except OSError:
        return notes
    for entry in siblings:
        m = _STALE.match(entry.name)
        if m is None or m["name"] != path.name or _pid_alive(int(m["pid"])):
            continue
        if m["kind"] == "tmp":
            if _looks_like_partial_store(entry):
                shutil.rmtree(entry, ignore_errors=True)
                notes.append(f"removed {entry} (an unfinished write of process {m['pid']}, which is gone)")
            else:
                notes.append(f"left {entry} alone: named like an unfinished write but not a store gmmv wrote")
            continue
        if not is_own_store(entry):
            notes.append(f"left {entry} alone: named like a replaced store but not a store gmmv wrote")
        elif not path.exists() and not path.is_symlink() and is_complete(entry):
            os.rename(entry, path)
            notes.append(f"restored {path} from {entry.name} (its replacement by process "
                         f"{m['pid']} was interrupted)")
        elif is_own_store(path) and is_complete(path):
            shutil.rmtree(entry, ignore_errors=True)
            notes.append(f"removed {entry} (a store replaced by process {m['pid']}, which is gone)")
        else:
            notes.append(f"left {entry} alone: a store replaced by process {m['pid']}; "
                         f"{path} is not a complete store to keep instead")
    return notes
