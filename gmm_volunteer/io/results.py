"""The result store: one zarr v3 store per run (docs/formats.md, section 2).

`build_dataset` is the one place that turns a `RunRecord` into an `xarray.Dataset`
(named dims, units, flag attributes, coords). `write_result` writes it atomically:
everything goes to ``<path>.tmp-<pid>``, the ``complete`` attribute is set last, and
only then is the directory renamed into place. A store without ``complete`` is never
opened as a result. Only a store this program wrote (`is_own_store`) is ever replaced;
`check_output_path` refuses unusable output paths before a run starts and
`clean_stale` deals with the leftovers of killed writers.

String coordinates are written as variable-length UTF-8 (the zarr v3 ``string`` data
type); fixed-width unicode has no zarr v3 specification. Metadata is consolidated, and
the datasets follow `gmm_volunteer.io.conventions` (store format 4: request records per
request type); `open_result` reads stores of formats 1-3 too and gives them the look of
format 4 (`conventions.upgrade`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import dask
import numpy as np
import xarray as xr

from gmm_volunteer._version import __version__
from gmm_volunteer.io import conventions
from gmm_volunteer.io.conventions import ACTION_FIELD_UNITS
from gmm_volunteer.io.manifest import CorruptStoreError, verify_manifest, write_manifest
from gmm_volunteer.io.runrecord import RunRecord, real_or_int
# the store's path and leftovers (io.storepath), under the names they had here
from gmm_volunteer.io.storepath import (COMPLETE_ATTR, OutputPathError, check_output_path, clean_stale,  # noqa: F401
                                        is_complete, is_own_store, store_attrs)
from gmm_volunteer.model.constants import EVENTS, NODE_CLASSES, OUTCOMES, RESOURCE_UNITS, RESOURCES
from gmm_volunteer.trajectory import POLICY_KINDS, TRAJECTORY_VERSION, policy_key, policy_trajectory_version


class IncompleteResultError(RuntimeError):
    """A result store exists but was never completed (interrupted or still being written)."""


class DamagedResultError(IncompleteResultError):
    """A complete store whose files disagree with its manifest (`io.manifest`): handled
    wherever an incomplete one is, since neither can be read."""


class ResultFormatError(ValueError):
    """A run record or a store does not have the shape docs/formats.md section 2 demands."""


# -- building the dataset ---------------------------------------------------------------

_REQUEST_FIELDS = {
    "request_user": np.int32,
    "request_type": np.int8,
    "request_start": np.int64,
    "request_end": np.int64,
    "request_outcome": np.int8,
}
_REQUEST_ATTRS = {
    "request_user": {"long_name": "user (1..N) who issued the request", "units": "1"},
    "request_start": {"long_name": "step the request started (seconds since the run start)",
                      "units": "s"},
    "request_end": {"long_name": "last step the request was active", "units": "s"},
    # under execution.latency: substep (docs/model.md D34) the record is a time, not a step
    "request_end_time": {"long_name": "time the request ended (its last result in, if completed)",
                         "units": "s"},
    "request_outcome": {"long_name": "how the request ended", **conventions.flag_attrs(OUTCOMES)},
    "request_latency": {"long_name": "request latency (end - start)", "units": "s"},
}


def _strings(values) -> np.ndarray:
    return np.array([str(v) for v in values], dtype=object)


def _check_shape(name: str, arr: np.ndarray, shape: tuple) -> None:
    if arr.shape != shape:
        raise ResultFormatError(
            f"RunRecord.{name} has shape {arr.shape}, expected {shape}"
        )


def _plain(value):
    """Attribute values must survive JSON: unwrap NumPy scalars and arrays."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def build_dataset(record: RunRecord) -> xr.Dataset:
    """Turn one run's record into the result-store dataset (docs/formats.md, section 2).

    Raises `ResultFormatError` naming the offending field when shapes, codes or
    dtypes are inconsistent.
    """
    steps = record.steps
    n_req = int(np.asarray(record.request_user).shape[0])
    requests = {}
    # Ends and latencies are whole steps (int64), or times inside a step where the run
    # recorded them so (float64: execution.latency: substep, docs/model.md D34).
    real = real_or_int(record.request_end) is np.float64
    for name, dtype in _REQUEST_FIELDS.items():
        arr = np.asarray(getattr(record, name))
        _check_shape(name, arr, (n_req,))
        requests[name] = arr.astype(np.float64 if real and name == "request_end" else dtype, copy=False)
    type_names = tuple(record.request_type_names)
    if not type_names:
        raise ResultFormatError("RunRecord.request_type_names is empty")
    if n_req:
        bad = (requests["request_type"] < 0) | (requests["request_type"] >= len(type_names))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ResultFormatError(
                f"RunRecord.request_type[{i}] = {requests['request_type'][i]} is not an "
                f"index into request_type_names (length {len(type_names)})"
            )
        bad = (requests["request_outcome"] < 0) | (requests["request_outcome"] >= len(OUTCOMES))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ResultFormatError(
                f"RunRecord.request_outcome[{i}] = {requests['request_outcome'][i]} is not "
                f"one of the codes 0..{len(OUTCOMES) - 1} ({', '.join(OUTCOMES)})"
            )
        bad = requests["request_end"] < requests["request_start"]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ResultFormatError(
                f"RunRecord.request_end[{i}] < request_start[{i}] "
                f"({requests['request_end'][i]} < {requests['request_start'][i]})"
            )

    series = {}
    for name, shape, dtype in (
        ("online_users", (steps,), np.int32),
        ("active_requests", (steps,), np.int32),
        ("server_allocation", (steps, len(RESOURCES)), np.float32),
        ("server_consumption", (steps, len(RESOURCES)), np.float32),
        ("user_consumption", (steps, len(RESOURCES)), np.float32),
        ("subtask_events", (steps, len(NODE_CLASSES), len(EVENTS)), np.int32),
        ("completed_work", (steps, len(NODE_CLASSES)), np.float32),
    ):
        arr = np.asarray(getattr(record, name))
        _check_shape(name, arr, shape)
        series[name] = arr.astype(dtype, copy=False)

    latency = (requests["request_end"] - requests["request_start"]).astype(np.float64 if real else np.int64,
                                                                          copy=False)
    # Units differ per resource: the coordinate resource_unit holds them (conventions).
    per_resource_units = {"units_coordinate": "resource_unit"}
    # Request records per request type (conventions: store format 4), with the per-request
    # series a policy records (e.g. request_accuracy) laid out the same way.
    columns = {name: requests[name] for name in _REQUEST_FIELDS if name != "request_type"}
    columns["request_latency"] = latency
    request_attrs = dict(_REQUEST_ATTRS)
    if real:
        request_attrs["request_end"] = request_attrs.pop("request_end_time")
    else:
        del request_attrs["request_end_time"]
    policy_series = dict(record.policy_series)
    for name, (dims, arr, var_attrs) in list(policy_series.items()):
        if tuple(dims) == (conventions.REQUEST,):
            arr = np.asarray(arr)
            _check_shape(f"policy_series[{name!r}]", arr, (n_req,))
            columns[name], request_attrs[name] = arr, dict(var_attrs)
            del policy_series[name]
    counts, grids = conventions.by_type(requests["request_type"], len(type_names), columns)
    data_vars = {
        **conventions.request_vars(counts, grids, request_attrs,
                                   real=("request_end", "request_latency") if real else ()),
        "online_users": (("time",), series["online_users"],
                         {"long_name": "users online after the availability update",
                          "units": "1"}),
        "active_requests": (("time",), series["active_requests"],
                            {"long_name": "users with an active request", "units": "1"}),
        "server_allocation": (("time", "resource"), series["server_allocation"], {
            "long_name": "server allocation a_t", **per_resource_units,
        }),
        "server_consumption": (("time", "resource"), series["server_consumption"], {
            "long_name": "server consumption c_t before the executor acts", **per_resource_units,
        }),
        "user_consumption": (("time", "resource"), series["user_consumption"], {
            "long_name": "consumption c_t summed over user nodes", **per_resource_units,
        }),
        "subtask_events": (("time", "node_class", "event"), series["subtask_events"], {
            "long_name": "subtask events per step", "units": "1",
        }),
        "completed_work": (("time", "node_class"), series["completed_work"], {
            "long_name": "work (CPU-seconds) of the executions that finished in the step",
            "units": "s",
        }),
    }
    _autoscaling_vars(record, data_vars, steps, per_resource_units)
    coords = {
        "time": conventions.time_coord(steps),  # CF time: seconds since the run start
        "resource": ("resource", _strings(RESOURCES)),
        "resource_unit": ("resource", _strings(RESOURCE_UNITS[r] for r in RESOURCES)),
        "node_class": ("node_class", _strings(NODE_CLASSES)),
        "event": ("event", _strings(EVENTS)),
        conventions.TYPE: (conventions.TYPE, _strings(type_names)),
    }
    if "scaling_actions" in data_vars:
        coords["action_field"] = ("action_field", _strings(ACTION_FIELDS))
        coords["action_field_unit"] = ("action_field", _strings(ACTION_FIELD_UNITS))
    # Series a policy records (RunRecord.policy_series, docs/routing.md).
    for name, (dims, arr, var_attrs) in policy_series.items():
        arr = np.asarray(arr)
        if name in data_vars or name in coords:
            raise ResultFormatError(f"RunRecord.policy_series[{name!r}] shadows a core variable")
        if dims and dims[0] == "time" and arr.shape[0] != steps:
            raise ResultFormatError(
                f"RunRecord.policy_series[{name!r}] has {arr.shape[0]} steps, expected {steps}")
        data_vars[name] = (tuple(dims), arr, dict(var_attrs))
    for name, values in dict(record.policy_coords).items():
        dim = name
        if isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], str) \
                and isinstance(values[1], (tuple, list)):
            dim, values = values  # (dim, values): a coordinate along another dimension
        coords[name] = (dim, _strings(values) if isinstance(values[0], str) else np.asarray(values))
    attrs = {str(k): _plain(v) for k, v in dict(record.attrs).items()}
    attrs.setdefault("gmmv_version", __version__)
    # what a committed result table made from this store claims (docs/results/README.md)
    attrs.setdefault("trajectory_version", TRAJECTORY_VERSION)
    # and the versions of the policies it ran (issue 34: some policies have their own)
    attrs.setdefault("policy_trajectory_versions", {
        policy_key(k, str(attrs[k])): policy_trajectory_version(policy_key(k, str(attrs[k])))
        for k in POLICY_KINDS if attrs.get(k)})
    attrs["steps"] = steps
    attrs.pop(COMPLETE_ATTR, None)  # only write_result may declare a store complete
    ds = xr.Dataset(data_vars=data_vars, coords=coords, attrs=attrs)
    return conventions.finish(ds)


def _autoscaling_vars(record: RunRecord, data_vars: dict, steps: int, units: dict) -> None:
    """The dedicated server's capacity series and scaling actions (docs/model.md D17),
    when the record has them (records made before autoscalers existed do not)."""
    cap = getattr(record, "dedicated_capacity", None)
    if cap is not None:
        cap = np.asarray(cap)
        _check_shape("dedicated_capacity", cap, (steps, len(RESOURCES)))
        data_vars["dedicated_capacity"] = (("time", "resource"), cap.astype(np.float32), {
            "long_name": "dedicated server maximum allocation in effect (autoscaler)", **units,
        })
    acts = getattr(record, "scaling_actions", None)
    if acts is not None:
        acts = np.asarray(acts, dtype=np.int64).reshape(-1, len(ACTION_FIELDS))
        data_vars["scaling_actions"] = (("scaling_action", "action_field"), acts, {
            "long_name": "autoscaler actions: step ordered, step effective (-1 cancelled), "
                         "units from, units to",
            "units_coordinate": "action_field_unit",
        })
        cost = getattr(record, "scaling_action_cost", None)
        if cost is not None:
            data_vars["scaling_action_cost"] = (("scaling_action",), np.asarray(cost, np.float64), {
                "long_name": "capacity-hours the action added (negative: removed) until the end "
                             "of the run, in capacity multiplier x hours (of base_profile); "
                             "0 if cancelled",
                "units": "h",
            })


ACTION_FIELDS = ("ordered", "effective", "from_units", "to_units")


# -- atomic writing ---------------------------------------------------------------------

def _encoding(ds: xr.Dataset) -> dict:
    # Series of 100,000 steps: one chunk per variable up to a few MB keeps per-run stores
    # to a handful of files without big reads. A request type's records are one chunk up
    # to ROW_CHUNK requests (the chunks by_type makes), so that a quantile along
    # ``request`` works on the stored chunks as they are (dask cannot take one along a
    # split dimension).
    enc = {}
    for name, var in ds.variables.items():
        if name in ds.indexes:
            continue
        kept = {k: var.encoding[k] for k in ("dtype", "_FillValue") if k in var.encoding}
        if var.dims == (conventions.TYPE, conventions.REQUEST):
            enc[name] = {**kept, "chunks": (1, max(1, min(var.shape[1], conventions.ROW_CHUNK)))}
        elif "time" in var.dims:
            chunk = [max(1, min(var.shape[0], 1 << 17))] + list(var.shape[1:])
            enc[name] = {"chunks": tuple(chunk)}
    return enc


def _write_store(ds: xr.Dataset, target: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        # zarr notes that consolidated metadata is not (yet) part of the zarr v3
        # specification; xarray and zarr-python read it, and it lets a store open with
        # one read instead of one per array (docs/formats.md).
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
        # One chunk of request records at a time, in this process: the records are made
        # lazily from the run's log (conventions.by_type), also inside a sweep's worker.
        # A variable whose entries differ in unit is stored per entry, each part with its
        # CF units (store format 5); open_result joins the parts.
        ds = conventions.split_units(ds)
        with dask.config.set(scheduler="synchronous"):
            ds.to_zarr(str(target), mode="w", zarr_format=3, consolidated=True,
                       encoding=_encoding(ds))


def _mark_complete(target: Path) -> None:
    import warnings

    import zarr

    group = zarr.open_group(str(target), mode="r+")
    group.attrs[COMPLETE_ATTR] = 1  # 1, not true: netCDF has no boolean attributes
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
        zarr.consolidate_metadata(str(target))  # the consolidated copy must say complete too


def write_result(record_or_ds, path, overwrite: bool = False) -> Path:
    """Write one run's result store atomically; return its path.

    The store is built in ``<path>.tmp-<pid>``; ``complete`` is set last and the
    directory is then renamed to `path`. Only a store this program wrote
    (`is_own_store`) is ever replaced: with `overwrite`, an existing one is removed only
    after the new one is fully written; without it, a complete one raises
    `FileExistsError` and is left untouched, while an incomplete one (left by a crash
    before the rename was possible) is replaced. Any other file or directory at `path`
    raises `FileExistsError`, with or without `overwrite`. Leftovers of killed writers
    are dealt with first (`clean_stale`).
    """
    path = Path(path)
    ds = record_or_ds if isinstance(record_or_ds, xr.Dataset) else build_dataset(record_or_ds)
    clean_stale(path)
    if path.is_symlink() or (path.exists() and not is_own_store(path)):
        raise FileExistsError(f"{path} exists and is not a result store written by gmmv; "
                              "refusing to replace it")
    if path.exists() and not overwrite and is_complete(path):
        raise FileExistsError(
            f"result store {path} already exists and is complete; "
            "pass overwrite=True (CLI: --force) to replace it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        _write_store(ds, tmp)
        _mark_complete(tmp)
        write_manifest(tmp)  # last: it covers the complete flag too
    except BaseException:
        # KeyboardInterrupt included: remove our partial output, re-raise. If even the
        # cleanup is interrupted the tmp name still never looks like a result.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f"{path.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        if old is not None and not path.exists():
            os.rename(old, path)  # put the previous store back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


# -- reading ----------------------------------------------------------------------------

def _plain_string_coords(ds: xr.Dataset) -> xr.Dataset:
    # Variable-length strings come back as NumPy's StringDType; object arrays behave
    # like every other xarray string coordinate (concat, sel, plotting).
    updates = {}
    for name, coord in ds.coords.items():
        kind = getattr(coord.dtype, "kind", "")
        if kind in ("T", "U", "S", "O") or str(coord.dtype).startswith("StringDType"):
            updates[name] = (coord.dims, np.asarray(coord.values).astype(object), coord.attrs)
    return ds.assign_coords(updates) if updates else ds


def open_result(path, chunks=None) -> xr.Dataset:
    """Open a complete result store lazily (dask-backed).

    Raises `FileNotFoundError` when nothing is there and `IncompleteResultError` when
    the store was never completed (an interrupted or still-running write).
    """
    path = Path(path)
    if not path.exists():
        tmp = sorted(path.parent.glob(f"{path.name}.tmp-*")) if path.parent.exists() else []
        hint = f" (an unfinished write exists: {tmp[0].name})" if tmp else ""
        raise FileNotFoundError(f"no result store at {path}{hint}")
    if not is_complete(path):
        raise IncompleteResultError(
            f"result store {path} is incomplete: it lacks the '{COMPLETE_ATTR}' attribute, "
            "so its run was interrupted or is still being written; re-run it"
        )
    try:
        verify_manifest(path, store_attrs(path) or {})
    except CorruptStoreError as exc:
        raise DamagedResultError(str(exc)) from None
    # Default: dask chunks = the stored zarr chunks ("auto" cannot size string coords).
    ds = xr.open_zarr(str(path), consolidated=_is_consolidated(path),
                      chunks={} if chunks is None else chunks)
    for var in ds.data_vars.values():
        if var.dims == (conventions.TYPE, conventions.REQUEST) and "dtype" in var.encoding:
            # zarr says little-endian explicitly; netCDF wants the native order when the
            # padded (float) records are cast back to their integer type
            var.encoding["dtype"] = np.dtype(var.encoding["dtype"]).newbyteorder("=")
    ds = conventions.join_units(conventions.typed_flags(_plain_string_coords(ds)))
    if conventions.store_format(ds) < conventions.STORE_FORMAT:
        return conventions.upgrade(ds)  # a store of an older format, converted in memory
    return ds


def _is_consolidated(path: Path) -> bool:
    """Whether the store has consolidated metadata (stores of format 1 have none)."""
    try:
        meta = json.loads((path / "zarr.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("consolidated_metadata"), dict)
