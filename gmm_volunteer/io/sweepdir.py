"""The layout of a sweep's output folder (docs/experiments.md): the manifest that names
every run, the runs' stores and the combined store. Written by
`gmm_volunteer.experiments.sweep`, read by `gmm_volunteer.experiments.combine`; both
take the names from here, so neither module imports the other's."""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = "sweep.json"
COMBINED = "combined.zarr"
RUNS_DIR = "runs"


def read_manifest(output) -> dict:
    path = Path(output) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{output}: no {MANIFEST} (not a sweep output directory)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable sweep manifest ({exc})") from None
    problem = _manifest_problem(data)
    if problem:
        raise ValueError(f"{path}: not a sweep manifest: {problem}")
    return data


def _manifest_problem(data) -> str | None:
    """What is wrong with the shape of a manifest (what readers index), or None."""
    if not isinstance(data, dict):
        return f"the top level is a {type(data).__name__}, not a mapping"
    dims, seeds, runs = data.get("dims"), data.get("seeds"), data.get("runs")
    if not isinstance(dims, dict) or not all(
            isinstance(d, dict) and isinstance(d.get("key"), str) and isinstance(d.get("values"), list)
            for d in dims.values()):
        return "dims: must map each dimension to {key, values}"
    if not isinstance(seeds, list) or not seeds:
        return "seeds: must be a non-empty list"
    if not isinstance(runs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("path"), str)
            for r in runs):
        return "runs: must be a list of {name, path, ...}"
    return None
