"""Sweeps: a base config expanded over a grid and replicate seeds (docs/experiments.md).

A grid file names a base run config, dotted keys with value lists, seeds and an output
directory. `load_grid` validates it and every expanded config before anything runs.
`run_sweep` executes the runs that do not yet have a complete store, on an existing Dask
cluster (``address``), on a local Dask cluster (default: one single-threaded worker per
core) or in this process (``serial``), and writes each run through
`results.write_result`, so an interrupted sweep never leaves a store that looks complete.

Every run of one replicate uses the same seed whatever its scheduler or capacities
(common random numbers, DESIGN.md section 4), so differences between grid points on the
same seed are paired.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gmm_volunteer.io.results import is_complete, is_own_store, store_attrs, write_result
from gmm_volunteer.io.sweepdir import COMBINED, MANIFEST, RUNS_DIR, read_manifest  # noqa: F401

# Grid keys the paper sweeps get short dimension names; others use the key with '_'.
DIM_NAMES = {
    "users.count": "users",
    "users.capacity": "user_capacity",
    "server.capacity": "server_capacity",
    "scheduler": "scheduler",
}
GRID_KEYS = ("base", "grid", "seeds", "output", "set", "per_value", "description")
FAILED_DIR = "failed"


class GridError(ValueError):
    """A grid file is invalid; the message names the file and the key."""


class StaleRunsError(GridError):
    """Complete stores in the output directory were made by another run than the one the
    sweep would do now (another version, config or model bundle)."""


class SchedulerUnreachable(ConnectionError):
    """The Dask scheduler given by address does not answer."""


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its grid coordinates, config and result store path."""

    name: str
    coords: dict  # dim name -> value (seed included)
    overrides: dict  # dotted key -> value applied to the base config
    path: Path
    config: Any  # RunConfig


@dataclass
class Grid:
    source: Path
    base: Path
    base_data: dict
    dims: dict  # dim name -> (dotted key, list of values), in grid order
    seeds: list
    output: Path
    fixed: dict = field(default_factory=dict)  # `set:` overrides for every run
    # `per_value:` grid key -> value (as text) -> overrides for the runs with that value
    per_value: dict = field(default_factory=dict)
    description: str = ""

    @property
    def dim_names(self) -> list[str]:
        return [*self.dims, "seed"]

    @property
    def shape(self) -> tuple[int, ...]:
        return (*(len(v) for _, v in self.dims.values()), len(self.seeds))

    def coords(self) -> dict:
        out = {name: list(values) for name, (_, values) in self.dims.items()}
        out["seed"] = list(self.seeds)
        return out

    def runs(self) -> list[RunSpec]:
        """Every run, in grid order (last dimension, the seed, fastest). Validates configs."""
        from gmm_volunteer.run.config import ConfigError, apply_overrides, config_from_dict

        specs = []
        keys = [key for key, _ in self.dims.values()]
        names = list(self.dims)
        combos = list(itertools.product(*(v for _, v in self.dims.values()), self.seeds))
        all_coords = [{**dict(zip(names, combo[:-1])), "seed": combo[-1]} for combo in combos]
        run_names = unique_run_names(all_coords)
        for combo, coords, name in zip(combos, all_coords, run_names):
            *values, seed = combo
            path = self.output / RUNS_DIR / f"{name}.zarr"
            overrides = dict(self.fixed)
            overrides.update(zip(keys, values))
            for key, value in zip(keys, values):  # e.g. the options that go with a policy
                overrides.update(self.per_value.get(key, {}).get(_value_text(value), {}))
            overrides["seed"] = seed
            overrides["output.path"] = str(path)
            where = f"{self.source} (run {name})"
            try:
                data = apply_overrides(self.base_data, overrides, where)
                cfg = config_from_dict(data, source=where, base_dir=self.base.parent)
            except ConfigError as exc:
                raise GridError(str(exc) + _per_value_hint(str(exc), keys, values)) from None
            specs.append(RunSpec(name=name, coords=coords, overrides=overrides, path=path, config=cfg))
        return specs


def _per_value_hint(message: str, keys, values) -> str:
    """When a grid varies a policy and a run fails on an option of it, how to give
    options to one value of the grid key only (`per_value:`)."""
    for key, value in zip(keys, values):
        if key in ("scheduler", "executor", "autoscaler") and f"{key}_options." in message:
            return (f"\n(the grid varies {key}, and {value!r} does not take that option: put options of "
                    f"one {key} under per_value: {{{key}: {{NAME: {{{key}_options.KEY: VALUE}}}}}} "
                    "instead of the base config or set:; "
                    "docs/experiments.md, section 1)")
    return ""


def dim_name(key: str) -> str:
    return DIM_NAMES.get(key, key.replace(".", "_"))


def _fmt_value(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    text = f"{v:g}" if isinstance(v, float) else str(v)
    return re.sub(r"[^A-Za-z0-9.+-]", "-", text)


def run_name(coords: dict) -> str:
    """Store name of a run, e.g. ``users-1000_user_capacity-2_..._seed-0``."""
    return "_".join(f"{k}-{_fmt_value(v)}" for k, v in coords.items())


def unique_run_names(all_coords: list[dict]) -> list[str]:
    """`run_name` of each run, unless two distinct points would share a name (values that
    agree to the 6 digits of ``%g``, or texts that differ only in replaced characters):
    then the names of this grid carry exact values (``repr`` of floats), and where even
    those collide, a digest of the point. Grids without collisions keep their names."""
    names = [run_name(c) for c in all_coords]
    if len(set(names)) == len(names):
        return names
    exact = [run_name({k: repr(v) if isinstance(v, float) else v for k, v in c.items()}) for c in all_coords]
    if len(set(exact)) == len(exact):
        return exact
    counts: dict = {}
    for n in exact:
        counts[n] = counts.get(n, 0) + 1
    return [n if counts[n] == 1 else
            f"{n}_{hashlib.sha256(json.dumps(c, sort_keys=True, default=repr).encode()).hexdigest()[:12]}"
            for n, c in zip(exact, all_coords)]


def _value_text(v) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)


def _per_value(data, grid: dict, fixed: dict, source: str) -> dict:
    """Validate ``per_value:``: grid key -> value of that key -> {dotted key: value},
    overrides applied to the runs with that value (a policy's options, which another
    policy of the same grid dimension would reject)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GridError(f"{source}: per_value: must be a mapping of grid keys to "
                        "{value: {dotted key: value}} mappings")
    out = {}
    for key, by_value in data.items():
        where = f"{source}: per_value.{key}"
        if key not in grid:
            from gmm_volunteer.model.suggest import did_you_mean

            raise GridError(f"{where}: not a grid key{did_you_mean(str(key), map(str, grid))} "
                            f"(grid keys: {', '.join(map(str, grid))})")
        if not isinstance(by_value, dict):
            raise GridError(f"{where}: must be a mapping of the key's values to overrides")
        known = {_value_text(v) for v in grid[key]}
        out[key] = {}
        for value, sets in by_value.items():
            if _value_text(value) not in known:
                raise GridError(f"{where}.{value}: not one of the grid's values ({', '.join(sorted(known))})")
            if not isinstance(sets, dict):
                raise GridError(f"{where}.{value}: must be a mapping of dotted keys to values")
            for k in sets:
                if k in grid or k in fixed or k in ("seed", "output.path"):
                    raise GridError(f"{where}.{value}.{k}: also a grid key, a 'set:' key or set by the sweep")
            out[key][_value_text(value)] = dict(sets)
    return out


MAX_SEEDS = 100_000  # replicates per grid point: far above any use, far below memory


def _seeds(value, source: str) -> list[int]:
    if isinstance(value, bool):
        raise GridError(f"{source}: seeds: must be a count or a list of integers, got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_SEEDS:  # checked before a list of that length is built
            raise GridError(f"{source}: seeds: a count must be between 1 and {MAX_SEEDS:,} (got {value})")
        return list(range(value))
    if isinstance(value, list) and value:
        for i, s in enumerate(value):
            if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s < 2**63:
                raise GridError(f"{source}: seeds.{i}: must be an integer in [0, 2^63) (got {s!r})")
        if len(value) > MAX_SEEDS:
            raise GridError(f"{source}: seeds: at most {MAX_SEEDS:,} (got {len(value):,})")
        if len(set(value)) != len(value):
            raise GridError(f"{source}: seeds: values repeat ({value})")
        return list(value)
    raise GridError(f"{source}: seeds: must be a count or a non-empty list of integers, got {value!r}")


def load_grid(path, output: str | Path | None = None, overrides: dict | None = None) -> Grid:
    """Read and validate a grid file; every expanded run config is validated too.

    ``base`` is relative to the grid file; ``output`` (or the `output` argument) is
    relative to the current directory. `overrides` (dotted key -> value, e.g. from
    ``--set``) join the grid's fixed ``set:`` overrides.
    """
    from gmm_volunteer.run.config import ConfigError

    from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

    source = str(path)
    try:
        path = Path(path)
        data = load_yaml(path.read_bytes(), source)
    except FileNotFoundError:
        raise GridError(f"{source}: file not found") from None
    except (OSError, ValueError) as exc:  # YAMLInputError, a directory, a NUL byte
        raise GridError(str(exc) if isinstance(exc, YAMLInputError) else f"{source}: cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise GridError(f"{source}: top level must be a mapping with keys {', '.join(GRID_KEYS)}")
    for key in data:
        if key not in GRID_KEYS:
            from gmm_volunteer.model.suggest import did_you_mean

            raise GridError(f"{source}: {key}: unknown grid key{did_you_mean(key, GRID_KEYS)} "
                            f"(expected one of: {', '.join(GRID_KEYS)})")
    for key in ("base", "grid"):
        if key not in data:
            raise GridError(f"{source}: {key}: required key is missing")
    if not isinstance(data["base"], str):
        raise GridError(f"{source}: base: must be a path to a run config, got {data['base']!r}")
    try:
        base = (path.resolve().parent / Path(data["base"]).expanduser()).resolve()
        if not base.is_file():
            raise GridError(f"{source}: base: run config not found: {base}")
        base_data = load_yaml(base.read_bytes(), str(base))
    except YAMLInputError as exc:
        raise GridError(str(exc)) from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise GridError(f"{source}: base: cannot read {data['base']!r}: {exc}") from None
    if not isinstance(base_data, dict):
        raise GridError(f"{base}: top level must be a mapping of config keys")

    grid = data["grid"]
    if not isinstance(grid, dict) or not grid:
        raise GridError(f"{source}: grid: must be a mapping of dotted config keys to value lists")
    dims = {}
    for key, values in grid.items():
        if key in ("seed", "output.path"):
            raise GridError(f"{source}: grid.{key}: set by the sweep itself; use 'seeds:' / 'output:'")
        if not isinstance(values, list) or not values:
            raise GridError(f"{source}: grid.{key}: must be a non-empty list of values, got {values!r}")
        if any(isinstance(v, (dict, list)) for v in values):
            # a coordinate of the combined dataset must be a plain value
            inner = next((f" (e.g. {key}.{k})" for v in values if isinstance(v, dict) for k in v), "")
            raise GridError(f"{source}: grid.{key}: values must be numbers, text or booleans, not "
                            f"mappings or lists; make a grid key of what varies inside{inner}")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise GridError(f"{source}: grid.{key}: values repeat ({values})")
        name = dim_name(str(key))
        if name in dims or name == "seed":
            raise GridError(f"{source}: grid.{key}: dimension name {name!r} is used twice")
        dims[name] = (str(key), values)
    seeds = _seeds(data.get("seeds", 1), source)
    fixed = data.get("set") or {}
    if not isinstance(fixed, dict):
        raise GridError(f"{source}: set: must be a mapping of dotted keys to values")
    fixed = dict(fixed)
    if isinstance(fixed.get("model"), str):  # a bundle named in the grid file: relative to it
        from gmm_volunteer.run.config import ConfigError, _absolute

        try:
            fixed["model"] = _absolute(fixed["model"], path.resolve().parent, source)
        except ConfigError as exc:
            raise GridError(str(exc).replace(": model:", ": set.model:", 1)) from None
    fixed.update(overrides or {})
    for key in fixed:
        if key in grid:
            raise GridError(f"{source}: set.{key}: also a grid key")
        if key in ("seed", "output.path"):
            raise GridError(f"{source}: set.{key}: set by the sweep itself; use 'seeds:' / 'output:'")
    out = output if output is not None else data.get("output")
    if out is None:
        out = Path("results") / path.stem
    if not isinstance(out, (str, Path)):
        raise GridError(f"{source}: output: must be a directory path, got {out!r}")
    try:
        # Absolute, so that workers on other machines (shared filesystem) write to the same place.
        out = Path(out).expanduser().resolve()
    except (RuntimeError, ValueError, OSError) as exc:  # ~nosuchuser, a NUL byte
        raise GridError(f"{source}: output: cannot use {str(out)!r}: {exc}") from None
    if out.exists() and not out.is_dir():
        raise GridError(f"{source}: output: {out} exists and is not a directory")
    g = Grid(source=path, base=base, base_data=base_data, dims=dims, seeds=seeds,
             output=out, fixed=dict(fixed), per_value=_per_value(data.get("per_value"), grid, fixed, source),
             description=str(data.get("description", "")))
    from gmm_volunteer.run.preflight import check_start

    try:
        # Every expanded config is validated now, before any run starts, by the preflight
        # of `gmmv run` (memory aside: the sweep checks it for its workers).
        for r in g.runs():
            check_start(r.config, f"{g.source} (run {r.name})", memory=False)
    except ConfigError as exc:
        raise GridError(str(exc)) from None
    return g


# -- manifest ---------------------------------------------------------------------------

def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_manifest(grid: Grid, runs: list[RunSpec]) -> Path:
    """``<output>/sweep.json``: the grid's dims and every run's coords and store."""
    grid.output.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": "gmmv-sweep",
        "format_version": 1,
        "grid_file": str(grid.source.resolve()),
        "base": str(grid.base),
        "description": grid.description,
        "dims": {name: {"key": key, "values": values} for name, (key, values) in grid.dims.items()},
        "seeds": grid.seeds,
        "set": grid.fixed,
        "runs": [{"name": r.name, "coords": r.coords,
                  "path": str(r.path.relative_to(grid.output))} for r in runs],
    }
    path = grid.output / MANIFEST
    _atomic_write_text(path, json.dumps(manifest, indent=1, default=str))
    return path


# -- running ----------------------------------------------------------------------------

@dataclass
class RunOutcome:
    name: str
    status: str  # "ok" | "failed" | "skipped"
    path: str
    wall_time_s: float = 0.0
    error: str = ""
    traceback: str = ""
    resumed_from: int = 0  # step of the checkpoint the run continued from (0: from the start)
    note: str = ""


def execute_run(name: str, cfg, path: str, run_fn: Callable | None = None,
                checkpoint_every: int | None = None) -> RunOutcome:
    """Simulate one run and write its store; failures come back as a value, not raised.

    This is what runs on a worker. `run_fn(cfg, progress=False) -> RunRecord` defaults
    to `gmm_volunteer.run.engine.simulate`. With `checkpoint_every` (and the default
    `run_fn`) the run is saved every that many steps beside its store and continues from
    the checkpoint there, if an earlier attempt left one (`run.checkpoint`).
    """
    t0 = time.perf_counter()
    resumed, note = 0, ""
    try:
        if run_fn is None and checkpoint_every:
            from gmm_volunteer.run.checkpoint import simulate_resumable

            record, resumed, note = simulate_resumable(cfg, path, checkpoint_every)
        else:
            if run_fn is None:
                from gmm_volunteer.run.engine import simulate as run_fn
            record = run_fn(cfg, progress=False)
        wall = time.perf_counter() - t0
        record.attrs.setdefault("wall_time_s", wall)
        # A store finished by a previous attempt of this run (e.g. a worker that kept
        # going after its client was interrupted) is as good as ours, if it holds this
        # run's config: another run's store at this path would be a wrong cell.
        if is_complete(path):
            _check_same_config(path, cfg)
        else:
            try:
                write_result(record, path, overwrite=False)
            except FileExistsError:
                if not is_complete(path):  # something else is in the way: a real failure
                    raise
                _check_same_config(path, cfg)
        if checkpoint_every:
            from gmm_volunteer.run.checkpoint import checkpoint_dir, clear

            clear(checkpoint_dir(path))  # the store is complete: its checkpoints are done
        return RunOutcome(name, "ok", path, time.perf_counter() - t0, resumed_from=resumed, note=note)
    except Exception as exc:  # reported, never fatal for the sweep
        return RunOutcome(name, "failed", path, time.perf_counter() - t0,
                          f"{type(exc).__name__}: {exc}", traceback.format_exc())


def _check_same_config(path: str, cfg) -> None:
    if (store_attrs(Path(path)) or {}).get("config") != cfg.to_yaml():
        raise RuntimeError(f"{path}: a complete store of another config is in the way; "
                           f"this run's result was not written")


@dataclass
class SweepReport:
    output: Path
    outcomes: list[RunOutcome]
    combined: Path | None = None

    def by_status(self, status: str) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def ok(self) -> bool:
        return not self.by_status("failed")

    def text(self) -> str:
        n = {s: len(self.by_status(s)) for s in ("ok", "skipped", "failed")}
        lines = [f"{n['ok']} ran, {n['skipped']} already complete (skipped), {n['failed']} failed"]
        for o in self.outcomes:
            if o.resumed_from:
                lines.append(f"  {o.name}: continued from its checkpoint at step {o.resumed_from:,}")
            if o.note:
                lines.append(f"  {o.name}: {o.note}")
        for o in self.by_status("failed"):
            lines.append(f"  FAILED {o.name}: {o.error}")
        if n["failed"]:
            lines.append(f"  tracebacks: {self.output / FAILED_DIR}/<run>.txt; re-run the sweep to retry them")
        if self.combined is not None:
            lines.append(f"combined dataset: {self.combined}")
        return "\n".join(lines)


def stale_reason(run: RunSpec, digests: dict | None = None) -> str | None:
    """Why the complete store of `run` is not what running `run` now would write, or None.

    A sweep skips complete stores; one made by another gmmv version, from another config
    (the base file or the grid was edited) or with another model bundle would be mixed
    silently into the results. A store of 0.8.0 or before that recorded the legacy digest
    of this very bundle counts as made with it (`bundle.accepted_digests`). `digests`
    caches those by model path."""
    from gmm_volunteer._version import __version__
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import accepted_digests

    attrs = store_attrs(run.path) or {}
    made_by = attrs.get("gmmv_version")
    if made_by != __version__:
        return f"made by gmmv {made_by}, this is gmmv {__version__}"
    if attrs.get("config") != run.config.to_yaml():
        return "its config differs from this grid's (the base config, the grid or --set changed)"
    digests = {} if digests is None else digests
    model = str(run.config.model)
    if model not in digests:
        digests[model] = accepted_digests(load_bundle(model))
    if attrs.get("model_sha256") not in digests[model]:
        return f"made with another model bundle than {model}"
    return None


def _refuse_stale(complete: list[RunSpec], output: Path) -> None:
    """Raise `StaleRunsError` naming the complete runs whose stores `stale_reason` rejects."""
    digests: dict = {}
    stale = [(r, why) for r in complete if (why := stale_reason(r, digests)) is not None]
    if stale:
        shown = "\n".join(f"  {r.path}: {why}" for r, why in stale[:3])
        more = f"\n  ... and {len(stale) - 3} more" if len(stale) > 3 else ""
        raise StaleRunsError(
            f"{output}: {len(stale)} complete run store(s) were not made by the runs this sweep "
            f"would do, and would be mixed into its results:\n{shown}{more}\n"
            f"Write the sweep elsewhere (-o DIR), or move those stores away yourself; "
            f"gmmv does not delete finished results.")


def _remove_stale_tmp(runs: list[RunSpec]) -> None:
    # Leftovers of killed writers: never read, but they take disk space. Runs about to
    # be (re)done are ours (their writers may have run on other machines, so the pid is
    # not checked); do not run two sweeps on one output directory at once. Only what
    # looks like a partial store is removed.
    from gmm_volunteer.io.storepath import _looks_like_partial_store

    for r in runs:
        for tmp in r.path.parent.glob(f"{r.path.name}.tmp-*"):
            if _looks_like_partial_store(tmp):
                shutil.rmtree(tmp, ignore_errors=True)


def _record_failure(output: Path, outcome: RunOutcome) -> None:
    d = output / FAILED_DIR
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{outcome.name}.txt").write_text(outcome.traceback or outcome.error, encoding="utf-8")


def _clear_failure(output: Path, name: str) -> None:
    p = output / FAILED_DIR / f"{name}.txt"
    if p.exists():
        p.unlink()


def run_sweep(
    grid: Grid,
    *,
    address: str | None = None,
    workers: int | None = None,
    serial: bool = False,
    run_fn: Callable | None = None,
    progress: bool = True,
    combine: bool = True,
    connect_timeout: str = "20s",
    checkpoint_every: int | None = None,
) -> SweepReport:
    """Run every incomplete run of `grid`; return what happened.

    ``address``: a running Dask scheduler (``tcp://host:port``). Otherwise a local Dask
    cluster with `workers` single-threaded worker processes (default: all cores), or,
    with ``serial``, this process. Runs whose stores are complete are skipped; complete
    stores made by another version, config or model bundle raise `StaleRunsError` before
    anything is written. A failed
    run is reported (and its traceback kept under ``<output>/failed/``) while the others
    go on. With ``combine``, the combined dataset is (re)written when every run is
    complete. With ``checkpoint_every``, each run is saved every that many steps in
    ``<store>.checkpoint/``, and a run killed earlier continues from its last checkpoint.
    """
    from tqdm.auto import tqdm

    runs = grid.runs()
    complete = [is_complete(r.path) for r in runs]
    _refuse_stale([r for r, c in zip(runs, complete) if c], grid.output)
    write_manifest(grid, runs)
    outcomes = [RunOutcome(r.name, "skipped", str(r.path)) for r, c in zip(runs, complete) if c]
    todo = [r for r, c in zip(runs, complete) if not c]
    _remove_stale_tmp(todo)
    if todo and is_own_store(grid.output / COMBINED):
        # Runs are about to change: a combined dataset from before would be stale.
        shutil.rmtree(grid.output / COMBINED)
    (grid.output / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(todo), desc="sweep", unit="run", disable=not progress or not todo)

    def done(outcome: RunOutcome) -> None:
        outcomes.append(outcome)
        if outcome.status == "failed":
            _record_failure(grid.output, outcome)
            bar.write(f"FAILED {outcome.name}: {outcome.error}")
        else:
            _clear_failure(grid.output, outcome.name)
        bar.update(1)
        bar.set_postfix(failed=sum(o.status == "failed" for o in outcomes), refresh=False)

    try:
        if serial or not todo:
            for r in todo:
                done(execute_run(r.name, r.config, str(r.path), run_fn, checkpoint_every))
        else:
            _run_on_dask(todo, address, workers, run_fn, done, connect_timeout, checkpoint_every)
    finally:
        bar.close()

    report = SweepReport(grid.output, outcomes)
    if combine and all(is_complete(r.path) for r in runs):
        from gmm_volunteer.experiments.combine import write_combined

        report.combined = write_combined(grid.output, progress=progress)
    return report


def _run_on_dask(todo, address, workers, run_fn, done, connect_timeout="20s",
                 checkpoint_every=None) -> None:
    import logging

    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if address is None:
        n = workers or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
        address = cluster.scheduler_address
    try:
        client = Client(address, set_as_default=False, timeout=connect_timeout)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        raise SchedulerUnreachable(f"cannot connect to the Dask scheduler at {address}: {exc}") from None
    futures = {}
    try:
        for r in todo:
            # pure=False: a retried run is a new task, never a cached earlier failure.
            fut = client.submit(execute_run, r.name, r.config, str(r.path), run_fn, checkpoint_every,
                                pure=False, key=f"gmmv-run-{r.name}-{time.time_ns()}")
            futures[fut] = r
        for fut in as_completed(list(futures), loop=client.loop):
            r = futures[fut]
            try:
                outcome = fut.result()
            except Exception as exc:  # worker died (memory, kill): the task itself failed
                outcome = RunOutcome(r.name, "failed", str(r.path), 0.0,
                                     f"{type(exc).__name__}: {exc}", traceback.format_exc())
            done(outcome)
    except KeyboardInterrupt:
        # Queued runs are dropped; running ones either finish their atomic write or
        # leave only a tmp directory. Nothing incomplete is ever renamed into place.
        client.cancel(list(futures), force=True)
        raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
