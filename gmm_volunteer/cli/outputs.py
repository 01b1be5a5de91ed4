"""Checks of an output path made before any work (simulating, searching, fitting,
rendering), so that a command does not spend minutes and then fail to write.

`check_output_target` refuses, with a `CommandError` (exit 2) naming the option: an
empty path, a path component longer than the file system allows (255 bytes), the file
system root or the current directory as a target, and a place this process cannot create
files in (probed with a temporary file of its own in the nearest existing directory, which
it removes at once; nothing else is created or removed). `check_file_target` adds the
rules of an output file: not an input, not through a link, not a file gmmv did not write.
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


def check_file_target(path: str | os.PathLike, option: str = "-o", inputs=(), ours=None, what: str = "file",
                      force: bool | None = None) -> Path:
    """`check_output_target` for an output file, with what every command's output file
    is held to (the rules of `gmmv run -o`, io.storepath.check_output_path): never one of
    the command's `inputs` (paths it reads; nor a file inside an input folder), never
    through a symbolic link (which may point out of the target), never a directory or
    another kind of file, and an existing file replaced only when `ours(path)` says this
    program wrote it (a `what`), or with `force` (None: the command has no --force)."""
    from gmm_volunteer.cli.errors import CommandError

    out = check_output_target(path, option)
    text = f"{option} {os.fspath(path)}"
    if out.is_symlink():
        raise CommandError(f"{text}: is a symbolic link; refusing to write through it")
    resolved = out.resolve()
    for source in inputs:
        try:
            src = Path(source).resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if resolved == src or src in resolved.parents:
            raise CommandError(f"{text}: is {'' if resolved == src else 'inside '}one of the command's inputs "
                               f"({os.fspath(source)}); refusing to write over what it reads")
    if out.exists() or out.is_symlink():
        if not out.is_file():
            raise CommandError(f"{text}: exists and is not a file; refusing to replace it")
        if not force and ours is not None and not ours(out):
            raise CommandError(f"{text}: exists and is not a {what} gmmv wrote; refusing to replace it"
                               + (" (--force replaces it)" if force is not None else ""))
    return out


def is_result_file(path) -> bool:
    """Whether `path` reads as a committed result file (docs/results/README.md)."""
    from gmm_volunteer.io import resultfile

    try:
        resultfile.read(path)
    except (resultfile.ResultFileError, OSError, UnicodeError, ValueError):
        return False
    return True


def check_result_target(path: str | os.PathLike, option: str = "-o", inputs=()) -> Path:
    """`check_file_target` for a committed result file (docs/results/README.md): an
    existing file there is replaced only if it is a result file."""
    return check_file_target(path, option, inputs, ours=is_result_file, what="result file")


FIGURE_MAGIC = {".png": (b"\x89PNG",), ".pdf": (b"%PDF",), ".svg": (b"<?xml", b"<svg"), ".eps": (b"%!PS",),
                ".ps": (b"%!PS",)}


def is_figure_file(path) -> bool:
    """Whether `path` is a figure file of the format its suffix names (one gmmv could
    have written with matplotlib), so that a figure output replaces only a figure."""
    magic = FIGURE_MAGIC.get(Path(path).suffix.lower() or ".png")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return magic is not None and head.startswith(magic)
