"""`gmmv compile`: fill numba's kernel cache ahead of the first run (docs/usage.md).

`make`'s install step runs it for the demo config, so that the first `gmmv run` loads
compiled kernels instead of spending a minute compiling (issue 15, "first run").
Added to the `gmmv` parser by `gmm_volunteer.cli.commands`.
"""

from __future__ import annotations

import argparse
import time

# The demo's policies (configs/quickstart.yaml) when no CONFIG is given. Only the policies
# decide which kernels are compiled (numba compiles per argument types, never values), so
# a short run of a small population compiles what the demo's run needs: the sizes are
# the ones `precompile` reduces every config to.
BUILTIN_SERVER_CAPACITY = 30
SLOW_S = 1.0  # a compilation at least this long gets a progress line at the default level


def _targets(args) -> list[tuple[str, object]]:
    """(label, RunConfig) per CONFIG (or the built-in one) and per --scheduler."""
    from gmm_volunteer.cli.commands import CommandError
    from gmm_volunteer.run.config import (ConfigError, apply_overrides, config_from_dict, load_config,
                                            parse_override)
    from gmm_volunteer.run.precompile import STEPS, USERS
    from gmm_volunteer.policies.registry import UnknownPolicyError, resolve

    if args.top < 1:
        raise CommandError(f"--top: must be at least 1 (got {args.top})")
    schedulers = [None]  # each config's own
    if args.scheduler is not None:
        schedulers = [s.strip() for s in args.scheduler.split(",")]
        for name in schedulers:
            if not name:
                raise CommandError(f"--scheduler: empty name in {args.scheduler!r} (give NAME[,NAME...])")
            try:
                resolve("scheduler", name)
            except UnknownPolicyError as exc:
                raise CommandError(f"--scheduler: {exc.args[0]}") from None
    out = []
    for config in args.configs or [None]:
        for name in schedulers:
            overrides = list(args.set) + ([f"scheduler={name}"] if name else [])
            try:
                if config is None:
                    parsed = dict(parse_override(o, "--set") for o in overrides)
                    builtin = {"steps": STEPS, "users": {"count": USERS},
                               "server": {"capacity": BUILTIN_SERVER_CAPACITY}}
                    cfg = config_from_dict(apply_overrides(builtin, parsed, "--set"), source="built-in config")
                else:
                    cfg = load_config(config, overrides)
            except ConfigError as exc:
                raise CommandError(str(exc)) from None
            label = config or "built-in config"
            out.append((f"{label} (scheduler {cfg.scheduler}, executor {cfg.executor}, "
                        f"autoscaler {cfg.autoscaler})", cfg))
    return out


def kernel_sizes(names) -> dict[str, int]:
    """Bytecode instructions of each named kernel (``module.qualname``), the weight of its
    compilation in the time-left estimate: numba's own CPU time per kernel follows it
    (correlation 0.91 over the 77 kernels of the quickstart's cold compile on 0.9.0, about
    4 s per 1,000 instructions), where a count of kernels took `ops.batch_new` for
    `step_consumption` (1.1 s and 9.7 s), and the estimate of one compile ran from 257 s
    down to 50 s. A name that does not resolve weighs the median."""
    import dis
    import sys
    from statistics import median

    sizes = {}
    for name in names:
        module, _, qualname = name.rpartition(".")
        func = getattr(getattr(sys.modules.get(module), qualname, None), "py_func", None)
        if func is not None:
            sizes[name] = sum(1 for _ in dis.get_instructions(func.__code__))
    fallback = int(median(sizes.values())) if sizes else 1
    return {name: sizes.get(name, fallback) for name in names}


def _cmd_compile(args: argparse.Namespace) -> int:
    from gmm_volunteer.cli import feedback
    from gmm_volunteer.run.precompile import cache_dir, precompile
    from gmm_volunteer.policies.runner import runner_dir

    targets = _targets(args)  # every argument checked before anything compiles

    state = {"todo": {}, "done": set(), "t0": 0.0}

    def progress(entry) -> None:
        # k of N: N is every loaded kernel missing from the cache (an upper bound: a
        # config need not call them all), k those compiled so far; the time left is
        # extrapolated from the rate so far per bytecode instruction (`kernel_sizes`),
        # an upper estimate too.
        if entry.name in state["todo"]:
            state["done"].add(entry.name)
        k, n = len(state["done"]), len(state["todo"])
        elapsed = time.perf_counter() - state["t0"]
        where = ""
        done = sum(state["todo"][name] for name in state["done"])
        if n and k and done:
            left = elapsed / done * (sum(state["todo"].values()) - done)
            where = f"; kernel {k} of at most {n}, {elapsed:.0f} s so far, at most about {left:.0f} s left"
        if entry.total_s >= SLOW_S:
            feedback.info(f"gmmv compile:   compiled {entry.name} ({entry.total_s:.1f} s{where})")
        else:
            feedback.detail(f"gmmv compile:   compiled {entry.name} ({entry.total_s:.2f} s{where})")

    if feedback.verbosity() >= feedback.VERBOSE:
        feedback.detail(f"gmmv compile: numba cache {cache_dir()}, fused runners {runner_dir()}")
    for i, (label, cfg) in enumerate(targets, 1):
        import gmm_volunteer.run.engine  # noqa: F401  (loads every kernel a run calls)

        feedback.run_dispatchers(cfg)  # and this pair's runner; compiles nothing
        state.update(todo=kernel_sizes(feedback.uncached_kernels()), done=set(), t0=time.perf_counter())
        count = f" ({i} of {len(targets)})" if len(targets) > 1 else ""
        feedback.info(f"gmmv compile: compiling the kernels of {label}{count}: "
                      f"{len(state['todo'])} not in the cache ...")
        wall, cpu = time.perf_counter(), time.process_time()
        log = precompile(cfg, on_compiled=progress)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"{label}: {log.summary()}; {cpu:.1f} s CPU, {wall:.1f} s wall in all")
        if log.entries:
            feedback.detail(log.table(top=args.top))
    return 0


def add_subcommands(subparsers) -> None:
    from gmm_volunteer.cli.commands import add_output_flags

    p = subparsers.add_parser(
        "compile",
        help="compile the simulation kernels ahead of the first run (fills numba's cache)",
        description="Run each config for a few steps so that numba compiles and caches every "
                    "kernel its runs call at start-up; a later `gmmv run` of the same policies "
                    "then loads them instead of compiling. Use the same NUMBA_CACHE_DIR and "
                    "GMMV_RUNNER_DIR (if any) as the runs. Without CONFIG: the demo's policies "
                    "(uniform scheduler, default executor, fixed autoscaler).",
    )
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="YAML run config(s) (default: built-in)")
    p.add_argument("--scheduler", metavar="NAME[,NAME...]",
                   help="compile for these schedulers instead of each config's own, e.g. "
                        "centralized,uniform,affinity")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, as in `gmmv run` (repeatable)")
    p.add_argument("--top", type=int, default=25, metavar="N",
                   help="with -v: list the N slowest compilations (default 25)")
    add_output_flags(p, "no progress lines")
    p.set_defaults(func=_cmd_compile)
