"""Two start-up sections of `benchmarks.run` (docs in benchmarks/README.md):

- ``firstrun`` (issue 36): what a user who installs the wheel waits for. A wheel is
  built the way `make wheel` builds it (numba's kernel cache of the quickstart compiled
  into it, setup.py), or taken from ``--wheel``; it is installed into a new virtual
  environment (`pip install`, the dependencies from the configured index or pip's
  cache); then, from an empty folder, ``gmmv init d`` and ``gmmv run
  d/configs/quickstart.yaml``, timed as a whole process: the first run. The same run
  again in the same environment is the reference (its kernels are then cached whatever
  the wheel shipped). Each repeat reinstalls the wheel (``--force-reinstall
  --no-deps``), so that every first run starts from the files pip put there.
- ``startup`` (issue 37 item 3): the time from starting ``gmmv run`` to its first step
  with a warm kernel cache, median of several runs: ``gmmv run CONFIG --set steps=1 -v``
  started as a process, timed until it prints ``simulated in`` (its one step is done and
  its record built; writing the store comes after and is timed apart, as the whole
  process). Reference: starting the same interpreter to ``import numba``, which no run
  can go below.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
FIRST_STEP_LINE = "simulated in"  # gmmv run -v, once the run (here: its one step) is done
STARTUP_REPEATS = 7
FIRSTRUN_TIMEOUT_S = 1800
# What a user's shell would not have: settings that would move numba's or the runners'
# cache elsewhere, or put the repository on the import path.
_CLEARED = ("NUMBA_CACHE_DIR", "GMMV_RUNNER_DIR", "PYTHONPATH", "NUMBA_DISABLE_JIT")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(extra)
    return env


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _timed(cmd, cwd, env, timeout=FIRSTRUN_TIMEOUT_S) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {proc.returncode}\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return wall, proc


def _agg(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# ---------------------------------------------------------------------------------
# firstrun
# ---------------------------------------------------------------------------------


def build_wheel(python: str, outdir: Path) -> tuple[Path, float]:
    """`make wheel`'s build: the wheel carrying the quickstart's kernel cache compiled
    by `python` (setup.py, GMMV_KERNEL_CACHE_PYTHON). Returns it and the build's wall s."""
    wall, _ = _timed([python, "-m", "build", "--wheel", "--outdir", str(outdir), str(ROOT)], ROOT,
                     _env(GMMV_KERNEL_CACHE_PYTHON=python))
    wheels = sorted(outdir.glob("gmm_volunteer-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"the build left {len(wheels)} wheels in {outdir}")
    return wheels[0], wall


def section_firstrun(python: str, repeats: int, wheel: Path | None = None) -> dict:
    """The first run after `pip install` (module docstring); one entry per repeat."""
    scratch = Path(tempfile.mkdtemp(prefix="gmmv-bench-firstrun-"))
    sec: dict = {"runs": [], "config": "configs/quickstart.yaml (as `gmmv init` writes it)"}
    try:
        if wheel is None:
            print("  building the wheel (make wheel's build) ...", end="", flush=True)
            wheel, sec["build_s"] = build_wheel(python, scratch / "dist")
            print(f" {sec['build_s']:.0f} s", flush=True)
        sec["wheel"] = wheel.name
        sec["wheel_mb"] = wheel.stat().st_size / 1e6
        venv = scratch / "venv"
        _timed([python, "-m", "venv", str(venv)], scratch, _env())
        pip, gmmv = venv / "bin" / "pip", venv / "bin" / "gmmv"
        print("  pip install (new virtual environment) ...", end="", flush=True)
        sec["install_s"], _ = _timed([str(pip), "install", "--quiet", str(wheel)], scratch, _env())
        print(f" {sec['install_s']:.0f} s", flush=True)
        for k in range(repeats):
            if k:  # the package's files as pip puts them, runtime caches gone with them
                _timed([str(pip), "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel)],
                       scratch, _env())
            work = scratch / f"user{k + 1}"
            work.mkdir()
            _timed([str(gmmv), "init", "d", "-q"], work, _env())
            cmd = [str(gmmv), "run", "d/configs/quickstart.yaml", "-q"]
            entry = {"load_before": _loadavg()}
            print(f"  first run {k + 1}/{repeats} ...", end="", flush=True)
            entry["first_s"], first = _timed(cmd, work, _env())
            entry["second_s"], _ = _timed(cmd + ["--force"], work, _env())
            entry["compiled_notice"] = "compiling" in first.stderr
            sec["runs"].append(entry)
            print(f" {entry['first_s']:.1f} s (the same run again: {entry['second_s']:.1f} s)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first, second = _agg(e["first_s"] for e in sec["runs"]), _agg(e["second_s"] for e in sec["runs"])
    sec["row"] = {"repeats": repeats, "ok": len(sec["runs"]),
                  "first_s_median": first["median"], "first_s_min": first["min"], "first_s_max": first["max"],
                  "second_s_median": second["median"],
                  "x_second": (first["median"] / second["median"]) if second["median"] else None,
                  "compiled": sum(e["compiled_notice"] for e in sec["runs"])}
    return sec


def render_firstrun(sec: dict, fmt, table) -> list[str]:
    r = sec["row"]
    build = f"built in {fmt(sec['build_s'], '.0f')} s, " if "build_s" in sec else "given, "
    return ["", f"First run after pip install ({sec['config']}; wheel {sec['wheel']}, {build}"
                f"{fmt(sec['wheel_mb'], '.1f')} MB; pip install {fmt(sec['install_s'], '.0f')} s; "
                "each repeat reinstalls the wheel)",
            table(["ok", "first run s", "min-max", "same run again s", "x again", "runs that compiled"],
                  [[f"{r['ok']}/{r['repeats']}", fmt(r["first_s_median"], ".1f"),
                    f"{fmt(r['first_s_min'], '.1f')}-{fmt(r['first_s_max'], '.1f')}",
                    fmt(r["second_s_median"], ".1f"), fmt(r["x_second"], ".2f"), str(r["compiled"])]])]


# ---------------------------------------------------------------------------------
# startup
# ---------------------------------------------------------------------------------


def _gmmv(python: str) -> list[str]:
    script = Path(python).parent / "gmmv"
    return [str(script)] if script.is_file() else [python, "-m", "gmm_volunteer.cli"]


def time_to_first_step(gmmv: list[str], config: str, out: Path) -> tuple[float, float]:
    """(s to the first step, s of the whole process) of ``gmmv run CONFIG --set steps=1``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(gmmv + ["run", config, "--set", "steps=1", "-v", "--force", "-o", str(out)],
                            cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    first, tail = None, []
    for line in proc.stderr:
        if first is None and FIRST_STEP_LINE in line:
            first = time.perf_counter() - t0
        tail = (tail + [line])[-20:]
    rc = proc.wait()
    total = time.perf_counter() - t0
    if rc != 0 or first is None:
        raise RuntimeError(f"gmmv run {config}: exit {rc}, no {FIRST_STEP_LINE!r} line\n{''.join(tail)}")
    return first, total


def section_startup(python: str, repeats: int = STARTUP_REPEATS, config: Path = QUICKSTART) -> dict:
    """Warm start-up of `gmmv run` (module docstring), round-robin with the reference."""
    gmmv = _gmmv(python)
    scratch = Path(tempfile.mkdtemp(prefix="gmmv-bench-startup-"))
    out = scratch / "run.zarr"
    rel = os.path.relpath(config, ROOT)
    runs = []
    try:
        print("  warm-up run (fills the kernel cache if needed) ...", flush=True)
        time_to_first_step(gmmv, str(config), out)
        for k in range(repeats):
            ref, _ = _timed([python, "-c", "import numba"], ROOT, _env())
            first, total = time_to_first_step(gmmv, str(config), out)
            runs.append({"first_step_s": first, "process_s": total, "import_numba_s": ref,
                         "load_before": _loadavg()})
            print(f"  {k + 1}/{repeats}: first step {first:.2f} s, process {total:.2f} s, "
                  f"import numba {ref:.2f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first, total = _agg(r["first_step_s"] for r in runs), _agg(r["process_s"] for r in runs)
    ref = _agg(r["import_numba_s"] for r in runs)
    row = {"config": rel, "repeats": repeats, "ok": len(runs),
           "first_step_s_median": first["median"], "first_step_s_min": first["min"],
           "first_step_s_max": first["max"], "process_s_median": total["median"],
           "import_numba_s_median": ref["median"],
           "x_import_numba": first["median"] / ref["median"] if ref["median"] else None}
    return {"runs": runs, "row": row}


def render_startup(sec: dict, fmt, table) -> list[str]:
    r = sec["row"]
    return ["", f"Start-up, warm kernel cache ({r['config']}, `gmmv run CONFIG --set steps=1 -v`: "
                f"from start to its '{FIRST_STEP_LINE}' line; process = with writing the store; "
                "reference: `python -c 'import numba'`; medians)",
            table(["ok", "first step s", "min-max", "process s", "import numba s", "x import numba"],
                  [[f"{r['ok']}/{r['repeats']}", fmt(r["first_step_s_median"], ".2f"),
                    f"{fmt(r['first_step_s_min'], '.2f')}-{fmt(r['first_step_s_max'], '.2f')}",
                    fmt(r["process_s_median"], ".2f"), fmt(r["import_numba_s_median"], ".2f"),
                    fmt(r["x_import_numba"], ".2f")]])]
