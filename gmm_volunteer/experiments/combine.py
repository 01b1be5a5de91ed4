"""Combined results of a sweep: one dataset over the grid's dimensions.

Each run's store is reduced to its statistics (`summary.run_metrics`: request outcomes,
latency quantiles, server consumption, subtask completion) and the reductions are
stacked along the grid dimensions (``users``, ``user_capacity``, ``server_capacity``,
``scheduler``, ..., ``seed``). `combine` builds this lazily: every run is a dask task
that opens its store only when the values are computed. `write_combined` stores the
result as ``<output>/combined.zarr`` (atomically, like a run store).

Numbers are float64 so that a missing or failed run is NaN; ``run_complete`` says
which runs were present.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import xarray as xr

from gmm_volunteer.io import conventions
from gmm_volunteer.io.results import is_complete, open_result, write_result
from gmm_volunteer.experiments.summary import run_metrics
from gmm_volunteer.io.sweepdir import COMBINED, MANIFEST, read_manifest

COMBINED_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)


def _metrics_values(path: str, quantiles, type_names: list[str]) -> dict:
    ds = open_result(path)
    names = [str(v) for v in ds[conventions.TYPE].values]
    if names != type_names:
        raise ValueError(
            f"{path}: request types {names} differ from the sweep's {type_names}; "
            "runs of one sweep must share the model bundle's request types"
        )
    m = run_metrics(ds, quantiles)
    out = {name: np.asarray(var.values, dtype=np.float64) for name, var in m.data_vars.items()}
    out["wall_time_s"] = np.float64(ds.attrs.get("wall_time_s", np.nan))
    return out


def _template(path: Path, quantiles) -> tuple[xr.Dataset, dict]:
    ds = open_result(path)
    small = ds.isel(request=slice(0, 0), time=slice(0, 1))
    small[conventions.COUNT] = xr.zeros_like(small[conventions.COUNT])  # no request left
    return run_metrics(small, quantiles), dict(ds.attrs)


SERIES = ("online_users", "active_requests", "server_allocation", "server_consumption",
          "user_consumption", "subtask_events", "completed_work")


def _series(paths, complete, shape, dims, names) -> dict:
    """Per-step series of every run, stacked lazily straight from the run stores."""
    import dask.array as da

    opened = [open_result(p) if ok else None for p, ok in zip(paths, complete)]
    template = next(ds for ds in opened if ds is not None)
    out = {}
    for name in names:
        if name not in SERIES:
            from gmm_volunteer.model.suggest import did_you_mean

            raise ValueError(f"unknown series {name!r}{did_you_mean(name, SERIES)} (known: {', '.join(SERIES)})")
        var = template[name]
        blocks = []
        for p, ds in zip(paths, opened):
            if ds is None:
                blocks.append(da.full(var.shape, np.nan, dtype=np.float64))
                continue
            if ds[name].shape != var.shape:
                raise ValueError(f"{p}: {name} has shape {ds[name].shape}, other runs {var.shape} "
                                 "(runs of different lengths cannot share a time axis)")
            blocks.append(ds[name].data.astype(np.float64))
        stacked = da.stack(blocks).reshape(shape + var.shape)
        out[name] = (tuple(dims) + var.dims, stacked, dict(var.attrs))
    return out, template


def _policy_versions(paths, complete) -> dict:
    """The policies the complete runs ran, with their trajectory versions (read from each
    store's attributes; gmm_volunteer.trajectory)."""
    import zarr

    from gmm_volunteer.trajectory import merge_policy_versions, run_policy_versions

    return merge_policy_versions(run_policy_versions(dict(zarr.open_group(str(p), mode="r").attrs))
                                 for p, ok in zip(paths, complete) if ok)


def combine(output, quantiles=COMBINED_QUANTILES, series=()) -> xr.Dataset:
    """Lazily combine the run stores of a sweep output directory (its ``sweep.json``).

    `series` names per-step variables of the run stores (e.g. ``"server_consumption"``)
    to include over the grid dims plus ``time``; they stay dask arrays reading the run
    stores, so only what is used is read (they are not written by `write_combined`).
    """
    import dask
    import dask.array as da

    output = Path(output)
    manifest = read_manifest(output)
    dims = list(manifest["dims"]) + ["seed"]
    coords = {name: d["values"] for name, d in manifest["dims"].items()}
    coords["seed"] = manifest["seeds"]
    shape = tuple(len(coords[d]) for d in dims)
    runs = manifest["runs"]
    if len(runs) != int(np.prod(shape)):
        raise ValueError(f"{output}: sweep.json lists {len(runs)} runs for a grid of shape {shape}")
    paths = [output / r["path"] for r in runs]
    complete = np.array([is_complete(p) for p in paths])
    if not complete.any():
        raise FileNotFoundError(f"{output}: no complete run store to combine yet")
    first = paths[int(np.flatnonzero(complete)[0])]
    template, first_attrs = _template(first, quantiles)
    type_names = [str(v) for v in template["request_type"].values]

    delayed = [
        dask.delayed(_metrics_values, pure=True)(str(p), tuple(quantiles), type_names) if ok else None
        for p, ok in zip(paths, complete)
    ]
    data_vars = {}
    for name, var in [*template.data_vars.items(), ("wall_time_s", None)]:
        vshape = var.shape if var is not None else ()
        vdims = var.dims if var is not None else ()
        blocks = [
            da.from_delayed(d[name], shape=vshape, dtype=np.float64) if d is not None
            else da.full(vshape, np.nan, dtype=np.float64)
            for d in delayed
        ]
        stacked = da.stack(blocks).reshape(shape + vshape)
        attrs = dict(var.attrs) if var is not None else {"long_name": "run wall time", "units": "s"}
        data_vars[name] = (tuple(dims) + tuple(vdims), stacked, attrs)
    data_vars["run_complete"] = (tuple(dims), complete.reshape(shape),
                                 {"long_name": "the run's store was complete when combined"})
    data_vars["run_name"] = (tuple(dims), np.array([r["name"] for r in runs], dtype=object).reshape(shape),
                             {"long_name": "name of the run (its store under runs/)"})

    all_coords = {d: (d, np.array(coords[d], dtype=object if any(isinstance(v, str) for v in coords[d]) else None))
                  for d in dims}
    for cname, c in template.coords.items():
        all_coords[cname] = (c.dims, c.values)
    if series:
        series_vars, run_template = _series(paths, complete, shape, dims, series)
        data_vars.update(series_vars)
        all_coords["time"] = run_template["time"].variable  # with its CF encoding
    attrs = {
        "sweep_grid_file": manifest.get("grid_file", ""),
        "sweep_base_config": manifest.get("base", ""),
        "sweep_description": manifest.get("description", ""),
        "sweep_dim_keys": {name: d["key"] for name, d in manifest["dims"].items()},
        "runs_total": len(runs),
        "runs_complete": int(complete.sum()),
        "latency_quantile_method": "numpy linear, completed requests only",
        "model_provisional": bool(first_attrs.get("model_provisional", False)),
        "model_bundle": first_attrs.get("model_bundle", ""),
        "model_sha256": first_attrs.get("model_sha256", ""),
        "gmmv_version": first_attrs.get("gmmv_version", ""),
        "trajectory_version": first_attrs.get("trajectory_version", ""),
        "policy_trajectory_versions": _policy_versions(paths, complete),
        "steps": first_attrs.get("steps", 0),
    }
    # A grid dimension is named after the config key it sets (sweep_dim_keys).
    long_names = {name: f"config key {d['key']}" for name, d in manifest["dims"].items()}
    return conventions.finish(xr.Dataset(data_vars, coords=all_coords, attrs=attrs), long_names)


def write_combined(output, path=None, quantiles=COMBINED_QUANTILES, progress: bool = False) -> Path:
    """Compute the combined dataset and store it (default ``<output>/combined.zarr``).
    With `progress`, a bar on stderr counts the run stores read (``combining: k/N run``),
    as the sweep's bar counts the runs simulated: reading a large sweep takes minutes."""
    output = Path(output)
    ds = combine(output, quantiles)
    # One chunk per variable: the combined statistics are small, per-run chunks are not.
    ds = ds.assign({name: var.chunk(-1) for name, var in ds.data_vars.items()
                    if var.chunks is not None})
    with _runs_read_bar(int(ds.attrs["runs_complete"]), progress):
        return write_result(ds, Path(path) if path is not None else output / COMBINED, overwrite=True)


@contextlib.contextmanager
def _runs_read_bar(total: int, show: bool):
    """A bar advanced as dask finishes each run's reduction (`_metrics_values`, one task
    per run store), counted by a callback of dask's local schedulers."""
    from dask.callbacks import Callback
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="combining", unit="run", disable=not show, mininterval=0.5)
    done: set = set()
    prefix = _metrics_values.__name__ + "-"

    class RunsRead(Callback):
        def _posttask(self, key, result, dsk, state, worker_id):
            name = key[0] if isinstance(key, tuple) else key
            if str(name).startswith(prefix) and key not in done:
                done.add(key)
                bar.update(1)

    try:
        with RunsRead():
            yield
    finally:
        bar.close()


def open_combined(path) -> xr.Dataset:
    """Open a combined store, or the one inside a sweep output directory."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        path = path / COMBINED
    return open_result(path)
