"""`gmmv collect downloads`: subtask-data download consumption (paper 2.2, `c^x`).

Bandwidth levels: Lloyd-Max quantization of the resource trace's `band_in_mbps`
(or `--fixed-levels`). At every level, every selected subtask type's model file (its
subtask data) is downloaded from the local rate-limited server (rate = level), read in
1 KB chunks and written chunk by chunk to a file on the working filesystem. A fresh
worker process does the downloads and samples its own CPU time, RSS, received bytes and
written bytes at ~10 Hz; rows are aggregated per second. Output: downloads.csv.gz,
levels.json, meta.json (traces/FORMAT.md).

With `limited` (a `testbed.limits.LimitedWorker` with a link, `--testbed CONFIG`) the
worker runs in a testbed device's cgroup and network namespace and downloads over its
shaped link: one level, the link's band_in, set by `tc` (the server does not pace).
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import datetime as _dt
import gzip
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .lloyd_max import lloyd_max

COLUMNS = ["level_mbps", "run_id", "t", "band_in_mbps", "cpu_pct", "memory_mb", "storage_delta_mb"]


def read_column(path: str | os.PathLike, column: str) -> np.ndarray:
    """One numeric column of a (gzipped) CSV trace, with the standard library only."""
    p = str(path)
    opener = gzip.open if p.endswith(".gz") else open
    with opener(p, "rt", newline="") as f:
        r = csv.DictReader(f)
        vals = [float(row[column]) for row in r if row.get(column) not in (None, "")]
    return np.asarray(vals, dtype=float)


def _worker(url: str, plan: list[tuple[int, float, str]], store_dir: str, chunk: int, sample_hz: float,
            url_rate: float | None = None) -> dict:
    """Fresh process: plan = [(run_id, level_mbps, blob path)]; `url_rate` replaces the
    level as the server's pace (a shaped link sets the rate)."""
    from .sampling import Sampler, http_get, per_second

    sampler = Sampler(sample_hz).start()
    time.sleep(0.3)
    rows, runs = [], []
    for run_id, level, blob in plan:
        target = Path(store_dir) / f"run{run_id}.bin"
        t0 = sampler.mark()
        with open(target, "wb", buffering=0) as f:
            pace = level if url_rate is None else url_rate
            n = http_get(f"{url}/blob/{blob}?rate={pace:g}", sampler, read_size=chunk, sink=f)
            os.fsync(f.fileno())
        t1 = sampler.mark()
        time.sleep(0.05)
        sampler.mark()
        a = sampler.array()
        for r in per_second(a, t0, t1):
            rows.append({"level_mbps": level, "run_id": run_id, "t": r["t"], "band_in_mbps": r["band_in_mbps"],
                         "cpu_pct": r["cpu_pct"], "memory_mb": r["memory_mb"],
                         "storage_delta_mb": r["storage_delta_mb"]})
        runs.append({"run_id": run_id, "level_mbps": level, "file": blob, "bytes": n, "duration_s": t1 - t0,
                     "mean_mbps": n * 8 / 1e6 / (t1 - t0)})
        target.unlink()
        sampler.clear_before(t1 - 1.0)
    sampler.stop()
    return {"rows": rows, "runs": runs}


def collect_downloads(out_dir, resource_trace="traces/resources/resources.csv.gz", n_levels=4, fixed_levels=None,
                      types=None, repetitions=1, chunk_bytes=1024, model_dir=None, sample_hz=10.0,
                      preliminary=False, iters=200, command=None, quiet=False, limited=None) -> Path:
    from . import models
    from .server import LocalServer
    from .subtasks import UNPACED_MBPS, WorkerDiedError, write_csv_gz

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc)
    wall0 = time.monotonic()
    if limited is not None:
        if limited.link is None:
            raise ValueError("a limited download collection needs a testbed device's shaped link")
        levels = np.asarray([limited.limits.band_in_mbps], float)
        thresholds = np.zeros(0)
        source, n_samples, method = limited.limits.config, 0, "testbed link (band_in of the device, tc)"
    elif fixed_levels:
        levels = np.asarray(sorted(fixed_levels), float)
        thresholds = (levels[:-1] + levels[1:]) / 2
        source, n_samples, method = None, 0, "fixed"
    else:
        band = read_column(resource_trace, "band_in_mbps")
        levels, thresholds = lloyd_max(band, n_levels, iters)
        source, n_samples, method = str(resource_trace), int(band.size), "lloyd_max"
    levels = np.round(levels, 4)
    use = [float(v) for v in levels if v > 0]
    if not use:
        raise ValueError("no positive bandwidth level to download at")
    types = list(types or models.ALL_TYPES)
    paths = {t: models.model_path(t, model_dir) for t in types}
    with tempfile.TemporaryDirectory(prefix="gmmv-serve-") as tmp, \
            tempfile.TemporaryDirectory(prefix="gmmv-store-") as store:
        root = Path(tmp)
        (root / "models").mkdir()
        for t, p in paths.items():
            dst = root / "models" / p.name
            try:
                os.link(p, dst)
            except OSError:
                shutil.copyfile(p, dst)
        plan, run_id = [], 0
        for _rep in range(repetitions):
            for level in use:
                for t in types:
                    plan.append((run_id, level, f"models/{paths[t].name}"))
                    run_id += 1
        if not quiet:
            print(f"downloads: levels {use} Mbit/s, {len(plan)} downloads", file=sys.stderr, flush=True)
        pool_init = ({"initializer": limited.initializer, "initargs": limited.initargs}
                     if limited is not None else {})
        host = limited.host if limited is not None else "127.0.0.1"
        url_rate = UNPACED_MBPS if limited is not None else None
        with LocalServer(root, host=host) as srv, \
                cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), **pool_init) as ex:
            try:
                res = ex.submit(_worker, srv.url, plan, store, chunk_bytes, sample_hz, url_rate).result()
            except cf.process.BrokenProcessPool:
                raise WorkerDiedError("the download worker ended before its downloads were done"
                                      + (f" (OOM kills in its cgroup: {limited.report()['oom_kills']})"
                                         if limited is not None else "")) from None
            except BaseException:
                if limited is not None:  # interrupted: the pool would wait for the plan
                    limited.stop_workers()
                raise
    write_csv_gz(out / "downloads.csv.gz", COLUMNS, res["rows"])
    file_type = {f"models/{paths[t].name}": t for t in types}
    for r in res["runs"]:
        r["subtask_type"] = file_type[r["file"]]
    (out / "levels.json").write_text(json.dumps({
        "levels_mbps": [float(v) for v in levels], "thresholds_mbps": [float(v) for v in thresholds],
        "source": source, "n_samples": n_samples, "preliminary": bool(preliminary), "method": method,
        "iters": iters, "levels_used_mbps": use,
    }, indent=2) + "\n")
    (out / "meta.json").write_text(json.dumps({
        "date": started.isoformat(timespec="seconds"), "command": command or " ".join(sys.argv),
        "wall_s": round(time.monotonic() - wall0, 1), "chunk_bytes": chunk_bytes, "sample_hz": sample_hz,
        "repetitions": repetitions, "types": types, "runs": res["runs"],
        **({"limits": limited.describe(), "limits_counted": limited.report()} if limited is not None else {}),
    }, indent=2) + "\n")
    return out
