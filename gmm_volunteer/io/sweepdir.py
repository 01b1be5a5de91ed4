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
    return json.loads(path.read_text(encoding="utf-8"))
