"""The ``ds.gmmv`` accessor: the functions of `gmm_volunteer.experiments.analysis`
bound to a dataset (a result store, `open_runs` stores, a combined sweep dataset or a
statistics dataset).

Registered on every `xarray.Dataset` as soon as both `gmm_volunteer` and xarray are
imported, in either order (`gmm_volunteer._hooks`), so ``ds.gmmv`` works on a dataset
opened with plain `xr.open_zarr` too. This module imports only xarray; the analysis
functions are imported when a method is first called.
"""

from __future__ import annotations

import xarray as xr


def _analysis():
    from gmm_volunteer.experiments import analysis

    return analysis


class GmmvAccessor:
    """``ds.gmmv``: the analysis functions bound to a dataset."""

    def __init__(self, ds: xr.Dataset):
        # a store opened with plain xr.open_zarr holds per-resource parts (format 5)
        from gmm_volunteer.io.conventions import join_units

        self._ds = join_units(ds)

    def metrics(self, quantiles=(0.5, 0.95, 0.99)) -> xr.Dataset:
        return _analysis().metrics(self._ds, quantiles)

    def latency_quantile(self, q: float = 0.99, request_type=None, all_types=False):
        return _analysis().latency_quantile(self._ds, q, request_type, all_types)

    def p99_across_types(self, q: float = 0.99):
        return _analysis().p99_across_types(self._ds, q)

    def request_counts(self, by_type: bool = False):
        return _analysis().request_counts(self._ds, by_type)

    def server_consumption(self):
        return _analysis().server_consumption(self._ds)

    def capacity_hours(self):
        """Dedicated server capacity-hours per resource (resource unit x h)."""
        return _analysis().metrics(self._ds)["capacity_hours"]

    def subtask_completion_rate(self):
        return _analysis().subtask_completion_rate(self._ds)

    def paired_difference(self, what, dim, a, b, **kwargs):
        return _analysis().paired_difference(self._ds, what, dim, a, b, **kwargs)


def register() -> None:
    """Register ``ds.gmmv`` (once)."""
    if getattr(xr.Dataset, "gmmv", None) is not GmmvAccessor:
        xr.register_dataset_accessor("gmmv")(GmmvAccessor)
