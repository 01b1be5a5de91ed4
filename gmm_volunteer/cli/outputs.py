"""Checks of an output path made before any work (simulating, searching, fitting,
rendering), so that a command does not spend minutes and then fail to write.

`check_output_target` refuses, with a `CommandError` (exit 2) naming the option: an
empty path, a path component longer than the file system allows (255 bytes), the file
system root or the current directory as a target, and a place this process cannot create
files in (probed with a temporary file of its own in the nearest existing directory, which
it removes at once; nothing else is created or removed).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

NAME_MAX = 255  # bytes of one path component on Linux, macOS and Windows file systems


def path_problem(path: str | os.PathLike) -> str | None:
    """Why `path` cannot name an output (without touching the file system beyond
    resolving it), or None."""
    text = os.fspath(path)
    if not str(text).strip():
        return "an empty path"
    if "\0" in str(text):
        return "the output path contains a NUL byte"
    p = Path(text)
    for part in p.parts:
        n = len(os.fsencode(part))
        if n > NAME_MAX:
            return f"a path component of {n} bytes ({part[:40]}...); the file system allows {NAME_MAX}"
    try:
        resolved = p.resolve()
        here = Path.cwd().resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        return f"cannot be resolved ({exc})"
    if resolved == Path(resolved.anchor):
        return "the file system root"
    if resolved == here or p.name in ("", ".", ".."):
        return "the current directory (or its parent); name a file or directory inside it"
    return None


def check_output_target(path: str | os.PathLike, option: str = "-o") -> Path:
    """`path` as a Path if an output can be written there; `CommandError` otherwise."""
    from gmm_volunteer.cli.errors import CommandError

    problem = path_problem(path)
    if problem:
        raise CommandError(f"{option} {os.fspath(path)}: {problem}")
    p = Path(path)
    folder = p.resolve().parent
    while not folder.exists():  # the nearest folder that exists: the rest is created later
        folder = folder.parent
    if not folder.is_dir():
        raise CommandError(f"{option} {p}: {folder} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gmmv-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CommandError(f"{option} {p}: cannot write in {folder} ({exc.strerror or exc})") from None
    return p


def check_result_target(path: str | os.PathLike, option: str = "-o") -> Path:
    """`check_output_target` for a committed result file (docs/results/README.md): an
    existing file there is replaced only if it is a result file."""
    from gmm_volunteer.cli.errors import CommandError
    from gmm_volunteer.io import resultfile

    out = check_output_target(path, option)
    if out.exists():
        try:
            resultfile.read(out)
        except resultfile.ResultFileError:
            raise CommandError(f"{option} {os.fspath(path)}: exists and is not a result file; "
                               "refusing to replace it") from None
    return out
