"""Conventions every stored dataset follows (docs/formats.md, "Conventions").

The run stores (`results.build_dataset`), the per-run statistics (`summary.run_metrics`)
and a sweep's combined store (`combine`) pass through `finish` before they are written,
so that each of them:

* names every variable and coordinate with a ``long_name``;
* gives every numeric variable its unit. A variable along ``resource`` holds values in
  a different unit per resource (Mbit/s, %, MB), so it has no single ``units``
  attribute: its ``units_coordinate`` attribute names the coordinate on ``resource``
  that holds the unit of each resource (``resource_unit``, or ``capacity_hours_unit``
  for capacity-hours). Selecting one resource keeps that coordinate as a scalar, so the
  unit stays with the numbers. Variables of codes (``flag_values`` / ``flag_meanings``,
  CF) and of text need no unit;
* carries attributes that netCDF accepts as well as zarr: numbers, text and flat lists;
  a boolean is written as 0 or 1, a mapping as JSON text, None is left out;
* says its layout version in ``store_format`` (`STORE_FORMAT`).

A run store also labels each request with the name of its request type (coordinate
``request_type_label`` on ``request``) next to the int8 code ``request_type``.
`label_requests` rebuilds that coordinate in memory from the codes when a store is
opened, so ``groupby("request_type_label")`` works without decoding stored text, and
gives stores of format 1 (0.3.0 and before, which lack it) the same look
(`upgrade`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import xarray as xr

ACTION_FIELD_UNITS = ("s", "s", "1", "1")  # scaling actions' fields: steps are 1 s; units of dedicated capacity

__all__ = ["STORE_FORMAT", "FORMAT_ATTR", "LABEL", "finish", "netcdf_attrs", "flag_attrs",
           "label_requests", "request_type_labels", "upgrade", "store_format"]

# 1: 0.3.0 and before. 2: consolidated metadata, request_type_label, units_coordinate
#    instead of one comma-joined units string, netCDF-safe attributes, long_name everywhere.
STORE_FORMAT = 2
FORMAT_ATTR = "store_format"
LABEL = "request_type_label"
UNITS_COORDINATE = "units_coordinate"

# long_name of the coordinates (and of grid dimensions a sweep commonly has).
LONG_NAMES = {
    "time": "step index",
    "resource": "resource",
    "resource_unit": "unit of the resource's values",
    "capacity_hours_unit": "unit of the resource's capacity-hours",
    "node_class": "node class",
    "event": "subtask event",
    "request_type_name": "request type (task type of the model bundle)",
    LABEL: "request type of the request",
    "request_type": "request type",
    "action_field": "field of a scaling action",
    "action_field_unit": "unit of the scaling-action field",
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
    ds.attrs = netcdf_attrs(dict(ds.attrs))
    ds.attrs[FORMAT_ATTR] = STORE_FORMAT
    return ds


def store_format(ds: xr.Dataset) -> int:
    """The layout version of an opened store (1 when it does not say)."""
    try:
        return int(ds.attrs.get(FORMAT_ATTR, 1))
    except (TypeError, ValueError):
        return 1


def request_type_labels(codes: np.ndarray, names) -> np.ndarray:
    """The request type name of each request, from its code (an index into `names`)."""
    table = np.array([str(n) for n in names], dtype=object)
    return table[np.asarray(codes, dtype=np.int64)]


def flag_attrs(names) -> dict:
    """CF ``flag_values`` / ``flag_meanings`` of codes 0..n-1 naming `names` (a meaning
    is one word: spaces become underscores)."""
    names = [str(n).replace(" ", "_") for n in names]
    return {"flag_values": list(range(len(names))), "flag_meanings": " ".join(names)}


def label_requests(ds: xr.Dataset) -> xr.Dataset:
    """`ds` with the ``request_type_label`` coordinate built in memory from the codes
    (a run store only; other datasets are returned as they are)."""
    if "request_type" not in ds.data_vars or "request_type_name" not in ds.coords \
            or "request" not in ds.dims:
        return ds
    names = [str(n) for n in np.asarray(ds["request_type_name"].values)]
    labels = request_type_labels(ds["request_type"].values, names)
    attrs = {"long_name": LONG_NAMES[LABEL]}
    if LABEL in ds.variables:
        attrs = dict(ds[LABEL].attrs)
        ds = ds.drop_vars(LABEL)
    return ds.assign_coords({LABEL: ("request", labels, attrs)})


def upgrade(ds: xr.Dataset) -> xr.Dataset:
    """An opened store of format 1 made to look like format 2 (labels, units, long
    names, netCDF-safe attributes); format 2 stores are returned as they are."""
    if store_format(ds) >= STORE_FORMAT:
        return ds
    ds = label_requests(ds)
    if "request_type" in ds.data_vars and "request_type_name" in ds.coords:
        ds["request_type"].attrs.update(flag_attrs(np.asarray(ds["request_type_name"].values)))
    if "request_user" in ds.data_vars:
        ds["request_user"].attrs.setdefault("units", "1")
    if "scaling_actions" in ds.data_vars and "action_field" in ds.coords:
        # format 1 wrote the four fields' units as one string "s, s, 1, 1"
        ds = ds.assign_coords(action_field_unit=("action_field", np.array(ACTION_FIELD_UNITS, dtype=object)))
        ds["scaling_actions"].attrs.pop("units", None)
        ds["scaling_actions"].attrs["units_coordinate"] = "action_field_unit"
    if "scaling_action_cost" in ds.data_vars:
        ds["scaling_action_cost"].attrs["units"] = "h"  # capacity multiplier x hours
    out = finish(ds)
    out.attrs[FORMAT_ATTR] = store_format(ds)  # what the store is, not what it now looks like
    return out
