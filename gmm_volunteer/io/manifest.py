"""A manifest of a result store's files with their sizes and CRC-32 checksums, written
last (after ``complete``) and checked when the store is opened: a store whose chunk
folder was deleted or whose bytes changed, or holding a file its manifest does not list
(a manifest emptied to ``files: {}`` included), is refused (exit 2) instead of being
read as fill values, which zarr gives for missing chunks without complaint.

Stores written before the manifest existed have none and open as before. A store that
says it was written after (store format 4 and up, or gmmv 0.6.1 and later, in the
attributes of its ``zarr.json``) and has none lost it: it is refused, since its chunks
can no longer be checked (`MANIFEST_SINCE`).
"""

from __future__ import annotations

import itertools
import json
import zlib
from pathlib import Path

MANIFEST_NAME = "gmmv-manifest.json"
FORMAT = "gmmv-store-manifest"


class CorruptStoreError(RuntimeError):
    """A store's files disagree with its manifest (missing, changed or unreadable)."""


def _crc(path: Path) -> str:
    crc = 0
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def _files(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)


def write_manifest(store: Path) -> None:
    """Record every file of `store` (relative path -> [size, crc32])."""
    store = Path(store)
    files = {p.relative_to(store).as_posix(): [p.stat().st_size, _crc(p)] for p in _files(store)}
    text = json.dumps({"format": FORMAT, "format_version": 1, "files": files}, indent=0, sort_keys=True)
    (store / MANIFEST_NAME).write_text(text + "\n", encoding="utf-8")


# Every store of these store formats, or written by these gmmv versions, has a manifest.
MANIFEST_SINCE = {"store_format": 4, "gmmv_version": (0, 6, 1)}


def _version(text) -> tuple[int, ...]:
    parts = []
    for part in str(text).split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def must_have_manifest(attrs: dict) -> bool:
    """Whether a store with these root attributes was written with a manifest."""
    try:
        fmt = int(attrs.get("store_format", 1))
    except (TypeError, ValueError):
        return True  # a store format that is no number: not a store this program wrote as it is
    return fmt >= MANIFEST_SINCE["store_format"] or _version(attrs.get("gmmv_version", "")) >= MANIFEST_SINCE["gmmv_version"]


def verify_manifest(store: Path, attrs: dict | None = None) -> None:
    """Raise `CorruptStoreError` naming the first file of `store` that is missing or
    differs from the manifest. A store without a manifest passes only when it was
    written before manifests existed (`must_have_manifest` of its root `attrs`)."""
    store = Path(store)
    path = store / MANIFEST_NAME
    if not path.exists():
        if attrs is not None and must_have_manifest(attrs):
            raise CorruptStoreError(
                f"result store {store}: its manifest {MANIFEST_NAME} is missing, which every store of "
                f"store format {MANIFEST_SINCE['store_format']} (gmmv "
                f"{'.'.join(map(str, MANIFEST_SINCE['gmmv_version']))} and later) has; its files cannot be "
                "checked, so it is not read: re-run it")
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["files"]
        if data.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError("not a store manifest")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptStoreError(f"result store {store}: its manifest {MANIFEST_NAME} is unreadable ({exc})") from None
    # The manifest lists every file the writer wrote: one listing fewer (or none) would
    # let a file be changed or removed unseen, so each file of the store must be listed.
    unlisted = [p.relative_to(store).as_posix() for p in _files(store)
                if p.relative_to(store).as_posix() not in files]
    if not files or unlisted:
        what = f"{unlisted[0]} is not listed in it" if unlisted else "it lists no file"
        raise CorruptStoreError(f"result store {store}: its manifest {MANIFEST_NAME} does not describe the "
                                f"store ({what}); the store or its manifest was changed, re-run it")
    for rel, entry in sorted(files.items()):
        p = store / rel
        try:
            size, crc = entry
            if not p.is_file():
                raise CorruptStoreError(f"result store {store}: {rel} is missing; the store is damaged, re-run it")
            if p.stat().st_size != size or _crc(p) != crc:
                raise CorruptStoreError(f"result store {store}: {rel} differs from what was written "
                                        f"(size or checksum); the store is damaged, re-run it")
        except (TypeError, ValueError):
            raise CorruptStoreError(f"result store {store}: its manifest entry for {rel} is malformed") from None
        except OSError as exc:
            raise CorruptStoreError(f"result store {store}: {rel} cannot be read ({exc})") from None
