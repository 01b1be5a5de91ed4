"""Policies named ``module:Class`` that live beside their config (docs/policies.md).

A config's `scheduler`, `executor` or `autoscaler` may name a class in a module of the
config's own folder (``scheduler: least_loaded:LeastLoaded`` next to
``least_loaded.py``). Such a module is found without PYTHONPATH: when the module is not
importable from the import path, the config's folder is searched, and if it holds the
module the folder is added to `sys.path` and to PYTHONPATH, so that the worker processes
of a sweep or of the capacity search started later import it by the same name. A module
found nowhere is an error naming PYTHONPATH and the folder searched.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

KINDS = ("scheduler", "executor", "autoscaler")


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _in_folder(folder: Path, module: str) -> bool:
    rel = Path(*module.split("."))
    return (folder / rel.with_suffix(".py")).is_file() or (folder / rel / "__init__.py").is_file()


def add_to_path(folder: Path) -> None:
    """Make `folder`'s modules importable here and in processes started from here."""
    text = str(folder)
    if text not in sys.path:
        sys.path.append(text)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if text not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts + [text])


def unresolved(data: dict, folder: Path | None) -> list[tuple[str, str, str]]:
    """Make the ``module:Class`` policies of a config mapping importable, searching
    `folder` (the config's); return (kind, name, why) for each module found nowhere."""
    missing = []
    for kind in KINDS:
        name = data.get(kind)
        if not isinstance(name, str) or ":" not in name:
            continue
        module = name.partition(":")[0].strip()
        if not module or _findable(module):
            continue
        if folder is not None and _in_folder(folder, module):
            add_to_path(folder)
            importlib.invalidate_caches()
            if _findable(module):
                continue
        path = os.environ.get("PYTHONPATH") or "unset"
        where = f"nor in the config's folder {folder}" if folder is not None else "(no config folder to search)"
        missing.append((kind, name, f"no module {module!r} on the import path (PYTHONPATH: {path}) {where}"))
    return missing
