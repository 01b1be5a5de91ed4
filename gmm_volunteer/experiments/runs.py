"""Many run stores opened as one dataset (docs/formats.md, "Opening many runs").

`open_runs(paths)` stacks the result stores of several runs along a new dimension
``run`` (its coordinate is the store paths) and labels each run with the settings that
tell runs apart (scheduler, users, capacities, seed, ...), so that

    ds = open_runs(sorted(Path("out/runs").glob("*.zarr")))
    ds.server_consumption.sel(resource="cpu").mean("time").groupby("scheduler").mean()
    ds.request_latency.where(ds.request_outcome == 0).quantile(0.99, "request")

works lazily (the series stay dask arrays reading the stores); the last line is the P99
latency of completed requests per run and request type. Runs have different numbers of
requests (and of scaling actions, routing decisions): those dimensions are padded to the
longest run, with NaN (integer variables become float); ``request_count`` (run,
request_type) says how many requests each run has of each type. Request types are aligned
by name (a type a run's bundle lacks has count NaN), runs of different lengths on
``time``. A sweep's statistics over its grid are in its combined store instead
(`gmm_volunteer.experiments.combine.open_combined`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

__all__ = ["open_runs", "RUN_COORDS"]

# Run attributes that become coordinates along `run` (when every run has them).
RUN_COORDS = ("scheduler", "executor", "autoscaler", "users", "user_capacity", "server_capacity",
              "steps")


def _pad(ds: xr.Dataset, sizes: dict) -> xr.Dataset:
    pads = {d: (0, n - ds.sizes.get(d, 0)) for d, n in sizes.items() if ds.sizes.get(d, 0) < n}
    return ds.pad(pads) if pads else ds


def open_runs(paths, dim: str = "run") -> xr.Dataset:
    """Open the run stores at `paths` (`results.open_result` each) as one dataset along
    `dim`; see the module docstring. Raises `FileNotFoundError` /
    `results.IncompleteResultError` for a path that is not a complete store."""
    from gmm_volunteer.io.results import open_result
    from gmm_volunteer.experiments.summary import run_seed

    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("open_runs: no store paths given")
    opened = [open_result(p) for p in paths]
    # Dimensions without an index (requests, actions, decisions) cannot be aligned by
    # label: pad each run to the longest.
    ragged = {d for ds in opened for d in ds.dims if d not in ds.indexes}
    sizes = {d: max(ds.sizes.get(d, 0) for ds in opened) for d in ragged}
    stacked = xr.concat([_pad(ds, sizes) for ds in opened],
                        dim=pd.Index([str(p) for p in paths], name=dim),
                        data_vars="all", coords="different", compat="equals", join="outer",
                        combine_attrs="drop_conflicts")
    coords = {}
    for key in RUN_COORDS:
        values = [ds.attrs.get(key) for ds in opened]
        if all(v is not None for v in values):
            coords[key] = (dim, np.asarray(values, dtype=object if isinstance(values[0], str) else None))
    seeds = [run_seed(ds.attrs) for ds in opened]
    if all(s is not None for s in seeds):
        # seeds go up to 2**128: integers when they fit int64, else their decimal text
        fits = all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds)
        coords["seed"] = (dim, np.asarray(seeds if fits else [str(s) for s in seeds],
                                          dtype=np.int64 if fits else object))
    # The stores' encodings (int32 on disk) no longer fit padded float values.
    stacked = stacked.assign_coords(coords).drop_encoding()
    from gmm_volunteer.io.conventions import LONG_NAMES

    for name in (dim, *coords):
        stacked[name].attrs.setdefault("long_name", LONG_NAMES.get(name, name.replace("_", " ")))
    return stacked
