"""Per-run statistics and the plain-text summary printed by `gmmv run` / `gmmv summarize`.

`run_metrics` reduces one result store (docs/formats.md, section 2) to the small set of
statistics the paper reports in section 3.2: request outcomes per request type, latency
quantiles of completed requests, server consumption mean and sd per resource, and subtask
completion rates per node class. Sweeps stack these per run (`gmm_volunteer.experiments.combine`).
The printed summary also states the allocation fractions in effect (`allocation_in_effect`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr
import yaml

from gmm_volunteer.io import conventions
from gmm_volunteer.run.config import ALLOCATION_RESOURCES
from gmm_volunteer.model.constants import MONITOR_OPS, OUTCOMES

DEFAULT_QUANTILES = (0.5, 0.95, 0.99)
PER_RESOURCE = {"units_coordinate": "resource_unit"}


def _type_names(ds: xr.Dataset) -> list[str]:
    return [str(v) for v in np.asarray(ds[conventions.TYPE].values)]


def _scalar_mean(da: xr.DataArray) -> float:
    x = np.asarray(da.values, dtype=np.float64)
    return float(x.mean()) if x.size else float("nan")


def dedicated_capacity(ds: xr.Dataset) -> np.ndarray:
    """(steps, resource) maximum allocation of the dedicated server in effect per step:
    the stored ``dedicated_capacity`` series (docs/model.md D17), or, for stores written
    before autoscalers existed, ``server.capacity`` x ``base_profile`` of the stored
    config (the capacity was constant then); NaN when neither can be read."""
    steps, n_res = ds.sizes.get("time", 0), ds.sizes.get("resource", 5)
    if "dedicated_capacity" in ds:
        return np.asarray(ds["dedicated_capacity"].values, dtype=np.float64)
    try:
        cfg = yaml.safe_load(ds.attrs.get("config", ""))
        base = cfg.get("base_profile") or {}
        from gmm_volunteer.run.config import BaseProfile

        vec = BaseProfile(**base).as_array() * float(cfg["server"]["capacity"])
    except Exception:  # unreadable config: the measure is unknown, not zero
        vec = np.full(n_res, np.nan)
    return np.broadcast_to(vec, (steps, n_res))


def capacity_hours(ds: xr.Dataset) -> np.ndarray:
    """Dedicated capacity integrated over the run, per resource, in the resource's unit
    x hours (e.g. CPU %·h: 100 %·h is one core for an hour); steps are 1 s."""
    cap = dedicated_capacity(ds)
    return cap.sum(axis=0) / 3600.0 if cap.shape[0] else np.full(cap.shape[1], np.nan)


def scaling_action_count(ds: xr.Dataset) -> int:
    """Scaling actions that took effect (cancelled orders not counted); 0 without any."""
    if "scaling_actions" not in ds or ds["scaling_actions"].shape[0] == 0:
        return 0
    acts = np.asarray(ds["scaling_actions"].values)
    return int(np.count_nonzero(acts[:, 1] >= 0))


def run_metrics(ds: xr.Dataset, quantiles=DEFAULT_QUANTILES) -> xr.Dataset:
    """Statistics of one run as a small dataset.

    Variables: ``requests`` (request_type, outcome) counts; ``latency_quantile``
    (request_type, quantile) and ``latency_quantile_all`` (quantile) of *completed*
    requests (NumPy's default 'linear' quantile; NaN when a type has none);
    ``latency_mean`` (request_type) of completed requests; ``server_consumption_mean`` /
    ``_sd`` (population sd over steps), ``server_allocation_mean``,
    ``user_consumption_mean`` (resource); ``subtask_events_total`` (node_class, event);
    ``subtask_completion_rate`` (node_class) = complete / start over the run;
    ``online_users_mean``, ``active_requests_mean``; ``capacity_hours`` (resource) of
    the dedicated server and ``scaling_actions_total`` (docs/model.md D17);
    ``accuracy_served``, ``variant_share``, ``estimator_mare`` and
    ``estimator_decisions`` (gmm_volunteer.routing_metrics; NaN where they do not apply).
    """
    from gmm_volunteer.experiments.class_metrics import class_coords, class_metrics, energy_metrics
    from gmm_volunteer.experiments.phase_law import phase_law_metrics
    from gmm_volunteer.experiments.routing_metrics import routing_metrics  # imports the policies

    quantiles = np.asarray(quantiles, dtype=np.float64)
    if quantiles.ndim != 1 or np.any((quantiles < 0) | (quantiles > 1)):
        raise ValueError(f"quantiles must be a list of numbers in [0, 1], got {quantiles.tolist()}")
    names = _type_names(ds)
    n_types = len(names)
    records = conventions.flat_requests(ds)
    rtype = records[conventions.TYPE].astype(np.int64)
    outcome = records["request_outcome"].astype(np.int64)
    latency = records["request_latency"]

    counts = np.zeros((n_types, len(OUTCOMES)), dtype=np.int64)
    np.add.at(counts, (rtype, outcome), 1)
    done = outcome == 0
    lq = np.full((n_types, quantiles.size), np.nan)
    lmean = np.full(n_types, np.nan)
    for k in range(n_types):
        sel = latency[done & (rtype == k)]
        if sel.size:
            lq[k] = np.quantile(sel, quantiles)
            lmean[k] = sel.mean()
    per_class = class_metrics(ds, records, quantiles)
    all_done = latency[done]
    lq_all = np.quantile(all_done, quantiles) if all_done.size else np.full(quantiles.size, np.nan)

    cons = np.asarray(ds["server_consumption"].values, dtype=np.float64)
    alloc = np.asarray(ds["server_allocation"].values, dtype=np.float64)
    ucons = np.asarray(ds["user_consumption"].values, dtype=np.float64)
    events = np.asarray(ds["subtask_events"].values, dtype=np.int64).sum(axis=0)
    event_names = [str(e) for e in np.asarray(ds["event"].values)]
    node_classes = [str(c) for c in np.asarray(ds["node_class"].values)]
    starts = events[:, event_names.index("start")].astype(np.float64)
    completes = events[:, event_names.index("complete")].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(starts > 0, completes / starts, np.nan)

    def _mean(a):
        return a.mean(axis=0) if a.shape[0] else np.full(a.shape[1:], np.nan)

    def _sd(a):
        return a.std(axis=0) if a.shape[0] else np.full(a.shape[1:], np.nan)

    # Monitoring cost of a router (docs/routing.md); zero for schedulers without a monitor.
    mon_calls = np.zeros(len(MONITOR_OPS))
    mon_bytes = np.zeros(len(MONITOR_OPS))
    if "monitor_calls" in ds:
        mon_calls = np.asarray(ds["monitor_calls"].values, dtype=np.float64).sum(axis=0)
        mon_bytes = np.asarray(ds["monitor_bytes"].values, dtype=np.float64).sum(axis=0)

    resources = [str(r) for r in np.asarray(ds["resource"].values)]
    units = (
        [str(u) for u in np.asarray(ds["resource_unit"].values)]
        if "resource_unit" in ds.coords else [""] * len(resources)
    )
    out = xr.Dataset(
        {
            "requests": (("request_type", "outcome"), counts,
                         {"long_name": "ended requests by outcome", "units": "1"}),
            "latency_quantile": (("request_type", "quantile"), lq,
                                 {"long_name": "latency quantile of completed requests",
                                  "units": "s"}),
            "latency_quantile_all": (("quantile",), lq_all,
                                     {"long_name": "latency quantile of completed requests, all types",
                                      "units": "s"}),
            "latency_mean": (("request_type",), lmean,
                             {"long_name": "mean latency of completed requests", "units": "s"}),
            # units per resource: the coordinate resource_unit (gmm_volunteer.io.conventions)
            "server_consumption_mean": (("resource",), _mean(cons),
                                        {"long_name": "server consumption, mean over steps", **PER_RESOURCE}),
            "server_consumption_sd": (("resource",), _sd(cons),
                                      {"long_name": "server consumption, sd over steps (ddof 0)", **PER_RESOURCE}),
            "server_allocation_mean": (("resource",), _mean(alloc),
                                       {"long_name": "server allocation, mean over steps", **PER_RESOURCE}),
            "user_consumption_mean": (("resource",), _mean(ucons),
                                      {"long_name": "consumption summed over user nodes, mean over steps",
                                       **PER_RESOURCE}),
            "subtask_events_total": (("node_class", "event"), events,
                                     {"long_name": "subtask events over the run", "units": "1"}),
            "subtask_completion_rate": (("node_class",), rate,
                                        {"long_name": "subtask completions / starts", "units": "1"}),
            "monitor_calls_total": (("monitor_op",), mon_calls,
                                    {"long_name": "monitoring calls over the run", "units": "1"}),
            "monitor_bytes_total": (("monitor_op",), mon_bytes,
                                    {"long_name": "monitoring traffic over the run", "units": "byte"}),
            "online_users_mean": ((), _scalar_mean(ds["online_users"]),
                                  {"long_name": "users online, mean over steps", "units": "1"}),
            "capacity_hours": (("resource",), capacity_hours(ds),
                               {"long_name": "dedicated server capacity integrated over the run",
                                "units_coordinate": "capacity_hours_unit"}),
            "scaling_actions_total": ((), scaling_action_count(ds),
                                      {"long_name": "autoscaler actions that took effect", "units": "1"}),
            "active_requests_mean": ((), _scalar_mean(ds["active_requests"]),
                                     {"long_name": "users with an active request, mean over steps",
                                      "units": "1"}),
            # accuracy served, variants and the routers' estimator error (docs/routing.md)
            **routing_metrics(ds),
            # what the paper's phase law asks of the server (docs/model.md D27)
            **phase_law_metrics(ds),
            # energy (D37) and, with several user classes, per class (D36)
            **energy_metrics(ds, int(counts[:, 0].sum())),
            **per_class,
        },
        coords={
            "request_type": ("request_type", np.array(names, dtype=object)),
            "outcome": ("outcome", np.array(OUTCOMES, dtype=object)),
            "quantile": ("quantile", quantiles),
            "resource": ("resource", np.array(resources, dtype=object)),
            "resource_unit": ("resource", np.array(units, dtype=object)),
            "capacity_hours_unit": ("resource", np.array([f"{u} h" for u in units], dtype=object)),
            "node_class": ("node_class", np.array(node_classes, dtype=object)),
            "event": ("event", np.array(event_names, dtype=object)),
            "monitor_op": ("monitor_op", np.array(MONITOR_OPS, dtype=object)),
            **(class_coords(ds) if per_class else {}),
        },
    )
    return out


def run_seed(attrs: dict):
    """The run's seed: attrs ``seed`` if present, else the resolved config's ``seed``."""
    if "seed" in attrs:
        return attrs["seed"]
    text = attrs.get("config")
    if isinstance(text, str):
        try:
            cfg = yaml.safe_load(text)
        except yaml.YAMLError:
            cfg = None
        if isinstance(cfg, dict) and "seed" in cfg:
            return cfg["seed"]
    return None


def allocation_in_effect(attrs: dict):
    """Allocation fractions of a run's node classes (paper 2.2: node-specific mean and sd
    of the fraction of the maximum allocation), from its stored config and model bundle.

    Returns ``{"server": (law, mean, sd), "users": (law, mean, sd)}`` with ``law`` the
    stored value (a base name or a mapping) and mean, sd arrays in resource order (NaN
    where the value comes from a bundle that cannot be read), plus ``"bundle_error"``
    (None or why the bundle was not read); None when the stored config is unreadable.
    """
    text = attrs.get("config")
    try:
        cfg = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        cfg = None
    if not isinstance(cfg, dict):
        return None
    from pydantic import TypeAdapter, ValidationError

    from gmm_volunteer.run.config import ServerAllocationLaw, UserAllocationLaw

    laws = {}
    for section, tp in (("server", ServerAllocationLaw), ("users", UserAllocationLaw)):
        sec = cfg.get(section)
        if sec is None and section == "server" and isinstance(cfg.get("servers"), list) and cfg["servers"]:
            sec = cfg["servers"][0]  # several servers (docs/model.md D35): the first
        # Runs stored before these keys existed drew the fitted fractions for both classes.
        raw = sec.get("allocation", "fitted") if isinstance(sec, dict) else "fitted"
        try:
            laws[section] = TypeAdapter(tp).validate_python(raw)
        except ValidationError:
            return None
    fitted, error = None, None
    if any(law.base == "fitted" for law in laws.values()):
        from gmm_volunteer.io.bundlefiles import load_bundle
        from gmm_volunteer.model.bundle import BundleError

        path = cfg.get("model") or attrs.get("model_bundle")
        try:
            bundle = load_bundle(str(path))
            fitted = {r: (m.mean, m.sd) for r, m in bundle.allocation.items()}
        except (BundleError, OSError, TypeError) as exc:
            error = str(exc) or type(exc).__name__
    out = {name: (law.model_dump(mode="json"), *law.fractions(fitted)) for name, law in laws.items()}
    out["bundle_error"] = error
    return out


def _law_text(law) -> str:
    if isinstance(law, str):
        return law
    parts = [str(law.get("base"))]
    for key in ("mean", "sd"):
        parts += [f"{key} {r} {v:g}" for r, v in (law.get(key) or {}).items()]
    return ", ".join(parts)


def _fmt(x, digits=1) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _stored_servers(attrs: dict) -> list[dict]:
    """The `servers:` entries of a store's config (several servers only), else []."""
    try:
        cfg = yaml.safe_load(attrs.get("config", "")) or {}
    except yaml.YAMLError:
        return []
    servers = cfg.get("servers") if isinstance(cfg, dict) else None
    return [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) else []


def _servers_text(attrs: dict) -> str:
    """'edge 2x, cloud 16x': each server's capacity, or '' for one server."""
    return ", ".join(f"{s.get('name', 'server')} {s.get('capacity', '?'):g}x" if isinstance(s.get("capacity"), (int, float))
                     else f"{s.get('name', 'server')} ?" for s in _stored_servers(attrs))


def _scaled_name(attrs: dict) -> str:
    """The server the store's `dedicated_capacity` is of: the one the autoscaler scales."""
    try:
        cfg = yaml.safe_load(attrs.get("config", "")) or {}
        name = (cfg.get("autoscaler_options") or {}).get("server")
    except (yaml.YAMLError, AttributeError):
        name = None
    servers = _stored_servers(attrs)
    return name or (servers[0].get("name", "server") if servers else "the server")


def server_lines(ds: xr.Dataset) -> list[str]:
    """Each server's row of a store with several servers (docs/model.md D35): its mean
    CPU use and allocation (cores), memory (MB), the Mbit/s its links carried, the
    CPU-seconds of the executions it finished and its energy; nothing for one server."""
    if "consumption_per_server" not in ds:
        return []
    res = [str(r) for r in np.asarray(ds["resource"].values)]
    cons = np.asarray(ds["consumption_per_server"].values, np.float64)
    alloc = np.asarray(ds["allocation_per_server"].values, np.float64)
    work = np.asarray(ds["work_per_server"].values, np.float64).sum(axis=0)
    energy = np.asarray(ds["energy_per_server"].values, np.float64).sum(axis=0)
    cpu, mem, bin_, bout = (res.index(r) for r in ("cpu", "memory", "band_in", "band_out"))
    if not cons.shape[0]:  # a store of no steps
        return []
    rows = []
    for k, name in enumerate(np.asarray(ds["server"].values)):
        c, a = cons[:, k].mean(axis=0), alloc[:, k].mean(axis=0)
        rows.append([str(name), _fmt(c[cpu] / 100.0, 3), _fmt(a[cpu] / 100.0, 2), _fmt(c[mem], 1),
                     _fmt(c[bin_] + c[bout], 2), _fmt(float(work[k]), 1), _fmt(float(energy[k]) / 1e3, 2)])
    lines = ["Per server (means over steps; links: the transfers of the users homed at it)"]
    lines += _table(["server", "CPU used (cores)", "CPU allocated (cores)", "memory (MB)",
                     "links (Mbit/s)", "work done (CPU-s)", "energy (kJ)"], rows)
    return lines + [""]


def summarize(ds: xr.Dataset, quantiles=DEFAULT_QUANTILES) -> str:
    """A readable plain-text summary of one result store."""
    if not (conventions.has_requests(ds) and ds[conventions.COUNT].dims == (conventions.TYPE,)):
        from gmm_volunteer.io.results import ResultFormatError

        raise ResultFormatError(
            "not a single-run result store (no per-request records); a combined sweep "
            "dataset is summarized by `gmmv report`"
        )
    m = run_metrics(ds, quantiles)
    a = ds.attrs
    seed = run_seed(a)

    def cap(key):
        v = a.get(key)
        return f"{v:g}x" if isinstance(v, (int, float)) else "?"

    servers = _servers_text(a)  # several servers (docs/model.md D35)
    header = (
        f"users {_fmt(a.get('users'))} | steps {_fmt(a.get('steps', ds.sizes.get('time')))} | "
        f"scheduler {a.get('scheduler', '?')} | user capacity {cap('user_capacity')} | "
        + (f"servers {servers}" if servers else f"server capacity {cap('server_capacity')}")
        + f" | seed {seed if seed is not None else '?'}"
    )
    lines = [header]
    if a.get("model_provisional"):
        lines.append(
            "WARNING: provisional model bundle (not fitted from traces); "
            "numbers illustrate the model, not a measured system"
        )
    lines.append("")
    qlabels = [f"P{100 * q:g} (s)" for q in m["quantile"].values]
    lines.append("Requests per request type (latency quantiles in s, of completed requests only)")
    rows = []
    names = [str(n) for n in m["request_type"].values]
    counts = m["requests"].values
    # latencies below the step (execution.latency: substep, docs/model.md D34): to the ms
    real = conventions.record_dtype("request_latency", ds["request_latency"]).kind == "f"
    digits = 3 if real else 1
    for k, name in enumerate(names):
        rows.append([name, *(_fmt(int(c)) for c in counts[k]),
                     *(_fmt(float(v), digits) for v in m["latency_quantile"].values[k])])
    rows.append(["all", *(_fmt(int(c)) for c in counts.sum(axis=0)),
                 *(_fmt(float(v), digits) for v in m["latency_quantile_all"].values)])
    lines += _table(["request type", *OUTCOMES, *qlabels], rows)
    lines.append("")
    several = "consumption_per_server" in ds  # several servers: the rows are their totals (D35)
    lines.append(f"Server resources{' (all servers)' if several else ''} (mean and sd over steps; "
                 "consumption before the executor acts)")
    rows = []
    for i, r in enumerate(m["resource"].values):
        unit = str(m["resource_unit"].values[i])
        rows.append([str(r), unit,
                     _fmt(float(m["server_consumption_mean"].values[i]), 2),
                     _fmt(float(m["server_consumption_sd"].values[i]), 2),
                     _fmt(float(m["server_allocation_mean"].values[i]), 2)])
    lines += _table(["resource", "unit", "consumption mean", "consumption sd", "allocation mean"], rows)
    lines.append("")
    lines += server_lines(ds)
    scaled = f" of {_scaled_name(a)}" if servers else ""
    lines.append(f"Dedicated capacity{scaled} (autoscaler {a.get('autoscaler', 'fixed')}; "
                 f"{int(m['scaling_actions_total'])} scaling actions)")
    rows = [[str(r), f"{m['resource_unit'].values[i]}·h",
             _fmt(float(m["capacity_hours"].values[i]), 2)]
            for i, r in enumerate(m["resource"].values)]
    lines += _table(["resource", "unit", "capacity-hours"], rows)
    lines.append("")
    fractions = allocation_in_effect(a)
    if fractions is not None:
        (s_law, s_mean, s_sd), (u_law, u_mean, u_sd) = fractions["server"], fractions["users"]
        first = " (the first)" if servers else ""
        lines.append(f"Allocation fractions in effect (of each node's maximum allocation; "
                     f"server{first}: {_law_text(s_law)}; users: {_law_text(u_law)})")
        rows = [[str(r), _fmt(float(s_mean[i]), 3), _fmt(float(s_sd[i]), 3),
                 _fmt(float(u_mean[i]), 3), _fmt(float(u_sd[i]), 3)]
                for i, r in enumerate(ALLOCATION_RESOURCES)]
        lines += _table(["resource", "server mean", "server sd", "users mean", "users sd"], rows)
        if fractions["bundle_error"] is not None:
            lines.append(f"(fitted fractions not shown: {fractions['bundle_error']})")
        if "user_class" in ds.coords and ds.sizes["user_class"] > 1:
            lines.append("(users: users.allocation; a class's own allocation replaces it: users.classes, D36)")
        lines.append("")
    lines.append("Subtask completion rate (complete / start over the run)")
    rows = []
    ev = m["subtask_events_total"]
    for i, c in enumerate(m["node_class"].values):
        rows.append([str(c), _fmt(int(ev.sel(event="start").values[i])),
                     _fmt(int(ev.sel(event="complete").values[i])),
                     _fmt(float(m["subtask_completion_rate"].values[i]), 3)])
    lines += _table(["node class", "start", "complete", "rate"], rows)
    if float(m["monitor_calls_total"].sum()) > 0:
        lines.append("")
        lines.append("Monitoring cost over the run (docs/routing.md)")
        rows = [[str(op), _fmt(float(m["monitor_calls_total"].values[i])),
                 _fmt(float(m["monitor_bytes_total"].values[i]) / 1e6, 3)]
                for i, op in enumerate(m["monitor_op"].values)]
        lines += _table(["operation", "calls", "traffic (MB)"], rows)
    from gmm_volunteer.experiments.class_metrics import summary_lines

    lines += summary_lines(m, _table, _fmt)
    return "\n".join(lines) + "\n"


__all__ = ["run_metrics", "summarize", "capacity_hours", "dedicated_capacity", "run_seed", "allocation_in_effect", "DEFAULT_QUANTILES"]
