"""Analysis of results: the paper's section 3.2 quantities and paired comparisons.

Plain functions take a combined sweep dataset (`gmm_volunteer.experiments.combine`), a per-run
statistics dataset (`summary.run_metrics`) or a single result store (which is reduced
with `run_metrics` first). The same functions hang off the ``ds.gmmv`` accessor
(`gmm_volunteer.experiments.accessor`, there after ``import gmm_volunteer``):

    ds.gmmv.latency_quantile(0.99)           # (..., request_type)
    ds.gmmv.request_counts()                 # (..., outcome)
    ds.gmmv.server_consumption()             # Dataset mean / sd (..., resource)
    ds.gmmv.subtask_completion_rate()        # (..., node_class)
    ds.gmmv.paired_difference("p99", "scheduler", "uniform", "centralized")

Paired differences use the runs' shared seeds (common random numbers): the difference
is taken per seed, then averaged, with a bootstrap confidence interval over seeds
(`scipy.stats.bootstrap`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from gmm_volunteer.experiments.runs import open_runs  # noqa: F401  (many run stores as one dataset)
from gmm_volunteer.experiments.summary import run_metrics
from gmm_volunteer.io import conventions


def _is_open_runs(ds: xr.Dataset) -> bool:
    return "run" in ds.dims and conventions.has_requests(ds)


def metrics(ds: xr.Dataset, quantiles=(0.5, 0.95, 0.99)) -> xr.Dataset:
    """Per-run statistics for a result store, or along ``run`` for `open_runs` stores
    (each run's statistics from its own store, without the padding); combined and
    statistics datasets pass through."""
    if _is_open_runs(ds):
        from gmm_volunteer.io.results import open_result

        per_run = [run_metrics(open_result(str(path)), quantiles) for path in ds["run"].values]
        run_coords = {k: v for k, v in ds.coords.items() if v.dims == ("run",)}
        return xr.concat(per_run, dim="run", coords="minimal", compat="override",
                         combine_attrs="drop_conflicts").assign_coords(run_coords)
    return run_metrics(ds, quantiles) if conventions.has_requests(ds) else ds


def _select_quantile(da: xr.DataArray, q: float) -> xr.DataArray:
    levels = np.asarray(da["quantile"].values, dtype=float)
    hit = np.flatnonzero(np.isclose(levels, q, rtol=0, atol=1e-12))
    if not hit.size:
        raise KeyError(
            f"quantile {q} is not stored (stored: {', '.join(f'{v:g}' for v in levels)}); "
            "recombine the sweep with it in `quantiles`"
        )
    return da.isel(quantile=int(hit[0]), drop=True)


def latency_quantile(ds: xr.Dataset, q: float = 0.99, request_type: str | None = None,
                     all_types: bool = False) -> xr.DataArray:
    """Latency quantile of completed requests, seconds.

    Per request type by default (dim ``request_type``); one request type with
    `request_type`; over all request types pooled with `all_types`.
    """
    m = metrics(ds, (q,)) if conventions.has_requests(ds) else ds
    if all_types:
        return _select_quantile(m["latency_quantile_all"], q).rename(f"latency_p{100 * q:g}")
    out = _select_quantile(m["latency_quantile"], q)
    if request_type is not None:
        out = out.sel(request_type=request_type, drop=True)
    return out.rename(f"latency_p{100 * q:g}")


def p99_across_types(ds: xr.Dataset, q: float = 0.99) -> xr.Dataset:
    """Mean, min and max over request types of the per-type quantile (paper Fig. 3)."""
    per_type = latency_quantile(ds, q)
    return xr.Dataset({
        "mean": per_type.mean("request_type"),
        "min": per_type.min("request_type"),
        "max": per_type.max("request_type"),
    }, attrs={"quantile": q, "units": "s"})


def request_counts(ds: xr.Dataset, by_type: bool = False) -> xr.DataArray:
    """Ended requests per outcome (completed, abandoned, dropped); per type if asked."""
    counts = metrics(ds)["requests"]
    return counts if by_type else counts.sum("request_type")


def server_consumption(ds: xr.Dataset) -> xr.Dataset:
    """Server consumption mean and sd over steps per resource (units: coord resource_unit)."""
    m = metrics(ds)
    return xr.Dataset({
        "mean": m["server_consumption_mean"],
        "sd": m["server_consumption_sd"],
        "allocation_mean": m["server_allocation_mean"],
    })


def subtask_completion_rate(ds: xr.Dataset) -> xr.DataArray:
    """Subtask completions / starts per node class (server, user)."""
    return metrics(ds)["subtask_completion_rate"]


_NAMED = {
    "p99": lambda ds: latency_quantile(ds, 0.99, all_types=True),
    "p99_mean_over_types": lambda ds: latency_quantile(ds, 0.99).mean("request_type"),
    "completed": lambda ds: request_counts(ds).sel(outcome="completed", drop=True),
    "abandoned": lambda ds: request_counts(ds).sel(outcome="abandoned", drop=True),
    "dropped": lambda ds: request_counts(ds).sel(outcome="dropped", drop=True),
    "server_cpu": lambda ds: server_consumption(ds)["mean"].sel(resource="cpu", drop=True),
    "server_memory": lambda ds: server_consumption(ds)["mean"].sel(resource="memory", drop=True),
    # dedicated capacity over the run (autoscalers, docs/model.md D17): CPU in core-hours
    "capacity_hours": lambda ds: metrics(ds)["capacity_hours"],
    "cpu_core_hours": lambda ds: metrics(ds)["capacity_hours"].sel(resource="cpu", drop=True) / 100.0,
    "scaling_actions": lambda ds: metrics(ds)["scaling_actions_total"],
}


# Units of the named quantities (reductions and selections drop the attributes).
_NAMED_UNITS = {"p99": "s", "p99_mean_over_types": "s", "completed": "1", "abandoned": "1",
                "dropped": "1", "server_cpu": "%", "server_memory": "MB", "cpu_core_hours": "h",
                "scaling_actions": "1"}


def quantity(ds: xr.Dataset, what) -> xr.DataArray:
    """A named quantity (see `_NAMED`), a variable name, or a DataArray as is."""
    if isinstance(what, xr.DataArray):
        return what
    if what in _NAMED:
        out = _NAMED[what](ds)
        return out.assign_attrs(units=_NAMED_UNITS[what]) if what in _NAMED_UNITS else out
    if what in ds:
        return ds[what]
    from gmm_volunteer.model.suggest import did_you_mean

    raise KeyError(f"unknown quantity {what!r}{did_you_mean(what, [*_NAMED, *map(str, ds.data_vars)])}; "
                   f"named ones: {', '.join(_NAMED)}, or a variable of the dataset")


def bootstrap_mean_ci(values: np.ndarray, confidence: float = 0.95, n_resamples: int = 9999,
                      method: str = "percentile", seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and bootstrap CI of the mean along the last axis, vectorized over the others.

    Rows with a NaN or fewer than two values get a NaN interval. Fewer than three values
    (seeds) warn (`intervals.FewSeedsWarning`): the interval is then degenerate.
    """
    from scipy import stats

    from gmm_volunteer.experiments.intervals import BOOTSTRAP_TWO_SEEDS, NO_INTERVAL, warn_few_seeds

    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    warn_few_seeds(n, "bootstrap interval", f"{NO_INTERVAL} (NaN)" if n < 2 else BOOTSTRAP_TWO_SEEDS)
    batch_shape = values.shape[:-1]
    flat = values.reshape(-1, values.shape[-1])
    mean = flat.mean(axis=-1)
    low = np.full(flat.shape[0], np.nan)
    high = np.full(flat.shape[0], np.nan)
    ok = np.all(np.isfinite(flat), axis=-1)
    if flat.shape[-1] >= 2 and ok.any():
        res = stats.bootstrap(
            (flat[ok],), np.mean, axis=-1, vectorized=True, confidence_level=confidence,
            n_resamples=n_resamples, method=method, rng=np.random.default_rng(seed),
        )
        low[ok] = res.confidence_interval.low
        high[ok] = res.confidence_interval.high
    return mean.reshape(batch_shape), low.reshape(batch_shape), high.reshape(batch_shape)


def paired_difference(ds: xr.Dataset, what, dim: str, a, b, confidence: float = 0.95,
                      n_resamples: int = 9999, method: str = "percentile",
                      seed: int = 0) -> xr.Dataset:
    """Paired difference ``what[dim=a] - what[dim=b]`` on the same seeds.

    Returns ``mean`` (of the per-seed differences), ``low`` / ``high`` (bootstrap
    confidence interval of that mean over seeds) and ``n_seeds``, over the remaining
    dims. `what` is a named quantity ("p99", "completed", "server_cpu", ...), a
    variable name, or a DataArray with a ``seed`` dim.
    """
    da = quantity(ds, what)
    if "seed" not in da.dims:
        raise ValueError("paired differences need a 'seed' dimension (a combined sweep dataset)")
    if dim not in da.dims:
        raise ValueError(f"no dimension {dim!r} to compare along (dims: {', '.join(map(str, da.dims))})")
    for v in (a, b):
        if v not in list(da[dim].values):
            raise KeyError(f"{dim}={v!r} is not in the dataset ({', '.join(map(str, da[dim].values))})")
    diff = (da.sel({dim: a}, drop=True) - da.sel({dim: b}, drop=True)).transpose(..., "seed")
    values = np.asarray(diff.values, dtype=np.float64)
    mean, low, high = bootstrap_mean_ci(values, confidence, n_resamples, method, seed)
    dims = diff.dims[:-1]
    coords = {k: v for k, v in diff.coords.items() if "seed" not in v.dims}
    n = np.isfinite(values).sum(axis=-1)
    unit = {"units": units_of(da)} if units_of(da) else {}
    return xr.Dataset(
        {"mean": (dims, mean, {"long_name": "mean of the per-seed differences", **unit}),
         "low": (dims, low, {"long_name": "lower end of the confidence interval", **unit}),
         "high": (dims, high, {"long_name": "upper end of the confidence interval", **unit}),
         "n_seeds": (dims, n, {"long_name": "seeds with both runs present", "units": "1"})},
        coords=coords,
        attrs={"dim": dim, "a": str(a), "b": str(b), "confidence": confidence,
               "method": method, "n_resamples": n_resamples,
               "quantity": what if isinstance(what, str) else str(getattr(what, "name", ""))},
    )


def units_of(da: xr.DataArray) -> str | None:
    """The unit of a quantity: its ``units`` attribute, or the scalar unit coordinate a
    selection of one resource keeps (docs/formats.md section 2.1); None if unknown."""
    if da.attrs.get("units"):
        return str(da.attrs["units"])
    coord = da.attrs.get("units_coordinate")
    if coord in da.coords and da[coord].ndim == 0:
        return str(da[coord].values)
    return None
