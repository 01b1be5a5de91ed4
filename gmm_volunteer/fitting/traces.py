"""Reading and checking a traces folder (`traces/FORMAT.md`).

Every problem raises `TraceError` with a message that names the file and the column,
before any fitting starts, so that `gmmv fit` fails fast and writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gmm_volunteer.model.constants import PHASES

RESOURCE_COLUMNS = {
    "band_in": "band_in_mbps",
    "band_out": "band_out_mbps",
    "cpu": "cpu_pct",
    "memory": "memory_mb",
    "storage": "storage_mb",
}
RUN_COLUMNS = ("run_id", "subtask_type", "batch_size", "bandwidth_mbps", "download_s", "execution_s", "upload_s")
CONSUMPTION_COLUMNS = ("run_id", "phase", "t", "cpu_pct", "memory_mb", "band_in_mbps", "band_out_mbps")
DOWNLOAD_COLUMNS = ("level_mbps", "run_id", "t", "band_in_mbps", "cpu_pct", "memory_mb", "storage_delta_mb")
CATALOG_KEYS = ("name", "description", "data_size_mb", "input_size_mb", "output_size_mb")

# Values beyond these cannot be measurements in the stated units (e.g. bytes instead of
# MB, bit/s instead of Mbit/s): 100 Gbit/s, 100 cores, 10 TB RAM, 1 PB disk, 11 days.
ABSURD = {"mbps": 1e5, "pct": 1e4, "memory_mb": 1e7, "storage_mb": 1e9, "s": 1e6, "batch_size": 1e4}
# The resource trace may exceed the nominal capacity a little (counter jitter), not more.
MAX_FRACTION = 1.5
MIN_RESOURCE_SECONDS = 120
MIN_RUNS = 2
QUOTA_FOLDER = "quota"  # execution runs under CPU quotas, for the execution hazard (D38)
QUOTA_RUN_IDS = 1_000_000  # the k-th quota collection's run ids are moved to k * this


class TraceError(ValueError):
    """A traces folder that cannot be fitted; the message names the file and column."""


@dataclass
class Traces:
    root: Path
    resources: "object"  # pandas.DataFrame, 1 row per sample
    machine: dict
    catalog: list[dict]
    runs: "object"
    consumption: "object"
    downloads: "object"
    levels: dict | None
    # execution runs measured under CPU quotas (`quota/`, read by the execution hazard
    # alone): `runs` with the columns `collection` and `cpu_quota_pct`, and their rows
    # of `consumption`; None without a `quota/` folder
    quota_runs: "object" = None
    quota_consumption: "object" = None


def _bound(column: str) -> float:
    if column.endswith("_mbps"):
        return ABSURD["mbps"]
    if column.endswith("_pct"):
        return ABSURD["pct"]
    if column.endswith("_s") or column == "t":
        return ABSURD["s"]
    if column in ABSURD:
        return ABSURD[column]
    if column.startswith("storage"):
        return ABSURD["storage_mb"]
    return ABSURD["memory_mb"]


def _read_csv(path: Path, columns: tuple[str, ...], min_rows: int = 1, where: str | None = None):
    import pandas as pd

    if not path.exists() and path.suffix == ".gz" and path.with_suffix("").exists():
        path = path.with_suffix("")  # an uncompressed table is read as well
    rel = f"{where or path.parent.name}/{path.name}"
    if not path.exists():
        raise TraceError(f"{rel}: file missing")
    try:
        df = pd.read_csv(path)
    except Exception as err:  # corrupt gzip, empty file, bad quoting
        raise TraceError(f"{rel}: cannot be read as CSV: {err}") from None
    for c in columns:
        if c not in df.columns:
            raise TraceError(f"{rel}: column {c!r} missing (have {list(df.columns)})")
    if len(df) < min_rows:
        raise TraceError(f"{rel}: column {columns[0]!r}: too short ({len(df)} rows, need >= {min_rows})")
    for c in columns:
        if c in ("subtask_type", "phase"):
            if df[c].isna().any():
                raise TraceError(f"{rel}: column {c!r}: missing values (row {int(np.flatnonzero(df[c].isna())[0]) + 2})")
            df[c] = df[c].astype(str)
            continue
        vals = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(vals)
        if bad.any():
            raise TraceError(f"{rel}: column {c!r}: NaN or non-numeric value at row {int(np.flatnonzero(bad)[0]) + 2}")
        neg = vals < 0
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise TraceError(f"{rel}: column {c!r}: negative value {vals[i]} at row {i + 2}")
        big = vals > _bound(c)
        if big.any():
            i = int(np.flatnonzero(big)[0])
            raise TraceError(f"{rel}: column {c!r}: value {vals[i]} at row {i + 2} is absurd for its unit (> {_bound(c):g}); wrong units?")
        df[c] = vals
    return df


def _read_json(path: Path, where: str | None = None):
    rel = f"{where or path.parent.name}/{path.name}"
    if not path.exists():
        raise TraceError(f"{rel}: file missing")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise TraceError(f"{rel}: not valid JSON: {err}") from None


def _check_resources(df, machine: dict) -> None:
    rel = "resources/machine.json"
    cap = machine.get("capacity") if isinstance(machine, dict) else None
    if not isinstance(cap, dict):
        raise TraceError(f"{rel}: key 'capacity' missing")
    for col in RESOURCE_COLUMNS.values():
        v = cap.get(col)
        if not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
            raise TraceError(f"{rel}: key 'capacity.{col}' missing or not a positive number")
        frac = df[col].to_numpy() / float(v)
        if (frac > MAX_FRACTION).any():
            i = int(np.argmax(frac))
            raise TraceError(
                f"resources/resources.csv.gz: column {col!r}: value {df[col].iloc[i]} at row {i + 2} is "
                f"{frac[i]:.3g} x the capacity {v} in machine.json; wrong units?"
            )
    t = df["time_s"].to_numpy()
    if (np.diff(t) <= 0).any():
        i = int(np.flatnonzero(np.diff(t) <= 0)[0]) + 1
        raise TraceError(f"resources/resources.csv.gz: column 'time_s': not strictly increasing at row {i + 2}")
    if t[-1] - t[0] < MIN_RESOURCE_SECONDS:
        raise TraceError(
            f"resources/resources.csv.gz: column 'time_s': too short ({t[-1] - t[0]:.0f} s, need >= {MIN_RESOURCE_SECONDS} s)"
        )


def _check_catalog(catalog, where: str = "subtasks") -> None:
    rel = f"{where}/catalog.json"
    if not isinstance(catalog, list) or not catalog:
        raise TraceError(f"{rel}: must be a non-empty list of subtask types")
    names = []
    for i, entry in enumerate(catalog):
        if not isinstance(entry, dict):
            raise TraceError(f"{rel}: entry {i}: must be a mapping with keys {list(CATALOG_KEYS)}, got {entry!r}")
        for k in CATALOG_KEYS:
            if k not in entry:
                raise TraceError(f"{rel}: entry {i}: key {k!r} missing")
        if not isinstance(entry["name"], str) or not entry["name"].strip():
            raise TraceError(f"{rel}: entry {i}: key 'name' must be a non-empty string, got {entry['name']!r}")
        for k in ("data_size_mb", "input_size_mb", "output_size_mb"):
            v = entry[k]
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0 or v > ABSURD["storage_mb"]:
                raise TraceError(f"{rel}: entry {i} ({entry['name']}): key {k!r} must be a size in MB, got {v!r}")
        if entry["data_size_mb"] <= 0:
            raise TraceError(f"{rel}: entry {i} ({entry['name']}): key 'data_size_mb' must be > 0")
        names.append(entry["name"])
    if len(set(names)) != len(names):
        raise TraceError(f"{rel}: key 'name': duplicate subtask type names")


def _check_runs(runs, consumption, catalog, where: str = "subtasks") -> None:
    names = {e["name"] for e in catalog}
    unknown = sorted(set(runs["subtask_type"]) - names)
    if unknown:
        raise TraceError(f"{where}/runs.csv.gz: column 'subtask_type': {unknown} not in catalog.json")
    missing = [e["name"] for e in catalog if e["name"] not in set(runs["subtask_type"])]
    if missing:
        raise TraceError(f"{where}/runs.csv.gz: column 'subtask_type': catalog types {missing} have no runs")
    if runs["run_id"].duplicated().any():
        raise TraceError(f"{where}/runs.csv.gz: column 'run_id': duplicate run ids")
    for col in ("download_s", "execution_s", "upload_s"):
        v = runs[col].to_numpy()
        if (v <= 0).any():
            i = int(np.flatnonzero(v <= 0)[0])
            raise TraceError(f"{where}/runs.csv.gz: column {col!r}: {v[i]} at row {i + 2}; "
                             "every phase of a run takes time (> 0 s)")
        if len(v) > 1 and np.all(v == v[0]):
            raise TraceError(f"{where}/runs.csv.gz: column {col!r}: every run has the same value "
                             f"{v[0]}; durations this degenerate are not measurements")
    bs = runs["batch_size"].to_numpy()
    if (bs < 1).any() or (bs != np.round(bs)).any():
        raise TraceError(f"{where}/runs.csv.gz: column 'batch_size': must be integers >= 1")
    if (runs["bandwidth_mbps"].to_numpy() <= 0).any():
        raise TraceError(f"{where}/runs.csv.gz: column 'bandwidth_mbps': must be > 0")
    bad_phase = sorted(set(consumption["phase"]) - set(PHASES))
    if bad_phase:
        raise TraceError(f"{where}/consumption.csv.gz: column 'phase': unknown phases {bad_phase}")
    known = set(runs["run_id"].tolist())
    orphan = sorted(set(consumption["run_id"].tolist()) - known)
    if orphan:
        raise TraceError(f"{where}/consumption.csv.gz: column 'run_id': runs {orphan[:5]} not in runs.csv.gz")
    _check_series(consumption, ("run_id", "phase"), f"{where}/consumption.csv.gz")
    have = set(zip(consumption["run_id"].tolist(), consumption["phase"].tolist()))
    for rid in runs["run_id"].tolist():
        for ph in PHASES:
            if (rid, ph) not in have:
                raise TraceError(f"{where}/consumption.csv.gz: column 'phase': run {rid:g} has no {ph!r} rows")


def _check_series(df, keys: tuple[str, ...], rel: str) -> None:
    """Samples of one series (rows sharing `keys`) have strictly increasing ``t`` in file
    order, and no row appears twice."""
    dup = df.duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise TraceError(f"{rel}: row {i + 2} repeats an earlier row exactly (duplicated rows)")
    for key, group in df.groupby(list(keys), sort=False):
        t = group["t"].to_numpy()
        bad = np.flatnonzero(np.diff(t) <= 0)
        if bad.size:
            row = int(group.index[bad[0] + 1]) + 2
            what = ", ".join(f"{k} {v}" for k, v in zip(keys, key if isinstance(key, tuple) else (key,)))
            raise TraceError(f"{rel}: column 't': not strictly increasing at row {row} ({what}); "
                             "rows shuffled or repeated?")


def _check_levels(levels) -> None:
    rel = "downloads/levels.json"
    if not isinstance(levels, dict):
        raise TraceError(f"{rel}: must be a mapping with key 'levels_mbps', got {type(levels).__name__}")
    lv = levels.get("levels_mbps")
    if not isinstance(lv, list) or not lv or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and 0 < x <= ABSURD["mbps"]
            for x in lv):
        raise TraceError(f"{rel}: key 'levels_mbps': must be a non-empty list of bandwidths > 0 in Mbit/s, got {lv!r}")
    if "preliminary" in levels and not isinstance(levels["preliminary"], bool):
        raise TraceError(f"{rel}: key 'preliminary': must be true or false, got {levels['preliminary']!r}")
    iters = levels.get("iters")
    if iters is not None and (not isinstance(iters, int) or isinstance(iters, bool) or not 0 <= iters <= 100_000):
        raise TraceError(f"{rel}: key 'iters': must be an integer in 0..100000, got {iters!r}")


def _check_download_meta(root: Path, catalog) -> None:
    """``downloads/meta.json`` is optional; when present it must be what the collector
    writes: a mapping whose ``runs`` entries name a run id (and a catalog type)."""
    path = root / "downloads" / "meta.json"
    if not path.exists():
        return
    rel = "downloads/meta.json"
    meta = _read_json(path)
    if not isinstance(meta, dict):
        raise TraceError(f"{rel}: must be a mapping (date, command, runs, ...), got {type(meta).__name__}")
    runs = meta.get("runs", [])
    if not isinstance(runs, list):
        raise TraceError(f"{rel}: key 'runs': must be a list of download runs, got {type(runs).__name__}")
    names = {e["name"] for e in catalog}
    for i, r in enumerate(runs):
        if not isinstance(r, dict) or not isinstance(r.get("run_id"), (int, float)) or isinstance(r.get("run_id"), bool):
            raise TraceError(f"{rel}: key 'runs.{i}': must be a mapping with a numeric 'run_id', got {r!r}")
        if "subtask_type" in r and r["subtask_type"] not in names:
            raise TraceError(f"{rel}: key 'runs.{i}.subtask_type': {r['subtask_type']!r} is not in subtasks/catalog.json")


def _attach_download_types(root: Path, downloads, catalog) -> None:
    """Add a `subtask_type` column to the downloads when the collector's meta.json maps
    every download run to a catalog type (optional; used for per-type download memory)."""
    if "subtask_type" in downloads.columns:
        return
    meta_path = root / "downloads" / "meta.json"
    if not meta_path.exists():
        return
    try:
        runs = json.loads(meta_path.read_text()).get("runs") or []
        mapping = {float(r["run_id"]): str(r["subtask_type"]) for r in runs}
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return
    names = {e["name"] for e in catalog}
    ids = downloads["run_id"].tolist()
    if mapping and all(i in mapping for i in ids) and set(mapping.values()) <= names:
        downloads["subtask_type"] = [mapping[i] for i in ids]


def load_traces(root: str | Path) -> Traces:
    """Read and check every file of a traces folder; raise `TraceError` on any problem."""
    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: traces folder not found")
    resources = _read_csv(root / "resources" / "resources.csv.gz", ("time_s", *RESOURCE_COLUMNS.values()), min_rows=10)
    machine = _read_json(root / "resources" / "machine.json")
    _check_resources(resources, machine)
    catalog = _read_json(root / "subtasks" / "catalog.json")
    _check_catalog(catalog)
    runs = _read_csv(root / "subtasks" / "runs.csv.gz", RUN_COLUMNS, min_rows=MIN_RUNS)
    consumption = _read_csv(root / "subtasks" / "consumption.csv.gz", CONSUMPTION_COLUMNS)
    _check_runs(runs, consumption, catalog)
    downloads = _read_csv(root / "downloads" / "downloads.csv.gz", DOWNLOAD_COLUMNS, min_rows=MIN_RUNS)
    if (downloads["level_mbps"].to_numpy() <= 0).any():
        raise TraceError("downloads/downloads.csv.gz: column 'level_mbps': must be > 0")
    _check_series(downloads, ("level_mbps", "run_id"), "downloads/downloads.csv.gz")
    _check_download_meta(root, catalog)
    _attach_download_types(root, downloads, catalog)
    levels_path = root / "downloads" / "levels.json"
    levels = _read_json(levels_path) if levels_path.exists() else None
    if levels is not None:
        _check_levels(levels)
    quota_runs, quota_consumption = _load_quota(root, catalog, runs)
    return Traces(root, resources, machine, catalog, runs, consumption, downloads, levels, quota_runs, quota_consumption)


def _load_quota(root: Path, catalog, runs) -> tuple:
    """The collections of `quota/` (traces/FORMAT.md; docs/model.md D38): each folder a
    `subtasks/` collection of execution runs measured with `gmmv collect subtasks --testbed`
    under a CPU quota, which its `meta.json` records (`limits.cpu_pct`). Run ids are moved
    to `k * QUOTA_RUN_IDS` for the k-th folder (name order), clear of `subtasks/`'s."""
    import pandas as pd

    folder = root / QUOTA_FOLDER
    if not folder.exists():
        return None, None
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not subs:
        raise TraceError(f"{QUOTA_FOLDER}/: no collection folders (traces/FORMAT.md, 'quota/')")
    if runs["run_id"].max() >= QUOTA_RUN_IDS:
        raise TraceError(f"subtasks/runs.csv.gz: column 'run_id': ids up to {QUOTA_RUN_IDS - 1} only "
                         f"beside {QUOTA_FOLDER}/ (its runs are numbered from {QUOTA_RUN_IDS})")
    names = {e["name"] for e in catalog}
    all_runs, all_cons = [], []
    for k, sub in enumerate(subs, start=1):
        where = f"{QUOTA_FOLDER}/{sub.name}"
        meta = _read_json(sub / "meta.json", where)
        limits = meta.get("limits") if isinstance(meta, dict) else None
        quota = limits.get("cpu_pct") if isinstance(limits, dict) else None
        if isinstance(quota, bool) or not isinstance(quota, (int, float)) or not 0 < quota <= ABSURD["pct"]:
            raise TraceError(f"{where}/meta.json: key 'limits.cpu_pct' missing or not a CPU quota in % "
                             f"(got {quota!r}); a quota collection is measured with `gmmv collect subtasks --testbed`")
        cat = _read_json(sub / "catalog.json", where)
        _check_catalog(cat, where)
        unknown = sorted({e["name"] for e in cat} - names)
        if unknown:
            raise TraceError(f"{where}/catalog.json: key 'name': {unknown} not in subtasks/catalog.json")
        q_runs = _read_csv(sub / "runs.csv.gz", RUN_COLUMNS, MIN_RUNS, where)
        q_cons = _read_csv(sub / "consumption.csv.gz", CONSUMPTION_COLUMNS, 1, where)
        _check_runs(q_runs, q_cons, cat, where)
        if q_runs["run_id"].max() >= QUOTA_RUN_IDS:
            raise TraceError(f"{where}/runs.csv.gz: column 'run_id': ids up to {QUOTA_RUN_IDS - 1} only")
        q_runs["run_id"] += k * QUOTA_RUN_IDS
        q_cons["run_id"] += k * QUOTA_RUN_IDS
        all_runs.append(q_runs.assign(collection=where, cpu_quota_pct=float(quota)))
        all_cons.append(q_cons)
    q_runs = pd.concat(all_runs, ignore_index=True)
    ref = quota_reference(q_runs)
    have = set(zip(*(q_runs.loc[q_runs["collection"] == ref, c] for c in ("subtask_type", "batch_size"))))
    lacking = sorted({t for t in q_runs["subtask_type"] if not any(h[0] == t for h in have)})
    if lacking:
        raise TraceError(f"{ref}/runs.csv.gz: column 'subtask_type': {lacking} have no runs here, the "
                         f"collection of the largest quota, whose work the other quotas' runs are measured against")
    return q_runs, pd.concat(all_cons, ignore_index=True)


def quota_reference(quota_runs) -> str:
    """The quota collection whose measured work the execution hazard divides every quota
    run's CPU by (docs/model.md D38): the one of the largest quota (the first by name on
    a tie), the machine's work at full speed when it is unlimited."""
    top = quota_runs["cpu_quota_pct"].max()
    return sorted(set(quota_runs.loc[quota_runs["cpu_quota_pct"] == top, "collection"]))[0]
