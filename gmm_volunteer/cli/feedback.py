"""What the commands tell the user while they work (docs/usage.md, "Output").

Every `gmmv` command takes ``--quiet`` and ``-v/--verbose`` with one meaning:

* default: results on stdout; progress (bars, "fitting ..." lines) and notes on stderr;
* ``--quiet``: no progress and no notes; results, warnings and errors only;
* ``-v``: progress plus details (timings, the runs of a sweep, the config of a run).

`set_verbosity` is called once per command by `gmm_volunteer.cli.main`; `info` and
`detail` print to stderr at the level they belong to, and `Stages` names each part of a
long command (the stages of `gmmv fit`, the figures of `gmmv report`) as it starts. `announce_compile` prints the
one-line notice that the simulation kernels are about to be compiled, when numba's
on-disk cache does not hold them yet (a first run on a machine takes 1-2 minutes).
"""

from __future__ import annotations

import os
import sys

QUIET, NORMAL, VERBOSE = -1, 0, 1
_level = NORMAL
_announced = False

COMPILE_NOTICE = ("compiling simulation kernels (first run on this machine only, "
                  "about 1-2 minutes; `gmmv compile` does it ahead of time)")


def set_verbosity(level: int) -> None:
    global _level
    _level = int(level)


def verbosity() -> int:
    return _level


def level_of(args) -> int:
    """The level an argparse namespace asks for (``quiet`` / ``verbose`` flags)."""
    if getattr(args, "quiet", False):
        return QUIET
    return VERBOSE if getattr(args, "verbose", False) else NORMAL


def info(message: str) -> None:
    """Progress or a note: shown unless --quiet."""
    if _level >= NORMAL:
        print(message, file=sys.stderr, flush=True)


def detail(message: str) -> None:
    """Shown with -v only."""
    if _level >= VERBOSE:
        print(message, file=sys.stderr, flush=True)


class Stages:
    """``stages(part)`` says "<prefix>: <part> ..." on stderr as each part of a long
    command starts (not with --quiet) and, with -v, how long the part before it took;
    ``stages(None)`` ends the last part. `started` is when the current part began."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.part: str | None = None
        self.started: float | None = None

    def __call__(self, part: str | None) -> None:
        import time

        now = time.monotonic()
        if self.started is not None:
            detail(f"{self.prefix}:   ({self.part}: {now - self.started:.1f} s)")
        self.started, self.part = now, part
        if part is not None:
            info(f"{self.prefix}: {part} ...")


def _dispatchers():
    from gmm_volunteer.model.kernels import step

    return (step.dynamics_step, step.needs_growth)


def kernels_cached(dispatchers=None) -> bool:
    """Whether numba's on-disk cache holds compiled code for the simulation kernels.

    Cheap: reads the cache index files (next to the kernel modules in ``__pycache__``,
    or under NUMBA_CACHE_DIR, wherever numba itself looks); an index whose source stamp
    no longer matches the module counts as missing. Compiles nothing. When the cache's
    layout cannot be read, the answer is True (better no notice than a wrong one)."""
    try:
        dispatchers = _dispatchers() if dispatchers is None else dispatchers
    except Exception:
        return True
    for d in dispatchers:
        cache = getattr(d, "_cache", None)
        cache_file = getattr(cache, "_cache_file", None)
        index = getattr(cache_file, "_index_path", None)
        if index is None:
            return True  # not a cached dispatcher, or another numba layout
        if not os.path.isfile(index):
            return False
        try:
            if not cache_file._load_index():
                return False
        except Exception:
            return False
    return True


def run_dispatchers(cfg, generate: bool = True):
    """The cached kernels a run of `cfg` calls first: the step kernels and its policy
    pair's fused runner (generated now unless `generate` is false: then None when the
    runner's module does not exist yet, i.e. certainly not compiled)."""
    from gmm_volunteer.policies import make_executor, make_scheduler
    from gmm_volunteer.policies.base import Executor, Scheduler
    from gmm_volunteer.policies import runner

    from gmm_volunteer.policies.guard import guard

    dispatchers = list(_dispatchers())
    # a plugin that fails here fails as it would in the run: exit 2 naming it
    with guard([("scheduler", cfg.scheduler)], "__init__ or reset"):
        sc = make_scheduler(cfg.scheduler, cfg.scheduler_options)
    with guard([("executor", cfg.executor)], "__init__ or reset"):
        ex = make_executor(cfg.executor, cfg.executor_options)
    if isinstance(sc, Scheduler) and isinstance(ex, Executor):
        hooks = (ex.act_kernel, sc.downloads, sc.place)
        path = runner.generated_path(hooks)
        if path is None:
            return None  # compiled in memory on every run
        if not generate and not path.exists():
            return None
        dispatchers.append(runner.compiled_runner(*hooks))
    return tuple(dispatchers)


def run_kernels_cached(cfg) -> bool:
    """Whether a run of `cfg` finds every kernel it calls first in numba's cache
    (writes nothing)."""
    dispatchers = run_dispatchers(cfg, generate=False)
    return dispatchers is not None and kernels_cached(dispatchers)


def uncached_kernels() -> set[str]:
    """``module.qualname`` of every cached kernel loaded now (the package's and the
    generated runners') that numba's cache does not hold for its current source: what a
    run may have to compile. Kernels inlined into their callers are left out (they never
    compile on their own). Compiles nothing."""
    from numba.core.dispatcher import Dispatcher

    names = set()
    for modname, module in list(sys.modules.items()):
        if not (modname.startswith("gmm_volunteer") or modname.startswith("gmmv_runner_")):
            continue
        for obj in list(vars(module).values()):
            if not isinstance(obj, Dispatcher) or getattr(obj.py_func, "__module__", None) != modname:
                continue
            if obj.targetoptions.get("inline") == "always":
                continue
            cache_file = getattr(getattr(obj, "_cache", None), "_cache_file", None)
            index = getattr(cache_file, "_index_path", None)
            if index is None:
                continue
            try:
                cached = os.path.isfile(index) and bool(cache_file._load_index())
            except Exception:
                cached = False
            if not cached:
                names.add(f"{modname}.{obj.py_func.__qualname__}")
    return names


def announce_compile(dispatchers=None) -> bool:
    """Print the compile notice once per process if the kernels are not cached (and
    not --quiet); return whether it was printed."""
    global _announced
    if _announced or _level < NORMAL:
        return False
    if kernels_cached(dispatchers):
        detail("simulation kernels: compiled code found in the cache")
        return False
    _announced = True
    info(COMPILE_NOTICE)
    return True


def compile_stage(cfg, show: bool = True) -> int:
    """Compile the kernels a run of `cfg` calls that numba's cache lacks, as a stage of
    its own before the run (on a reduced copy of the config, `precompile`), with its own
    progress bar (``compiling kernels: k/N``), so that a first run does not sit at 0 % of
    its step bar while numba compiles and its rate counts steps only. Returns how many
    kernels it compiled (0 when the cache holds them all: nothing is run then). The run's
    trajectory is unchanged: the compile run is a separate simulation."""
    if run_kernels_cached(cfg):
        detail("simulation kernels: compiled code found in the cache")
        return 0
    import gmm_volunteer.run.engine  # noqa: F401  (loads every kernel a run calls)
    from gmm_volunteer.run.precompile import precompile

    run_dispatchers(cfg)  # and this pair's runner; compiles nothing
    todo = uncached_kernels()
    if show:
        info(COMPILE_NOTICE)
    from tqdm import tqdm

    # N: every loaded kernel missing from the cache, an upper bound (a run need not call
    # them all); the bar ends at the number actually compiled
    bar = tqdm(total=len(todo), unit="kernel", desc="compiling kernels", disable=not show,
               mininterval=0.5, file=sys.stderr)
    done: set[str] = set()

    def progress(entry) -> None:
        if entry.name in todo and entry.name not in done:
            done.add(entry.name)
            bar.update(1)

    try:
        precompile(cfg, on_compiled=progress)
        bar.total = len(done)  # the rest were not needed by this run
        bar.refresh()
    finally:
        bar.close()
    return len(done)
