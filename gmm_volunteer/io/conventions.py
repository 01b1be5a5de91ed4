"""Conventions every stored dataset follows (docs/formats.md, "Conventions").

The run stores (`results.build_dataset`), the per-run statistics (`summary.run_metrics`)
and a sweep's combined store (`combine`) pass through `finish` before they are written,
so that each of them follows the CF conventions (CF 1.11) where CF has a form for the
thing, with one documented exception:

* every variable and coordinate has a ``long_name``;
* every numeric variable has a CF ``units`` attribute that UDUNITS-2 parses (``s``,
  ``1``, ``byte``, ``h``, ``min``). In memory, a variable along a dimension whose entries
  have different units (``resource``: Mbit/s, %, MB; ``action_field``;
  ``decision_field``) has none: CF gives a variable one unit, so its ``units_coordinate``
  attribute names the coordinate along that dimension that holds each entry's unit
  (``resource_unit``, ``capacity_hours_unit``, ``action_field_unit``,
  ``decision_field_unit``); selecting one entry keeps that coordinate as a scalar, so the
  unit stays with the numbers (`units_of` in `experiments.analysis` reads either form).
  On disk (store format 5) such a variable is split per entry (`split_units`):
  ``server_consumption`` is stored as ``server_consumption_band_in`` (Mbit/s) ...
  ``server_consumption_storage`` (MB), each with its own CF ``units`` and ``long_name``,
  so a plain ``xr.open_zarr`` and any CF tool (cf-xarray, pint-xarray, UDUNITS) see a
  unit on every number; `results.open_result` (and the ``ds.gmmv`` accessor) join them
  back (`join_units`). Variables of codes (CF ``flag_values`` / ``flag_meanings``, the
  values of the variable's own type) and of text need no unit;
* time is a CF time coordinate: ``time`` is stored as integer seconds since the run
  start with ``units: "seconds since 1970-01-01"`` (a nominal start: the model has no
  calendar), ``standard_name: time`` and ``axis: T``, and opens as datetime64 values
  (`time_coord`, `steps_of`);
* carries the global attribute ``Conventions: CF-1.11``;
* carries attributes that netCDF accepts as well as zarr: numbers, text and flat lists;
  a boolean is written as 0 or 1, a mapping as JSON text, None is left out;
* says its layout version in ``store_format`` (`STORE_FORMAT`).

A run store lays its request records out per request type (store format 4): CF's
incomplete multidimensional array (CF 1.11 section 9.3.2), dims ``(request_type,
request)``, where ``request_type`` is the index coordinate of the model bundle's task types
(in code order; the same dimension as the per-type statistics), ``request`` counts a type's
requests in the order the run logged them, ``request_count`` (request_type) says how many
each type has, and the rest of a row is padding, stored as ``_FillValue`` -1 and read as
NaN. So a plain ``xr.open_zarr(store).request_latency.quantile(0.99, "request")`` is the
P99 per request type, and `flat_requests` gives one run's records as flat arrays. Stores
of older formats get the look of the current one when opened (`upgrade`).
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where used: a run's preflight reads ROW_CHUNK before any store exists
    import xarray as xr

from gmm_volunteer.model.constants import DECISION_FIELD_UNITS

ACTION_FIELD_UNITS = ("s", "s", "1", "1")  # scaling actions' fields: steps are 1 s; units of dedicated capacity

__all__ = ["STORE_FORMAT", "FORMAT_ATTR", "TYPE", "REQUEST", "COUNT", "REQUEST_DTYPES", "record_dtype", "finish",
           "netcdf_attrs", "flag_attrs", "by_type", "has_requests", "flat_requests", "upgrade", "store_format",
           "time_coord", "steps_of", "typed_flags", "TIME_ATTRS", "TIME_UNITS", "CF_VERSION",
           "split_units", "join_units"]

# 1: 0.3.0 and before. 2: consolidated metadata, request_type_label, units_coordinate
#    instead of one comma-joined units string, netCDF-safe attributes, long_name everywhere.
# 3: CF time (seconds since a nominal start, standard_name time, axis T), the index coordinate
#    request_type (was request_type_name on request_type_dim), per-request codes in
#    request_type_code (was request_type), units that UDUNITS-2 parses (byte, not B; s,
#    not "CPU s"), flag_values of the coded variable's type, attribute Conventions.
# 4: request records per request type, dims (request_type, request) with _FillValue -1 and
#    request_count (was: dim request alone, with request_type_code and request_type_label).
# 5: a variable whose entries differ in unit is stored split per entry, each part with its
#    CF units (`split_units`; was: one variable with a units_coordinate attribute).
STORE_FORMAT = 5
FORMAT_ATTR = "store_format"
CF_VERSION = "CF-1.11"  # global attribute Conventions (CF 1.11 section 2.6.1)
TYPE = "request_type"
REQUEST = "request"
COUNT = "request_count"
REQUEST_FILL = -1  # _FillValue of the padding (no request has a negative user, step or code)
ROW_CHUNK = 1 << 24  # requests of a type per chunk (stored, and made at a time: `by_type`)
SMALL_GRID = 1 << 18  # padded request records (types x width) `by_type` makes at once, in memory
# The request records and their integer type on disk; in memory the padded arrays are
# floats with NaN padding, as xarray decodes them (int8 -> float32, wider -> float64).
REQUEST_DTYPES = {"request_user": np.int32, "request_start": np.int64, "request_end": np.int64,
                  "request_outcome": np.int8, "request_latency": np.int64}
# Formats 2 and 3: the per-request code and label variables (`upgrade` reads them).
LABEL = "request_type_label"
CODE = "request_type_code"
UNITS_COORDINATE = "units_coordinate"

# The time coordinate (CF 1.11 section 4.4): seconds since the run start, one step per
# second. The model has no calendar, so the run starts at a nominal epoch: CF needs a
# reference time in the units, and with this one xarray decodes `time` to datetime64
# values whose differences are the model's seconds. cf-xarray finds the T axis by
# standard_name and axis.
TIME_EPOCH = "1970-01-01"  # midnight; xarray writes the date alone
TIME_UNITS = f"seconds since {TIME_EPOCH}"
TIME_ATTRS = {"standard_name": "time", "axis": "T",
              "long_name": f"time since the run start (nominal start {TIME_EPOCH})"}

# Units of stores before format 3 that UDUNITS-2 reads otherwise ("B" is the bel there)
# or not at all; `upgrade` replaces them.
OLD_UNITS = {"B": "byte", "CPU s": "s"}
# ... and the one text a router's decision log carried for its fields' units.
OLD_DECISION_UNITS = "s (step: step index; node, tier: codes)"

# long_name of the coordinates (and of grid dimensions a sweep commonly has).
LONG_NAMES = {
    "time": TIME_ATTRS["long_name"],
    "resource": "resource",
    "resource_unit": "unit of the resource's values",
    "capacity_hours_unit": "unit of the resource's capacity-hours",
    "node_class": "node class",
    "event": "subtask event",
    TYPE: "request type (task type of the model bundle)",
    COUNT: "requests of the type (the rest of dim request is padding)",
    "action_field": "field of a scaling action",
    "action_field_unit": "unit of the scaling-action field",
    "decision_field_unit": "unit of the routing-decision field",
    "outcome": "how the request ended",
    "quantile": "quantile level",
    "monitor_op": "monitoring operation",
    "decision_field": "field of a routing decision",
    "herding_field": "field of the herding diagnostic",
    "tier": "tier of a routing decision",
    "estimator": "delay estimate",
    "error_stat": "statistic of the estimator error",
    "seed": "seed of the run",
    "users": "number of users (users.count)",
    "user_capacity": "user capacity multiplier (users.capacity)",
    "server_capacity": "server capacity multiplier (server.capacity)",
    "scheduler": "scheduler",
    "executor": "executor",
    "autoscaler": "autoscaler",
    "run": "run store",
}


def netcdf_attr(value: Any) -> Any:
    """`value` as an attribute netCDF (and zarr) accepts, or None to leave it out."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, (list, tuple)):
        items = [netcdf_attr(v) for v in value]
        kinds = {type(v) for v in items}
        # netCDF holds a flat list of numbers or of strings; anything else becomes JSON.
        if items and (kinds <= {int, float} or kinds == {str}) and None not in items:
            return items
        return json.dumps(list(value), default=str)
    if isinstance(value, (int, float, str)):
        return value
    return str(value)


def netcdf_attrs(attrs: dict) -> dict:
    out = {}
    for k, v in attrs.items():
        v = netcdf_attr(v)
        if v is not None:
            out[str(k)] = v
    return out


def _long_name(name: str) -> str:
    return LONG_NAMES.get(name, name.replace("_", " "))


def _is_numeric(var: xr.Variable) -> bool:
    return var.dtype.kind in "iuf"


def finish(ds: xr.Dataset, long_names: dict | None = None) -> xr.Dataset:
    """`ds` with the conventions of the module docstring applied (a shallow copy).

    `long_names` adds long names for coordinates this module does not know (e.g. a
    sweep's grid dimensions, named after their config keys).
    """
    names = {**LONG_NAMES, **(long_names or {})}
    ds = ds.copy()
    for name in list(ds.variables):
        var = ds.variables[name]
        attrs = netcdf_attrs(dict(var.attrs))
        attrs.setdefault("long_name", names.get(str(name), _long_name(str(name))))
        if name in ds.data_vars and "resource" in var.dims and _is_numeric(var):
            unit_coord = attrs.get(UNITS_COORDINATE, "resource_unit")
            if unit_coord in ds.coords:
                attrs.pop("units", None)  # a per-resource unit: the coordinate holds it
                attrs[UNITS_COORDINATE] = unit_coord
        var.attrs = attrs
    ds = typed_flags(ds)
    ds.attrs = netcdf_attrs(dict(ds.attrs))
    ds.attrs.setdefault("Conventions", CF_VERSION)
    ds.attrs[FORMAT_ATTR] = STORE_FORMAT
    return ds


# The attributes a part of a split variable carries (format 5), from which `join_units`
# puts the variable back: its name, the dimension it was split along and its position
# among the variable's dims, the coordinate of the units and the part's entry.
SPLIT_ATTRS = ("split_of", "split_along", "split_axis", "split_units_coordinate", "split_entry")


# How UDUNITS-2 spells the units the model shows (its unit coordinates, reports): "MB"
# (10^6 bytes) is no unit there, "Mbyte" is.
CF_SPELLING = {"MB": "Mbyte"}


def cf_unit(unit: str) -> str:
    """`unit` (a unit coordinate's entry) as a CF ``units`` text UDUNITS-2 parses."""
    return " ".join(CF_SPELLING.get(word, word) for word in str(unit).split(" "))


def _part_name(name: str, entry: str) -> str:
    return f"{name}_" + "".join(c if c.isalnum() or c == "_" else "_" for c in entry)


def split_units(ds: xr.Dataset) -> xr.Dataset:
    """`ds` with every data variable that has a ``units_coordinate`` split along that
    coordinate's dimension into one variable per entry, named ``<variable>_<entry>``,
    with the entry's CF ``units`` (`cf_unit`), a ``long_name`` that names the entry, and the
    `SPLIT_ATTRS` that `join_units` reads (store format 5; CF 1.11 section 3.1 gives a
    variable one unit). The coordinates stay (``resource``, ``resource_unit``, ...)."""
    parts, split = {}, []
    for name, var in ds.variables.items():  # a router's `decision` is a coordinate (dim decision)
        if name in ds.indexes:
            continue
        coord = var.attrs.get(UNITS_COORDINATE)
        if coord is None or coord not in ds.coords or ds[coord].ndim != 1:
            continue
        dim = ds[coord].dims[0]
        if dim not in var.dims:
            continue
        entries = [str(e) for e in np.asarray(ds[dim].values)] if dim in ds.coords \
            else [str(i) for i in range(ds.sizes[dim])]
        units = [str(u) for u in np.asarray(ds[coord].values)]
        base = {k: v for k, v in var.attrs.items() if k != UNITS_COORDINATE}
        long_name = str(base.pop("long_name", name))
        for i, (entry, unit) in enumerate(zip(entries, units)):
            part_name = _part_name(str(name), entry)
            if part_name in ds.variables or part_name in parts:
                raise ValueError(f"cannot store {name!r} per {dim}: {part_name!r} exists already")
            part = var.isel({dim: i}).copy(deep=False)
            part.attrs = {**base, "long_name": f"{long_name}: {entry}", "units": cf_unit(unit),
                          "split_of": str(name), "split_along": dim, "split_axis": var.dims.index(dim),
                          "split_units_coordinate": coord, "split_entry": entry}
            part.encoding = {k: v for k, v in var.encoding.items() if k in ("dtype", "_FillValue")}
            parts[part_name] = part
        split.append(name)
    if not split:
        return ds
    out = ds.drop_vars(split).assign(parts)
    out.attrs = dict(ds.attrs)
    return out


def join_units(ds: xr.Dataset) -> xr.Dataset:
    """The inverse of `split_units`: the parts of each split variable (found by their
    `SPLIT_ATTRS`) stacked back into the variable, in the order of its dimension's
    coordinate, with its ``units_coordinate``. Variables whose parts are not all there
    (a selection of a few of them) are left as they are; a dataset with no parts is
    returned as it is."""
    import xarray as xr

    groups: dict[str, list[str]] = {}
    for name, var in ds.data_vars.items():
        if "split_of" in var.attrs:
            groups.setdefault(str(var.attrs["split_of"]), []).append(str(name))
    if not groups:
        return ds
    joined, drop = {}, []
    for name, members in groups.items():
        first = ds[members[0]].attrs
        dim, coord = str(first["split_along"]), str(first["split_units_coordinate"])
        by_entry = {str(ds[m].attrs["split_entry"]): m for m in members}
        order = [str(e) for e in np.asarray(ds[dim].values)] if dim in ds.coords else None
        if order is None or sorted(order) != sorted(by_entry) or name in ds.variables:
            continue
        variables = [ds[by_entry[e]].variable for e in order]
        stacked = xr.Variable.concat(variables, dim)
        dims = list(variables[0].dims)
        dims.insert(int(first["split_axis"]), dim)
        stacked = stacked.transpose(*dims)
        attrs = {k: v for k, v in first.items() if k not in SPLIT_ATTRS and k != "units"}
        suffix = f": {first['split_entry']}"
        long_name = str(attrs.get("long_name", name))
        attrs["long_name"] = long_name[:-len(suffix)] if long_name.endswith(suffix) else long_name
        attrs[UNITS_COORDINATE] = coord
        stacked.attrs = attrs
        stacked.encoding = {k: v for k, v in variables[0].encoding.items() if k in ("dtype", "_FillValue")}
        joined[name] = stacked
        drop += members
    if not joined:
        return ds
    out = ds.drop_vars(drop).assign(joined)
    out.attrs = dict(ds.attrs)
    return out


def typed_flags(ds: xr.Dataset) -> xr.Dataset:
    """`ds` (changed in place) with every ``flag_values`` an array of its variable's type,
    as CF 1.11 section 3.5 demands (a zarr store keeps attributes as JSON, which has no
    integer types: `results.open_result` applies this again)."""
    for var in ds.variables.values():
        # a padded record (NaN in memory) has its codes' type in its encoding
        dtype = np.dtype(var.encoding.get("dtype", var.dtype))
        if "flag_values" in var.attrs and dtype.kind in "iu":
            var.attrs["flag_values"] = np.asarray(var.attrs["flag_values"], dtype=dtype)
    return ds


def store_format(ds: xr.Dataset) -> int:
    """The layout version of an opened store (1 when it does not say)."""
    try:
        return int(ds.attrs.get(FORMAT_ATTR, 1))
    except (TypeError, ValueError):
        return 1


def time_coord(steps) -> xr.Variable:
    """The ``time`` coordinate (module docstring) of `steps` steps of 1 s, or of the step
    indices `steps` (an integer array), encoded as integer seconds since the nominal
    start."""
    import xarray as xr

    index = np.arange(steps, dtype=np.int64) if np.ndim(steps) == 0 else np.asarray(steps, np.int64)
    start = np.datetime64(TIME_EPOCH, "s")
    return xr.Variable("time", start + index.astype("timedelta64[s]"), dict(TIME_ATTRS),
                       encoding={"units": TIME_UNITS, "dtype": "int64"})


def steps_of(time) -> np.ndarray:
    """The integer step index (seconds since the run start) of `time` values, from the
    time coordinate of any store format (datetime64 since format 3, integers before)."""
    values = np.asarray(getattr(time, "values", time))
    if values.dtype.kind == "M":
        start = np.datetime64(TIME_EPOCH, "s")
        return ((values - start) // np.timedelta64(1, "s")).astype(np.int64)
    return values.astype(np.int64)


def flag_attrs(names) -> dict:
    """CF ``flag_values`` / ``flag_meanings`` of codes 0..n-1 naming `names` (a meaning
    is one word: spaces become underscores)."""
    names = [str(n).replace(" ", "_") for n in names]
    return {"flag_values": list(range(len(names))), "flag_meanings": " ".join(names)}


def _padded_dtype(dtype: np.dtype) -> np.dtype:
    """The in-memory type of a padded request column: what xarray decodes a masked integer
    column to (float32 up to 16 bits, float64 above); floats stay as they are."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return np.dtype(np.float32 if dtype.itemsize <= 2 else np.float64)
    return dtype


def _row_block(values: np.ndarray, codes: np.ndarray, k: int, lo: int, hi: int, dtype) -> np.ndarray:
    """Requests lo..hi-1 of type `k` (in their order in `values`), NaN past the last."""
    mine = np.flatnonzero(codes == k)[lo:hi]
    out = np.full((1, hi - lo), np.nan, dtype=dtype)
    out[0, : mine.size] = values[mine]
    return out


def by_type(codes, n_types: int, columns: dict) -> tuple[np.ndarray, dict]:
    """Flat per-request `columns` laid out per request type (module docstring): returns
    the requests of each type (``request_count``) and each column as a
    ``(request_type, request)`` dask array, a type's requests in their order in
    `columns` and NaN after them.

    The arrays are lazy, one chunk per `ROW_CHUNK` requests of a type, each made from the
    flat columns when it is computed or written: the padded layout (as wide as the most
    frequent type, in floats) is never held whole, so writing a run's store needs about
    one chunk more than the run's own request log. Records of at most `SMALL_GRID` cells
    (types x width, 2 MB a column) come as NumPy arrays instead, made at once: the same
    values and chunks, without importing dask.array (most of a second of a short run)."""
    codes = np.asarray(codes)
    counts = np.array([np.count_nonzero(codes == k) for k in range(n_types)], dtype=np.int64)
    width = int(counts.max()) if counts.size else 0
    if n_types * width <= SMALL_GRID:
        out = {}
        for name, values in columns.items():
            values = np.asarray(values)
            dtype = _padded_dtype(values.dtype)
            rows = [_row_block(values, codes, k, 0, width, dtype) for k in range(n_types)]
            out[name] = np.concatenate(rows) if rows else np.full((0, width), np.nan, dtype)
        return counts, out
    import dask.array as da

    edges = list(range(0, width, ROW_CHUNK)) + [width]
    chunks = ((1,) * n_types, tuple(np.diff(edges)) if width else (0,))
    out = {}
    for name, values in columns.items():
        values = np.asarray(values)
        dtype = _padded_dtype(values.dtype)
        # A graph written by hand: the flat columns (views of the run's log) go into the
        # tasks as they are, without being hashed for a name.
        key = f"requests-by-type-{name}-{uuid.uuid4().hex}"
        graph = {(key, k, j): (_row_block, values, codes, k, edges[j], edges[j + 1], dtype)
                 for k in range(n_types) for j in range(len(edges) - 1)}
        out[name] = da.Array(graph, key, chunks, dtype=dtype)
    return counts, out


def has_requests(ds: xr.Dataset) -> bool:
    """Whether `ds` holds request records in the layout of the module docstring (one run's
    store: ``request_count`` along ``request_type`` only; or runs that `open_runs` stacked)."""
    return COUNT in ds and "request_outcome" in ds


def flat_requests(ds: xr.Dataset) -> dict[str, np.ndarray]:
    """One run store's request records as flat arrays, type by type (within a type in the
    order the run logged them): every ``(request_type, request)`` variable without its
    padding, the records of `REQUEST_DTYPES` in their integer type, and ``request_type``,
    each request's code (index into the ``request_type`` coordinate). Reads the values."""
    counts = np.asarray(ds[COUNT].values, dtype=np.int64)
    out = {TYPE: np.repeat(np.arange(counts.size, dtype=np.int8), counts)}
    for name, var in ds.data_vars.items():
        if var.dims != (TYPE, REQUEST):
            continue
        dtype = record_dtype(str(name), var)
        # row by row, without the padding: the padded layout is never held whole
        parts = [np.asarray(var[k, :n].values).astype(dtype, copy=False) for k, n in enumerate(counts)]
        out[str(name)] = np.concatenate(parts) if parts else np.empty(0, dtype)
    return out


def record_dtype(name: str, var) -> np.dtype:
    """The type of request record `name` (a variable of a store or of `request_vars`): its
    integer type in `REQUEST_DTYPES`, unless it was stored as real numbers (request ends
    and latencies under execution.latency: substep, docs/model.md D34), and any other
    variable's own type."""
    stored = var.encoding.get("dtype")
    if name in REQUEST_DTYPES and not (stored is not None and np.issubdtype(np.dtype(stored), np.floating)):
        return np.dtype(REQUEST_DTYPES[name])
    return var.dtype


def request_vars(counts: np.ndarray, columns: dict, attrs: dict, real=()) -> dict:
    """The data variables of the per-type request layout: each padded column of
    `columns` (from `by_type`) with its attributes from `attrs` and, for the records of
    `REQUEST_DTYPES`, the integer type and ``_FillValue`` it is stored with (those named
    in `real`, times inside a step, float64 with NaN padding: docs/model.md D34); and
    ``request_count``."""
    import xarray as xr

    out = {COUNT: xr.Variable((TYPE,), counts, {"long_name": LONG_NAMES[COUNT], "units": "1"})}
    for name, grid in columns.items():
        enc = {}
        if name in real:
            enc = {"dtype": np.dtype(np.float64), "_FillValue": np.nan}
        elif name in REQUEST_DTYPES:
            enc = {"dtype": np.dtype(REQUEST_DTYPES[name]), "_FillValue": REQUEST_FILL}
        out[name] = xr.Variable((TYPE, REQUEST), grid, dict(attrs.get(name, {})), enc)
    return out


def _upgrade_requests(ds: xr.Dataset) -> xr.Dataset:
    """Formats 1-3 kept one flat dim ``request``: the codes in ``request_type`` (1, 2)
    or ``request_type_code`` (3), the names in ``request_type_name`` on dim
    ``request_type_dim`` (1, 2) or the index coordinate ``request_type`` (3). Format 4
    lays the records out per type; this reads them."""
    if REQUEST not in ds.dims or COUNT in ds.data_vars:
        return ds
    if "request_type_name" in ds.coords:
        names = np.asarray(ds["request_type_name"].values).astype(object)
        codes_var = TYPE
    else:
        names = np.asarray(ds[TYPE].values).astype(object)
        codes_var = CODE
    codes = np.asarray(ds[codes_var].values, dtype=np.int64)
    flat = [n for n, v in ds.data_vars.items() if v.dims == (REQUEST,) and n != codes_var]
    attrs = {n: dict(ds[n].attrs) for n in flat}
    values = {n: ds[n].values for n in flat}
    if "request_latency" not in values and "request_end" in values:  # not stored before format 2
        values["request_latency"] = (values["request_end"] - values["request_start"]).astype(np.int64)
        attrs["request_latency"] = {"long_name": "request latency (end - start)", "units": "s"}
    counts, columns = by_type(codes, len(names), values)
    ds = ds.drop_vars([codes_var, *flat, *(v for v in ("request_type_name", LABEL) if v in ds.variables)])
    ds = ds.drop_dims([d for d in ("request_type_dim", REQUEST) if d in ds.dims])
    ds = ds.assign_coords({TYPE: (TYPE, names)})
    return ds.assign(request_vars(counts, columns, attrs))


def _upgrade_time(ds: xr.Dataset) -> xr.Dataset:
    """Formats 1 and 2 stored ``time`` as the integer step index (units s)."""
    if "time" not in ds.coords or ds["time"].dtype.kind not in "iu":
        return ds
    return ds.assign_coords(time=time_coord(np.asarray(ds["time"].values, dtype=np.int64)))


def upgrade(ds: xr.Dataset) -> xr.Dataset:
    """An opened store of formats 1-3 made to look like the current format (request
    records per type, request type index, CF time, units, long names, netCDF-safe
    attributes; the records are read into memory); stores of the current
    format are returned as they are. Nothing is rewritten on disk, and the dataset keeps
    the ``store_format`` of the store it was read from."""
    fmt = store_format(ds)
    if fmt >= STORE_FORMAT:
        return ds
    if fmt < 2:
        if "request_user" in ds.data_vars:
            ds["request_user"].attrs.setdefault("units", "1")
        if "scaling_actions" in ds.data_vars and "action_field" in ds.coords:
            # format 1 wrote the four fields' units as one string "s, s, 1, 1"
            ds = ds.assign_coords(action_field_unit=("action_field", np.array(ACTION_FIELD_UNITS, dtype=object)))
            ds["scaling_actions"].attrs.pop("units", None)
            ds["scaling_actions"].attrs["units_coordinate"] = "action_field_unit"
        if "scaling_action_cost" in ds.data_vars:
            ds["scaling_action_cost"].attrs["units"] = "h"  # capacity multiplier x hours
    ds = _upgrade_time(_upgrade_requests(ds))
    if "decision" in ds.variables and ds["decision"].attrs.get("units") == OLD_DECISION_UNITS:
        ds = ds.assign_coords(decision_field_unit=("decision_field", np.array(DECISION_FIELD_UNITS, dtype=object)))
        ds["decision"].attrs.pop("units")
        ds["decision"].attrs[UNITS_COORDINATE] = "decision_field_unit"
    for var in ds.variables.values():
        if var.attrs.get("units") in OLD_UNITS:
            var.attrs["units"] = OLD_UNITS[var.attrs["units"]]
    out = finish(ds)
    out.attrs[FORMAT_ATTR] = fmt  # what the store is, not what it now looks like
    return out
