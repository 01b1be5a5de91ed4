"""`gmmv collect subtasks`: execution-stage consumption of real CV inference subtasks.

For every subtask type, bandwidth level and batch size (and repetition) one run:
  download   the batch's inputs (JPEG images) from the local rate-limited server
  execution  decode + preprocess + ONNX Runtime inference of the batch on the CPU + postprocess
  upload     the batch's results to the server at the same rate
Each subtask type runs in a fresh worker process (so its memory is not mixed with
another model's, and torch is never loaded in it); the worker samples its own CPU time,
RSS and transferred bytes at ~10 Hz and at every phase boundary. The server runs in
another process. Output: catalog.json, runs.csv.gz, consumption.csv.gz, meta.json
(traces/FORMAT.md).

With `limited` (a `testbed.limits.LimitedWorker`, `--testbed CONFIG`) every worker joins
a testbed node's cgroup before it starts, and for a user device the server listens on
the host end of the node's shaped link: the transfers are not paced by the server then
(`UNPACED_MBPS`), the link's `tc` rate is the bandwidth, and each run records it.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import datetime as _dt
import gzip
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N_INPUTS = 50  # distinct inputs generated per subtask type (the largest batch)
UNPACED_MBPS = 100_000.0  # the server's pace when a shaped link sets the rate instead


class WorkerDiedError(RuntimeError):
    """The measured worker process ended before its runs were done (e.g. killed by the
    memory limit of a limited collection)."""

RUN_COLUMNS = ["run_id", "subtask_type", "batch_size", "bandwidth_mbps",
               "download_s", "execution_s", "upload_s", "execution_peak_memory_mb",
               "other_load_cores", "attempts"]
CONS_COLUMNS = ["run_id", "phase", "t", "cpu_pct", "memory_mb", "band_in_mbps", "band_out_mbps"]


def prepare_inputs(root: Path, types: list[str], seed: int = 0) -> dict[str, float]:
    """Write N_INPUTS synthetic JPEG inputs per type under root/inputs/<type>/; mean sizes in MB."""
    from . import models

    sizes = {}
    for k, name in enumerate(types):
        d = root / "inputs" / name
        d.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([seed, k])
        total = 0
        for i in range(N_INPUTS):
            b = models.make_input(name, rng)
            (d / f"{i:03d}.jpg").write_bytes(b)
            total += len(b)
        sizes[name] = total / N_INPUTS / 1e6
    return sizes


def _worker(name: str, model_file: str, url: str, plan: list[tuple[int, int, float]],
            sample_hz: float, threads: int, gate_cfg: dict, url_rate: float | None = None) -> dict:
    """Runs in a fresh process: all runs of one subtask type. plan = [(run_id, batch, mbps)].

    Every run passes the quiet gate (`quiet.py`): a run during which the rest of the
    machine used more than the threshold is thrown away and repeated once it is quiet.
    """
    from . import models
    from .quiet import QuietGate
    from .sampling import Sampler, http_get, http_post, pack_results, per_second, unpack_batch

    sampler = Sampler(sample_hz).start()
    time.sleep(0.3)
    baseline = sampler._proc.rss_mb()
    session = models.make_session(model_file, threads)
    # one unrecorded warm-up run (first-call allocations and graph setup)
    warm = unpack_batch(http_get(f"{url}/batch/{name}?n=1&rate=1000"))
    models.run_batch(name, session, warm)
    models.trim_heap()
    loaded = sampler._proc.rss_mb()
    gate = QuietGate(pids=[os.getpid(), *gate_cfg["pids"]], threshold_cores=gate_cfg["threshold_cores"],
                     max_attempts=gate_cfg["max_attempts"], max_wait_s=gate_cfg["max_wait_s"])
    runs, cons, out_sizes = [], [], []
    for run_id, batch, mbps in plan:
        pace = mbps if url_rate is None else url_rate

        def one_run():
            t0 = sampler.mark()
            payload = http_get(f"{url}/batch/{name}?n={batch}&rate={pace:g}", sampler)
            t1 = sampler.mark()
            blobs = unpack_batch(payload)
            results = models.run_batch(name, session, blobs)
            t2 = sampler.mark()
            http_post(f"{url}/upload?rate={pace:g}", pack_results(results), sampler)
            t3 = sampler.mark()
            return t0, t1, t2, t3, results

        def attempt():
            try:
                return one_run()
            finally:
                models.trim_heap()  # a rejected try must not leave its heap behind for the next

        (t0, t1, t2, t3, results), other, tries = gate.measure(
            attempt, f"{name} run {run_id} (batch {batch}, {mbps:g} Mbit/s)")
        time.sleep(0.05)
        sampler.mark()
        a = sampler.array()
        out_sizes.extend(len(r) for r in results)
        runs.append({"run_id": run_id, "subtask_type": name, "batch_size": batch, "bandwidth_mbps": mbps,
                     "download_s": t1 - t0, "execution_s": t2 - t1, "upload_s": t3 - t2,
                     "execution_peak_memory_mb": sampler.peak_rss(t1, t2),
                     "other_load_cores": other, "attempts": tries})
        for phase, lo, hi in (("download", t0, t1), ("execution", t1, t2), ("upload", t2, t3)):
            for row in per_second(a, lo, hi):
                cons.append({"run_id": run_id, "phase": phase, "t": row["t"], "cpu_pct": row["cpu_pct"],
                             "memory_mb": row["memory_mb"], "band_in_mbps": row["band_in_mbps"],
                             "band_out_mbps": row["band_out_mbps"]})
        sampler.clear_before(time.monotonic() - 1.0)
        models.trim_heap()
    sampler.stop()
    return {"runs": runs, "consumption": cons, "baseline_rss_mb": baseline, "loaded_rss_mb": loaded,
            "output_size_mb": float(np.mean(out_sizes)) / 1e6 if out_sizes else 0.0,
            "gate": {"repeats": gate.repeats, "waited_s": gate.waited_s, "rejected": gate.rejected}}


def _died(name: str, limited) -> str:
    """Why the worker of `name` ended early, as far as its cgroup tells."""
    if limited is not None:
        counted = limited.report()
        if counted["oom_kills"]:
            return (f"the worker of {name} was killed by the memory limit of the testbed node "
                    f"({limited.limits.memory_mb:g} MB, {counted['oom_kills']} OOM kill(s)); "
                    "measure smaller --batch-sizes")
    return f"the worker of {name} ended before its runs were done"


def _load_partial(partial: Path, key: dict) -> dict[str, dict]:
    """Finished types of an earlier start with the same plan (empty if none or another plan)."""
    try:
        if json.loads((partial / "plan.json").read_text()) != json.loads(json.dumps(key)):
            return {}
    except (OSError, json.JSONDecodeError):
        return {}
    done = {}
    for name in key["types"]:
        try:
            done[name] = json.loads((partial / f"{name}.json").read_text())
        except (OSError, json.JSONDecodeError):
            break  # types are collected in order: keep the finished prefix only
    return done


def _gate_summary(cfg: dict, stats: dict, runs: list[dict]) -> dict:
    """meta.json's record of the quiet gate: its bounds, the other load of the kept runs
    (distribution, cores), and how many tries were thrown away for load."""
    from .quiet import MIN_WINDOW_S

    kept = np.array([r["other_load_cores"] for r in runs], float)
    q = (lambda p: round(float(np.quantile(kept, p)), 4)) if kept.size else (lambda p: None)
    return {
        "threshold_cores": cfg["threshold_cores"], "max_attempts": cfg["max_attempts"],
        "max_wait_s": cfg["max_wait_s"], "min_window_s": MIN_WINDOW_S,
        "other_load_cores_kept": {"min": q(0.0), "median": q(0.5), "p90": q(0.9), "p99": q(0.99),
                                  "max": q(1.0), "mean": round(float(kept.mean()), 4) if kept.size else None},
        "repeats": int(stats["repeats"]),
        "runs_repeated": int(sum(1 for r in runs if r["attempts"] > 1)),
        "rejected_other_load_cores": [round(float(x), 3) for x in stats["rejected"]],
        "waited_s": round(float(stats["waited_s"]), 1),
    }


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv_gz(path: Path, columns: list[str], rows: list[dict]) -> None:
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(r[c]) for c in columns])


def collect_subtasks(out_dir, types=None, batch_sizes=(1, 2, 5, 10, 20, 50), bandwidths=(5.0, 20.0, 100.0),
                     repetitions=2, model_dir=None, sample_hz=10.0, threads=None, seed=0, command=None,
                     quiet=False, quiet_threshold=None, quiet_attempts=None, quiet_wait=None,
                     limited=None) -> Path:
    """Measure every (type, repetition, bandwidth, batch size) run; write the trace files.

    `threads`: ONNX Runtime intra-op threads (None: `models.INTRA_OP_THREADS`, 0: runtime
    default). `quiet_*`: the quiet gate's bounds (`quiet.py`; None: its defaults).
    `limited`: an entered `testbed.limits.LimitedWorker` the workers run inside (None:
    unlimited, on the loopback).
    """
    from . import models, quiet as qg
    from .procstat import cpu_model, meminfo_mb, n_cores
    from .server import LocalServer

    threads = models.INTRA_OP_THREADS if threads is None else int(threads)
    gate_cfg = {"threshold_cores": qg.DEFAULT_THRESHOLD_CORES if quiet_threshold is None else float(quiet_threshold),
                "max_attempts": qg.DEFAULT_MAX_ATTEMPTS if quiet_attempts is None else int(quiet_attempts),
                "max_wait_s": qg.DEFAULT_MAX_WAIT_S if quiet_wait is None else float(quiet_wait)}
    qg.QuietGate(**gate_cfg)  # bad bounds fail here, before any model is built
    gate_stats = {"repeats": 0, "waited_s": 0.0, "rejected": []}

    types = list(types or models.ALL_TYPES)
    unknown = [t for t in types if t not in models.SPECS]
    if unknown:
        raise ValueError(f"unknown subtask types {unknown}; known: {models.ALL_TYPES}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc)
    wall0 = time.monotonic()
    paths = {t: models.model_path(t, model_dir) for t in types}
    runs_all, cons_all, catalog = [], [], []
    # Each finished type is kept in out/.partial/ so that a collection stopped by the quiet
    # gate (or anything else) resumes where it stopped when rerun with the same plan.
    partial = out / ".partial"
    key = {"types": types, "batch_sizes": [int(b) for b in batch_sizes], "bandwidths": [float(x) for x in bandwidths],
           "repetitions": int(repetitions), "seed": seed, "threads": threads, "sample_hz": sample_hz, "gate": gate_cfg,
           "limits": limited.describe() if limited is not None else None}
    host = limited.host if limited is not None else "127.0.0.1"
    url_rate = UNPACED_MBPS if limited is not None and limited.link is not None else None
    pool_init = ({"initializer": limited.initializer, "initargs": limited.initargs}
                 if limited is not None else {})
    done = _load_partial(partial, key)
    finished: dict[str, str] = {}
    partial.mkdir(exist_ok=True)
    (partial / "plan.json").write_text(json.dumps(key))
    with tempfile.TemporaryDirectory(prefix="gmmv-serve-") as tmp:
        root = Path(tmp)
        in_sizes = prepare_inputs(root, types, seed)
        run_id = 0
        with LocalServer(root, host=host) as srv:
            for name in types:
                plan = []
                for _rep in range(repetitions):
                    for mbps in bandwidths:
                        for b in batch_sizes:
                            plan.append((run_id, int(b), float(mbps)))
                            run_id += 1
                t_type = time.monotonic()
                if name in done:
                    res = done[name]
                    if not quiet:
                        print(f"subtasks: {name}: {len(plan)} runs kept from an earlier start ({partial})",
                              file=sys.stderr, flush=True)
                else:
                    if not quiet:
                        print(f"subtasks: {name}: {len(plan)} runs", file=sys.stderr, flush=True)
                    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), **pool_init) as ex:
                        try:
                            res = ex.submit(_worker, name, str(paths[name]), srv.url, plan, sample_hz, threads,
                                            {**gate_cfg, "pids": [os.getpid(), srv.pid]}, url_rate).result()
                        except cf.process.BrokenProcessPool:
                            raise WorkerDiedError(_died(name, limited)) from None
                        except BaseException:
                            if limited is not None:  # interrupted: the pool would wait for the plan
                                limited.stop_workers()
                            raise
                    res["collect_wall_s"] = round(time.monotonic() - t_type, 1)
                    res["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                    (partial / f"{name}.json").write_text(json.dumps(res))
                finished[name] = res["finished"]
                runs_all += res["runs"]
                for k in gate_stats:
                    gate_stats[k] += res["gate"][k]
                cons_all += res["consumption"]
                spec = models.SPECS[name]
                catalog.append({
                    "name": name, "description": spec.description, "weights": spec.weights,
                    "data_size_mb": round(os.path.getsize(paths[name]) / 1e6, 4),
                    "input_size_mb": round(in_sizes[name], 6),
                    "output_size_mb": round(res["output_size_mb"], 6),
                    "model_file": spec.model_file,
                    "worker_baseline_rss_mb": round(res["baseline_rss_mb"], 1),
                    "worker_loaded_rss_mb": round(res["loaded_rss_mb"], 1),
                    "collect_wall_s": res["collect_wall_s"],
                })
                if not quiet and name not in done:
                    print(f"subtasks: {name} done in {time.monotonic() - t_type:.0f} s", file=sys.stderr,
                          flush=True)
    import shutil

    write_csv_gz(out / "runs.csv.gz", RUN_COLUMNS, runs_all)
    write_csv_gz(out / "consumption.csv.gz", CONS_COLUMNS, cons_all)
    (out / "catalog.json").write_text(json.dumps(catalog, indent=2) + "\n")
    import onnxruntime
    import platform

    meta = {
        "date": started.isoformat(timespec="seconds"),
        "command": command or " ".join(sys.argv),
        "wall_s": round(time.monotonic() - wall0, 1),
        "types": types, "batch_sizes": list(batch_sizes), "bandwidths_mbps": list(bandwidths),
        "repetitions": repetitions, "sample_hz": sample_hz,
        "onnxruntime": onnxruntime.__version__, "intra_op_threads": threads or "runtime default",
        "session": {**models.SESSION_SETTINGS, "intra_op_num_threads": threads or "runtime default"},
        "quiet_gate": _gate_summary(gate_cfg, gate_stats, runs_all),
        "cpu_model": cpu_model(), "cores": n_cores(), "ram_mb": round(meminfo_mb().get("MemTotal", 0), 1),
        "os": platform.platform(), "python": platform.python_version(),
        "n_runs": len(runs_all), "n_consumption_rows": len(cons_all),
        "resumed_types": [t for t in types if t in done], "type_finished": finished,
    }
    if limited is not None:
        meta["limits"] = limited.describe()
        meta["limits_counted"] = limited.report()
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(partial, ignore_errors=True)
    return out
