"""Benchmark runner: `python -m benchmarks.run` (also `make bench`).

Four sections (docs in benchmarks/README.md); every per-step cost is also given as a
ratio to the limit probe (benchmarks/probe.py) of the same population, measured in the
same bench run and round-robin with the runs (median over the repeats):

- compile: cold numba compilation, per scheduler: a tiny run with an empty numba cache
  directory, then the same run again with that (now filled) cache; the difference of
  their start-up phases is the compile time.
- main: 1,000 and 10,000 users x 100,000 steps for each scheduler on the default model
  bundle: median wall time over the repeats (min, max), steps/s, peak resident memory.
- large: 100,000 users for each scheduler, per-step cost over steps 2,000-4,000 (after
  the start-up transient).
- scaling: per-step cost for 100, 1k, 10k, 100k and 1M users (uniform scheduler; 20,000
  steps, 2,000 for 100k users, 300 for 1M), divided by the mean numbers of online users,
  active requests, active subtasks and consumption samples (active batches + running
  downloads), to show that the cost grows linearly with them; and the memory per
  registered user.

Every timed run is a fresh child process (`python -m benchmarks.one`); a failing child is
reported with its stderr and the runner goes on. Results: aligned text tables on stdout
and in ``<out>.txt``, everything (every run, machine info) in ``<out>.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from benchmarks.one import MARKER

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "configs" / "paper" / "base.yaml"
RESULTS_DIR = ROOT / "benchmarks" / "results"
FORMAT = "gmmv-bench"
FORMAT_VERSION = 1

SCHEDULERS = ("centralized", "uniform", "affinity")
SECTIONS = ("compile", "main", "large", "scaling", "closed")
MAIN_USERS = (1000, 10000)
MAIN_STEPS = 100_000
# The 100,000-user figure: a window of steps after the start-up transient.
LARGE_USERS_MAIN = 100_000
LARGE_STEPS, LARGE_WARMUP = 4_000, 2_000
# Timed steps of the limit probe (benchmarks/probe.py) per population: its per-step cost
# is stationary from the first step (stationary availability), so fewer steps suffice.
PROBE_STEPS = 20_000
PROBE_LARGE_STEPS = 2_000  # >= LARGE_USERS
PROBE_HUGE_STEPS = 300  # >= HUGE_USERS
SCALING_USERS = (100, 1000, 10000, 100000, 1000000)
SCALING_STEPS = 20_000
SCALING_LARGEST_STEPS = 2_000  # for the large populations (>= LARGE_USERS)
LARGE_USERS = 100_000
SCALING_HUGE_STEPS = 300  # for the huge ones (>= HUGE_USERS): memory and cost per step
HUGE_USERS = 1_000_000
SCALING_SCHEDULER = "uniform"
TINY_USERS, TINY_STEPS = 100, 2_000  # warm-up and compile runs

QUICK_MAIN_USERS = (1000,)
QUICK_MAIN_STEPS = 10_000
QUICK_SCALING_USERS = (100, 1000, 10000)
QUICK_SCALING_STEPS = 2_000
QUICK_PROBE_STEPS = 2_000

SHARED_NOTE = (
    "The machine may be shared: timings include interference from other processes. "
    "Compare load averages before comparing numbers."
)


# ---------------------------------------------------------------------------------
# Machine information
# ---------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """Read-only git query in the repository; None if git or the repository is absent."""
    try:
        p = subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict:
    status = _git("status", "--porcelain", "--untracked-files=no")
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "mem_total_mb": _mem_total_mb(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "llvmlite": _version("llvmlite"),
        "gmm_volunteer": _version("gmm-volunteer"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
    }


# ---------------------------------------------------------------------------------
# Child runs
# ---------------------------------------------------------------------------------


class Runner:
    def __init__(self, args):
        self.python = args.python
        self.config = str(Path(args.config).resolve())
        self.timeout = args.timeout or None
        self.failures: list[dict] = []
        self.n_children = 0

    def child(self, label: str, users: int, scheduler: str, steps: int,
              env_extra: dict | None = None, warmup: int = 1) -> dict:
        """One `benchmarks.one` child; returns its entry (``ok`` and ``result`` or error).
        `warmup` > 1: steps 2..warmup are left out of the timed phase."""
        overrides = [f"users.count={users}", f"scheduler={scheduler}", f"steps={steps}"]
        cmd = [self.python, "-m", "benchmarks.one", "--config", self.config]
        for o in overrides:
            cmd += ["--set", o]
        if warmup > 1:
            cmd += ["--warmup", str(warmup)]
        entry = {"label": label, "users": users, "scheduler": scheduler, "steps": steps,
                 "env": env_extra or {}, "load_before": _loadavg()}
        if warmup > 1:
            entry["warmup"] = warmup
        return self._run(cmd, entry, env_extra)

    def probe(self, label: str, users: int, steps: int) -> dict:
        """One `benchmarks.probe` child (the limit probe of `users` users, `steps` timed
        steps); its entry has scheduler "probe"."""
        cmd = [self.python, "-m", "benchmarks.probe", "--config", self.config,
               "--set", f"users.count={users}", "--steps", str(steps)]
        entry = {"label": label, "users": users, "scheduler": "probe", "steps": steps,
                 "env": {}, "load_before": _loadavg()}
        return self._run(cmd, entry, None)

    def _run(self, cmd: list[str], entry: dict, env_extra: dict | None) -> dict:
        users, scheduler, steps, label = entry["users"], entry["scheduler"], entry["steps"], entry["label"]
        env = dict(os.environ)
        env.update(env_extra or {})
        self.n_children += 1
        print(f"  {label}: users={users} scheduler={scheduler} steps={steps} ...", end="",
              flush=True)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=self.timeout)
            rc, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc = None
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
            stderr += f"\n[benchmarks.run] child killed after the {self.timeout} s timeout"
        entry["process_wall_s"] = time.perf_counter() - t0
        result = None
        for line in stdout.splitlines():
            if line.startswith(MARKER):
                try:
                    result = json.loads(line[len(MARKER):])
                except json.JSONDecodeError:
                    result = None
        if rc == 0 and result is not None:
            entry.update(ok=True, result=result)
            print(f" {result['run_s']:.2f} s run, {result['per_step_us']:,.1f} us/step, "
                  f"peak {result['peak_rss_mb']:.0f} MB", flush=True)
        else:
            tail = "\n".join(stderr.strip().splitlines()[-40:])
            entry.update(ok=False, returncode=rc, stderr_tail=tail)
            self.failures.append({k: entry[k] for k in
                                  ("label", "users", "scheduler", "steps", "returncode",
                                   "stderr_tail")})
            print(f" FAILED ({'timed out' if rc is None else f'exit {rc}'})", flush=True)
            print("    | " + tail.replace("\n", "\n    | "), file=sys.stderr, flush=True)
        return entry

    def warm_up(self, schedulers) -> list[dict]:
        """A tiny run per scheduler so that timed runs load compiled kernels from the
        normal numba cache (and recompile here, not there, after a source change)."""
        return [self.child("warm-up", TINY_USERS, s, TINY_STEPS) for s in schedulers]


def _ok(entries) -> list[dict]:
    return [e["result"] for e in entries if e.get("ok")]


def _agg(results: list[dict], key: str) -> dict:
    vals = [r[key] for r in results if r.get(key) is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def _ratio(a, b):
    return a / b if (a is not None and b) else None


# ---------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------


def section_compile(R: Runner, schedulers, repeats: int) -> dict:
    runs, rows = [], []
    for s in schedulers:
        pairs = []
        for k in range(repeats):
            tmp = tempfile.mkdtemp(prefix="gmmv-bench-numba-")
            try:
                env = {"NUMBA_CACHE_DIR": tmp}
                cold = R.child(f"compile {s} cold {k + 1}/{repeats}", TINY_USERS, s, TINY_STEPS, env)
                warm = (R.child(f"compile {s} warm {k + 1}/{repeats}", TINY_USERS, s, TINY_STEPS, env)
                        if cold.get("ok") else None)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for e in (cold, warm):
                if e is not None:
                    e["env"] = {"NUMBA_CACHE_DIR": "<empty temporary directory>"}
            runs += [e for e in (cold, warm) if e is not None]
            if cold.get("ok") and warm is not None and warm.get("ok"):
                c, w = cold["result"], warm["result"]
                start_c = c["construct_s"] + c["first_step_s"]
                start_w = w["construct_s"] + w["first_step_s"]
                pairs.append({"compile_s": start_c - start_w, "cold_startup_s": start_c,
                              "warm_startup_s": start_w, "cold_total_s": c["total_s"],
                              "warm_total_s": w["total_s"], "cold_peak_rss_mb": c["peak_rss_mb"]})
        row = {"scheduler": s, "users": TINY_USERS, "steps": TINY_STEPS,
               "repeats": repeats, "ok": len(pairs)}
        for key in ("compile_s", "cold_startup_s", "warm_startup_s", "cold_total_s",
                    "warm_total_s", "cold_peak_rss_mb"):
            a = _agg(pairs, key)
            row[f"{key}_median"] = a["median"]
            if key == "compile_s":
                row["compile_s_min"], row["compile_s_max"] = a["min"], a["max"]
        rows.append(row)
    return {"runs": runs, "rows": rows}


def _summarize(entries: list[dict], users: int, scheduler: str, steps: int) -> dict:
    mine = [e for e in entries
            if (e["users"], e["scheduler"], e["steps"]) == (users, scheduler, steps)]
    res = _ok(mine)
    row = {"users": users, "scheduler": scheduler, "steps": steps, "repeats": len(mine),
           "ok": len(res)}
    for key in ("run_s", "steps_per_s", "per_step_us", "per_step_cpu_us", "construct_s",
                "first_step_s", "import_s", "total_s", "peak_rss_mb", "rss_after_import_mb"):
        a = _agg(res, key)
        row[f"{key}_median"] = a["median"]
        if key in ("run_s", "per_step_us", "peak_rss_mb"):
            row[f"{key}_min"], row[f"{key}_max"] = a["min"], a["max"]
    # The trajectory is the same in every repeat (fixed seed); take the first.
    # Fields added in later versions (sampling) are None for children that lack them.
    for key in ("mean_online_users", "mean_active_requests", "mean_active_subtasks",
                "mean_active_batches", "mean_running_downloads", "sample_every",
                "subtask_starts", "requests_ended", "model_provisional"):
        row[key] = res[0].get(key) if res else None
    return row


def probe_steps(users: int, quick: bool = False) -> int:
    """Timed steps of the limit probe of a population."""
    if users >= HUGE_USERS:
        return PROBE_HUGE_STEPS
    if users >= LARGE_USERS:
        return PROBE_LARGE_STEPS
    return QUICK_PROBE_STEPS if quick else PROBE_STEPS


def probe_rows(probes: list[dict]) -> dict[int, dict]:
    """Per population: the median (min, max) of its probes' per-step costs."""
    out = {}
    for u in sorted({e["users"] for e in probes}):
        res = _ok([e for e in probes if e["users"] == u])
        row = {"users": u, "repeats": sum(1 for e in probes if e["users"] == u), "ok": len(res),
               "steps": res[0]["steps"] if res else None,
               "mean_online_users": res[0]["mean_online_users"] if res else None}
        for key in ("per_step_us", "per_step_cpu_us", "peak_rss_mb"):
            a = _agg(res, key)
            row[f"{key}_median"] = a["median"]
            row[f"{key}_min"], row[f"{key}_max"] = a["min"], a["max"]
        out[u] = row
    return out


def add_probe_ratios(rows: list[dict], probes: dict[int, dict]) -> None:
    """Each row's median per-step cost over the median probe of its population (wall
    and process CPU time): how far the run is from the arithmetic it cannot avoid."""
    for r in rows:
        p = probes.get(r["users"])
        r["probe_us_median"] = p["per_step_us_median"] if p else None
        r["probe_cpu_us_median"] = p["per_step_cpu_us_median"] if p else None
        r["x_probe"] = _ratio(r["per_step_us_median"], r["probe_us_median"])
        r["cpu_x_probe"] = _ratio(r["per_step_cpu_us_median"], r["probe_cpu_us_median"])


def _round_robin(R: Runner, name: str, jobs: list, repeats: int) -> list[dict]:
    """Run `jobs` (callables taking a label) `repeats` times, round-robin, so that a burst
    of load on a shared machine spreads over all of them instead of hitting one."""
    runs = []
    n = len(jobs) * repeats
    for k in range(repeats):
        for i, job in enumerate(jobs):
            runs.append(job(f"{name} {k * len(jobs) + i + 1}/{n}"))
    return runs


def section_main(R: Runner, schedulers, users_list, steps: int, repeats: int,
                 quick: bool = False) -> dict:
    warm = R.warm_up(schedulers)
    combos = [(u, s) for u in users_list for s in schedulers]
    jobs = [lambda label, u=u, s=s: R.child(label, u, s, steps) for u, s in combos]
    jobs += [lambda label, u=u: R.probe(label, u, probe_steps(u, quick)) for u in users_list]
    every = _round_robin(R, "main", jobs, repeats)
    runs = [e for e in every if e["scheduler"] != "probe"]
    probes = [e for e in every if e["scheduler"] == "probe"]
    rows = [_summarize(runs, u, s, steps) for u, s in combos]
    prow = probe_rows(probes)
    add_probe_ratios(rows, prow)
    return {"warm_up": warm, "runs": runs, "probe_runs": probes,
            "probes": list(prow.values()), "rows": rows}


def section_large(R: Runner, schedulers, users: int, steps: int, warmup: int,
                  repeats: int) -> dict:
    """`users` users per scheduler, per-step cost over steps warmup..steps."""
    warm = R.warm_up(schedulers)
    jobs = [lambda label, s=s: R.child(label, users, s, steps, warmup=warmup) for s in schedulers]
    jobs.append(lambda label: R.probe(label, users, probe_steps(users)))
    every = _round_robin(R, "large", jobs, repeats)
    runs = [e for e in every if e["scheduler"] != "probe"]
    probes = [e for e in every if e["scheduler"] == "probe"]
    rows = [_summarize(runs, users, s, steps) for s in schedulers]
    for r in rows:
        r["warmup"] = warmup
    prow = probe_rows(probes)
    add_probe_ratios(rows, prow)
    return {"warm_up": warm, "runs": runs, "probe_runs": probes,
            "probes": list(prow.values()), "rows": rows}


def _loglog_slope(xs, ys) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys)
           if x is not None and y is not None and x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _samples(row: dict) -> float | None:
    """Mean consumption samples per step: active batches + running downloads, each of
    which step_consumption samples an ARMA consumption for (paper 2.2)."""
    b, d = row.get("mean_active_batches"), row.get("mean_running_downloads")
    return None if b is None or d is None else b + d


def kb_per_user(row: dict) -> float | None:
    """Peak resident memory above the imported interpreter, in KiB per registered user."""
    peak, base = row.get("peak_rss_mb_median"), row.get("rss_after_import_mb_median")
    if peak is None or base is None or not row.get("users"):
        return None
    return (peak - base) * 1024.0 / row["users"]


def section_scaling(R: Runner, scheduler: str, users_list, steps: int, large_steps: int,
                    repeats: int, quick: bool = False) -> dict:
    warm = R.warm_up([scheduler])
    plan = [(u, min(large_steps, SCALING_HUGE_STEPS) if u >= HUGE_USERS
             else large_steps if u >= LARGE_USERS else steps) for u in users_list]
    jobs = [lambda label, u=u, n=n: R.child(label, u, scheduler, n) for u, n in plan]
    jobs += [lambda label, u=u: R.probe(label, u, probe_steps(u, quick)) for u, _ in plan]
    every = _round_robin(R, "scaling", jobs, repeats)
    runs = [e for e in every if e["scheduler"] != "probe"]
    probes = [e for e in every if e["scheduler"] == "probe"]
    out = scaling_rows(runs, scheduler, plan)
    prow = probe_rows(probes)
    add_probe_ratios(out["rows"], prow)
    return {"warm_up": warm, "runs": runs, "probe_runs": probes,
            "probes": list(prow.values()), **out}


def scaling_rows(runs: list[dict], scheduler: str, plan) -> dict:
    """The scaling table's rows and fit from its child runs; `plan` = [(users, steps)]."""
    rows = []
    prev = None
    for u, n in plan:
        row = _summarize(runs, u, scheduler, n)
        us = row["per_step_us_median"]
        row["us_per_online_user"] = _ratio(us, row["mean_online_users"])
        row["us_per_active_request"] = _ratio(us, row["mean_active_requests"])
        row["us_per_active_subtask"] = _ratio(us, row["mean_active_subtasks"])
        row["mean_samples"] = _samples(row)
        row["us_per_sample"] = _ratio(us, row["mean_samples"])
        row["cpu_us_per_sample"] = _ratio(row["per_step_cpu_us_median"], row["mean_samples"])
        row["kb_per_user"] = kb_per_user(row)
        # Marginal cost: extra microseconds per extra online user relative to the
        # previous row (removes the constant per-step overhead of small populations).
        row["marginal_us_per_online_user"] = None
        if prev is not None and us is not None and prev["per_step_us_median"] is not None:
            d_on = (row["mean_online_users"] or 0) - (prev["mean_online_users"] or 0)
            if d_on > 0:
                row["marginal_us_per_online_user"] = (us - prev["per_step_us_median"]) / d_on
        # Likewise for memory: the kernels, bundle and record buffers of a small run
        # dominate its KB/user; the extra memory per extra registered user does not
        # contain them.
        row["marginal_kb_per_user"] = None
        if (prev is not None and row["users"] > prev["users"]
                and row["peak_rss_mb_median"] is not None
                and prev["peak_rss_mb_median"] is not None):
            row["marginal_kb_per_user"] = ((row["peak_rss_mb_median"] - prev["peak_rss_mb_median"])
                                           * 1024.0 / (row["users"] - prev["users"]))
        rows.append(row)
        prev = row
    us = [r["per_step_us_median"] for r in rows]
    fit = {
        "slope_vs_online_users": _loglog_slope([r["mean_online_users"] for r in rows], us),
        "slope_vs_active_requests": _loglog_slope([r["mean_active_requests"] for r in rows], us),
        "slope_vs_active_subtasks": _loglog_slope([r["mean_active_subtasks"] for r in rows], us),
        "slope_vs_samples": _loglog_slope([r["mean_samples"] for r in rows], us),
        "note": "least-squares slope of log(us/step) against log(mean count) over the rows; "
                "1 = linear growth; a constant per-step overhead pulls it below 1 at small sizes",
    }
    return {"rows": rows, "fit": fit}


# ---------------------------------------------------------------------------------
# Text tables
# ---------------------------------------------------------------------------------


def _fmt(x, spec: str = ",.0f") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def _range(lo, hi, spec: str) -> str:
    return "-" if lo is None or hi is None else f"{_fmt(lo, spec)}-{_fmt(hi, spec)}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _probe_lines(sec: dict) -> list[str]:
    """The probes of a section: median (min-max) per population."""
    probes = sec.get("probes") or []
    if not probes:
        return []
    cells = [f"{_fmt(p['users'])} users {_fmt(p['per_step_us_median'], '.1f')} "
             f"({_range(p['per_step_us_min'], p['per_step_us_max'], '.1f')}) us/step, "
             f"{p['ok']}/{p['repeats']} x {_fmt(p['steps'])} steps"
             for p in probes]
    return ["limit probe (benchmarks/probe.py), median (min-max): " + "; ".join(cells)]


def render(doc: dict) -> str:
    m = doc["machine"]
    parts = [
        f"gmm-volunteer benchmarks  {doc['created']}  ({doc['settings']['mode']})",
        f"host {m['host']}: {m['cpu_model']}, {m['cpus_usable']}/{m['cpu_count']} cpus, "
        f"{_fmt(m['mem_total_mb'])} MB; Python {m['python']}, numpy {m['numpy']}, "
        f"numba {m['numba']}",
        f"commit {m['git_commit'] or '?'}{' (uncommitted changes)' if m['git_dirty'] else ''}",
        f"load average (1, 5, 15 min): start {doc['load_start']}, end {doc.get('load_end')}",
        SHARED_NOTE,
    ]
    secs = doc["sections"]
    if "compile" in secs:
        rows = [[r["scheduler"], f"{r['ok']}/{r['repeats']}", _fmt(r["compile_s_median"], ".1f"),
                 _range(r["compile_s_min"], r["compile_s_max"], ".1f"),
                 _fmt(r["cold_startup_s_median"], ".2f"), _fmt(r["warm_startup_s_median"], ".2f"),
                 _fmt(r["cold_peak_rss_mb_median"])]
                for r in secs["compile"]["rows"]]
        parts += ["", f"Compile (tiny run: {TINY_USERS} users x {TINY_STEPS:,} steps; "
                      "empty numba cache, then the filled one)",
                  table(["scheduler", "ok", "compile s", "min-max", "cold start s",
                         "warm start s", "cold peak MB"], rows)]
    if "main" in secs:
        rows = []
        for r in secs["main"]["rows"]:
            rows.append([
                _fmt(r["users"]), r["scheduler"], _fmt(r["steps"]), f"{r['ok']}/{r['repeats']}",
                _fmt(r["run_s_median"], ".2f"),
                _range(r["run_s_min"], r["run_s_max"], ".2f"),
                _fmt(r["steps_per_s_median"]), _fmt(r["per_step_us_median"], ".1f"),
                _fmt(r["construct_s_median"], ".2f"), _fmt(r["first_step_s_median"], ".2f"),
                _fmt(r["peak_rss_mb_median"]), _fmt(r["mean_online_users"], ".1f"),
                _fmt(r["mean_active_requests"], ".1f"), _fmt(r["mean_active_subtasks"], ".1f"),
                _fmt(r.get("probe_us_median"), ".1f"), _fmt(r.get("x_probe"), ".2f"),
                _fmt(r.get("cpu_x_probe"), ".2f"),
            ])
        parts += ["", "Main (median over repeats; run = steps 2..N incl. the run record; "
                      "x probe = us/step / the limit probe's us/step for the same users, "
                      "medians of this bench run; cpu x probe: the same in process CPU time)",
                  table(["users", "scheduler", "steps", "ok", "run s", "min-max", "steps/s",
                         "us/step", "build s", "1st step s", "peak MB", "online", "requests",
                         "subtasks", "probe us/step", "x probe", "cpu x probe"], rows)]
        parts += _probe_lines(secs["main"])
    if "large" in secs:
        rows = []
        for r in secs["large"]["rows"]:
            rows.append([
                _fmt(r["users"]), r["scheduler"], f"{_fmt(r.get('warmup'))}-{_fmt(r['steps'])}",
                f"{r['ok']}/{r['repeats']}", _fmt(r["per_step_us_median"], ".1f"),
                _range(r["per_step_us_min"], r["per_step_us_max"], ".1f"),
                _fmt(r["per_step_cpu_us_median"], ".1f"), _fmt(r["peak_rss_mb_median"]),
                _fmt(r["mean_online_users"], ".1f"), _fmt(r["mean_active_requests"], ".1f"),
                _fmt(_samples(r), ".1f"),
                _fmt(r.get("probe_us_median"), ".1f"), _fmt(r.get("x_probe"), ".2f"),
                _fmt(r.get("cpu_x_probe"), ".2f"),
            ])
        parts += ["", "Large (median over repeats; per-step cost over the steps shown, after "
                      "the start-up transient; samples = active batches + running downloads)",
                  table(["users", "scheduler", "steps timed", "ok", "us/step", "min-max",
                         "cpu us/step", "peak MB", "online", "requests", "samples",
                         "probe us/step", "x probe", "cpu x probe"], rows)]
        parts += _probe_lines(secs["large"])
    if "scaling" in secs:
        sc = secs["scaling"]
        rows = []
        for r in sc["rows"]:
            rows.append([
                _fmt(r["users"]), _fmt(r["steps"]), f"{r['ok']}/{r['repeats']}",
                _fmt(r["per_step_us_median"], ".1f"), _fmt(r["mean_online_users"], ".1f"),
                _fmt(r["mean_active_requests"], ".1f"), _fmt(r["mean_active_subtasks"], ".1f"),
                _fmt(r["us_per_online_user"], ".3f"), _fmt(r["us_per_active_request"], ".3f"),
                _fmt(r["us_per_active_subtask"], ".3f"),
                _fmt(r["marginal_us_per_online_user"], ".3f"), _fmt(r.get("mean_samples"), ".1f"),
                _fmt(r.get("us_per_sample"), ".3f"), _fmt(r.get("per_step_cpu_us_median"), ".1f"),
                _fmt(r.get("cpu_us_per_sample"), ".3f"),
                _fmt(r["peak_rss_mb_median"]), _fmt(r.get("kb_per_user"), ".2f"),
                _fmt(r.get("marginal_kb_per_user"), ".2f"),
                _fmt(r.get("probe_us_median"), ".1f"), _fmt(r.get("x_probe"), ".2f"),
                _fmt(r.get("cpu_x_probe"), ".2f"),
            ])
        f = sc["fit"]
        sched = sc["rows"][0]["scheduler"] if sc["rows"] else "?"
        every = {r.get("sample_every") for r in sc["rows"]} - {None}
        parts += ["", f"Scaling ({sched} scheduler; per-step cost and its ratio to the mean "
                      "online users, active requests, active subtasks and consumption "
                      "samples = active batches + running downloads"
                      + (f", sampled every {'/'.join(map(str, sorted(every)))} steps"
                         if every else "") + ")",
                  table(["users", "steps", "ok", "us/step", "online", "requests", "subtasks",
                         "us/online", "us/request", "us/subtask", "marginal us/online",
                         "samples", "us/sample", "cpu us/step", "cpu us/sample", "peak MB",
                         "KB/user", "marginal KB/user", "probe us/step", "x probe",
                         "cpu x probe"], rows),
                  "log-log slope of us/step (1 = linear): vs online users "
                  f"{_fmt(f['slope_vs_online_users'], '.2f')}, vs active requests "
                  f"{_fmt(f['slope_vs_active_requests'], '.2f')}, vs active subtasks "
                  f"{_fmt(f['slope_vs_active_subtasks'], '.2f')}, vs samples "
                  f"{_fmt(f.get('slope_vs_samples'), '.2f')}",
                  "KB/user = (peak MB - MB after import) / users; marginal KB/user = "
                  "extra peak MB per extra user relative to the row above (KiB)"]
        parts += _probe_lines(sc)
    if "closed" in secs:
        from benchmarks import closed_network

        parts += ["", closed_network.render(secs["closed"])]
    prov = [r.get("model_provisional") for s in secs.values() for r in s.get("rows", [])]
    if any(prov):
        parts += ["", "Model bundle: the default bundle is marked provisional; numbers will "
                      "move when it is replaced by a fitted one."]
    if doc["failures"]:
        parts += ["", f"FAILED child runs: {len(doc['failures'])} (stderr in the JSON file)"]
        parts += [f"  {f['label']}: users={f['users']} scheduler={f['scheduler']} "
                  f"steps={f['steps']} "
                  f"{'timed out' if f['returncode'] is None else 'exit ' + str(f['returncode'])}"
                  for f in doc["failures"]]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def _name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def default_out(quick: bool, now: _dt.datetime) -> Path:
    host = socket.gethostname().split(".")[0] or "host"
    stem = f"{now:%Y-%m-%d}-{host}{'-quick' if quick else ''}"
    p = RESULTS_DIR / f"{stem}.json"
    if p.exists():
        p = RESULTS_DIR / f"{stem}-{now:%H%M%S}.json"
    return p


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Time the simulator: compile time, main table, large populations, "
                    "scaling table, each per-step cost against the limit probe.")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed runs per configuration; the median is reported (default 3, "
                         "--quick: 1)")
    ap.add_argument("--compile-repeats", type=int, default=None,
                    help="cold-compile runs per scheduler (default 1)")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke check: {QUICK_MAIN_USERS[0]:,} users x {QUICK_MAIN_STEPS:,} "
                         f"steps, scaling {'/'.join(map(str, QUICK_SCALING_USERS))} users x "
                         f"{QUICK_SCALING_STEPS:,} steps, 1 repeat, no compile section "
                         "(add it with --only compile,main,scaling)")
    ap.add_argument("--only", type=_name_list, default=None, metavar="SECTIONS",
                    help="comma-separated subset of: compile, main, large, scaling, closed")
    ap.add_argument("--steps", type=int, default=None,
                    help=f"steps of the main runs (default {MAIN_STEPS:,})")
    ap.add_argument("--users", type=_int_list, default=None, metavar="N,N",
                    help=f"users of the main runs (default {','.join(map(str, MAIN_USERS))})")
    ap.add_argument("--schedulers", type=_name_list, default=None, metavar="A,B",
                    help=f"schedulers of the main and compile sections (default "
                         f"{','.join(SCHEDULERS)})")
    ap.add_argument("--scaling-users", type=_int_list, default=None, metavar="N,N",
                    help=f"users of the scaling rows (default "
                         f"{','.join(map(str, SCALING_USERS))})")
    ap.add_argument("--scaling-steps", type=int, default=None,
                    help=f"steps of the scaling rows (default {SCALING_STEPS:,}; "
                         f"{SCALING_LARGEST_STEPS:,} for {LARGE_USERS:,}+ users, "
                         f"{SCALING_HUGE_STEPS:,} for {HUGE_USERS:,}+)")
    ap.add_argument("--scaling-scheduler", default=SCALING_SCHEDULER)
    ap.add_argument("--large-users", type=int, default=LARGE_USERS_MAIN,
                    help=f"users of the large section (default {LARGE_USERS_MAIN:,})")
    ap.add_argument("--large-steps", type=int, default=LARGE_STEPS,
                    help=f"steps of the large runs (default {LARGE_STEPS:,})")
    ap.add_argument("--large-warmup", type=int, default=LARGE_WARMUP,
                    help=f"untimed steps before the large runs' timed window "
                         f"(default {LARGE_WARMUP:,})")
    ap.add_argument("--config", default=str(DEFAULT_CONFIG),
                    help="base run config (default configs/paper/base.yaml)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON result path (default benchmarks/results/<date>-<host>.json); "
                         "the text tables go next to it with suffix .txt")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds after which a child run is killed and reported (0 = none)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child runs")
    args = ap.parse_args(argv)

    if args.only:
        bad = [s for s in args.only if s not in SECTIONS]
        if bad:
            ap.error(f"--only: unknown section(s) {', '.join(bad)}; known: {', '.join(SECTIONS)}")
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    q = args.quick
    given = (args.only, args.users, args.steps, args.schedulers, args.scaling_users,
             args.scaling_steps, args.repeats, args.compile_repeats)
    if args.large_steps <= args.large_warmup or args.large_warmup < 1:
        ap.error("need 1 <= --large-warmup < --large-steps")
    if (args.large_users, args.large_steps, args.large_warmup) != (LARGE_USERS_MAIN, LARGE_STEPS, LARGE_WARMUP):
        given += (True,)
    args.mode = ("quick" if q else "full") + (
        "+custom" if any(x is not None for x in given) or args.scaling_scheduler != SCALING_SCHEDULER
        else "")
    # A cold compile takes minutes per scheduler: --quick leaves it out unless --only asks.
    args.sections = args.only or [x for x in SECTIONS if not (q and x in ("compile", "large"))]
    args.repeats = args.repeats or (1 if q else 3)
    args.compile_repeats = args.compile_repeats or 1
    args.schedulers = args.schedulers or list(SCHEDULERS)
    args.users = args.users or list(QUICK_MAIN_USERS if q else MAIN_USERS)
    args.steps = args.steps or (QUICK_MAIN_STEPS if q else MAIN_STEPS)
    args.scaling_users = args.scaling_users or list(QUICK_SCALING_USERS if q else SCALING_USERS)
    args.scaling_steps = args.scaling_steps or (QUICK_SCALING_STEPS if q else SCALING_STEPS)
    args.scaling_large_steps = min(args.scaling_steps, SCALING_LARGEST_STEPS)
    for n in (args.steps, args.scaling_steps, args.scaling_large_steps):
        if n < 2:
            ap.error("steps must be >= 2")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    now = _dt.datetime.now(_dt.timezone.utc)
    out = (args.out if args.out is not None else default_out(args.quick, now)).resolve()
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "settings": {
            "mode": args.mode, "quick": args.quick, "sections": args.sections, "repeats": args.repeats,
            "compile_repeats": args.compile_repeats, "schedulers": args.schedulers,
            "main_users": args.users,
            "main_steps": args.steps, "scaling_users": args.scaling_users,
            "scaling_steps": args.scaling_steps, "scaling_large_steps": args.scaling_large_steps,
            "scaling_large_users": LARGE_USERS, "scaling_huge_users": HUGE_USERS,
            "scaling_huge_steps": SCALING_HUGE_STEPS, "scaling_scheduler": args.scaling_scheduler,
            "large_users": args.large_users, "large_steps": args.large_steps,
            "large_warmup": args.large_warmup,
            "probe_steps": {"default": PROBE_STEPS, "quick": QUICK_PROBE_STEPS,
                            "large": PROBE_LARGE_STEPS, "huge": PROBE_HUGE_STEPS},
            "config": os.path.relpath(Path(args.config).resolve(), ROOT),
            "tiny_run": {"users": TINY_USERS, "steps": TINY_STEPS},
        },
        "machine": machine_info(),
        "shared_machine_note": SHARED_NOTE,
        "load_start": _loadavg(),
        "sections": {},
        "failures": [],
    }
    print(f"gmm-volunteer benchmarks -> {out}")
    print(f"load average at start: {doc['load_start']} on {doc['machine']['cpus_usable']} cpus. "
          + SHARED_NOTE, flush=True)
    R = Runner(args)
    t0 = time.perf_counter()
    interrupted = False
    try:
        if "compile" in args.sections:
            print("compile:", flush=True)
            doc["sections"]["compile"] = section_compile(R, args.schedulers,
                                                         args.compile_repeats)
        if "main" in args.sections:
            print("main:", flush=True)
            doc["sections"]["main"] = section_main(R, args.schedulers, args.users, args.steps,
                                                   args.repeats, args.quick)
        if "large" in args.sections:
            print("large:", flush=True)
            doc["sections"]["large"] = section_large(R, args.schedulers, args.large_users,
                                                     args.large_steps, args.large_warmup,
                                                     args.repeats)
        if "scaling" in args.sections:
            print("scaling:", flush=True)
            doc["sections"]["scaling"] = section_scaling(
                R, args.scaling_scheduler, args.scaling_users, args.scaling_steps,
                args.scaling_large_steps, args.repeats, args.quick)
        if "closed" in args.sections:  # the closed network against an event-driven reference
            from benchmarks import closed_network

            print("closed:", flush=True)
            doc["sections"]["closed"] = closed_network.section(
                closed_network.QUICK_USERS if args.quick else closed_network.USERS,
                closed_network.QUICK_HORIZON_S if args.quick else closed_network.HORIZON_S,
                args.repeats, processes=not args.quick)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; writing the sections that finished", file=sys.stderr)
    doc["interrupted"] = interrupted
    doc["load_end"] = _loadavg()
    doc["elapsed_s"] = time.perf_counter() - t0
    doc["child_runs"] = R.n_children
    doc["failures"] = R.failures

    text = render(doc)
    print()
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".txt").write_text(text + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.txt')} ({doc['elapsed_s']:.0f} s, "
          f"{R.n_children} child runs)")
    return 1 if (R.failures or interrupted) else 0


if __name__ == "__main__":
    raise SystemExit(main())
