"""The `testbed:` section of a run config, and the checks of what a live system can run.

A testbed config is a `gmmv run` config (run.config.RunConfig, loaded by its one
loader) plus one section, `testbed:`, that the simulator never reads. `load_testbed`
splits it off, validates both, and refuses settings the live system does not implement
(they exit 2 naming the key): a kernel-enforced limit is fixed for a run, so the
allocations must be `dedicated` (paper 2.2 draws them per step); only the centralized
and uniform rules (paper 2.3) have a live implementation.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from gmm_volunteer.run.config import ConfigError, RunConfig, load_config, parse_override, validate_testbed_section
from gmm_volunteer.run.config.testbed import SECTION, Testbed

LIVE_SCHEDULERS = ("centralized", "uniform")


def load_testbed(path: str | Path, overrides: Iterable[str] = ()) -> tuple[RunConfig, Testbed]:
    """Read a testbed config: the run config (by `load_config`, as `gmmv run` reads it)
    and its `testbed:` section, each with its ``--set`` overrides. Errors are ConfigError
    naming the file and key."""
    from gmm_volunteer.io.yamlio import load_yaml

    source = str(path)
    run_overrides, section_overrides = [], {}
    for text in overrides:
        key, value = parse_override(text, source)
        if key.startswith(SECTION + "."):
            section_overrides[key[len(SECTION) + 1:]] = value
        else:
            run_overrides.append(text)
    cfg = load_config(path, run_overrides)  # also checks the section as written
    section = load_yaml(Path(path).read_bytes(), source).get(SECTION) or {}
    tb = validate_testbed_section({**section, **section_overrides}, source)
    check_live(cfg, source)
    node_execution(cfg, tb, source)
    return cfg, tb


def check_before_start(cfg: RunConfig, tb: Testbed, source: str) -> None:
    """Everything checked before a testbed creates anything (a cgroup, a namespace, a
    link, a process, its workdir): the preflight of `gmmv run` (`preflight.check_start`:
    the bundle and its agreement with the config, e.g. one type probability per request
    type; the values the kernels get; the policies) and the limits this machine's kernel
    can enforce (`check_limits`), and a workdir it can write. Raises ConfigError or
    PolicyError (exit 2), whether or not this process could create cgroups."""
    from gmm_volunteer.run.preflight import check_start

    check_start(cfg, source, memory=False)  # the testbed holds no simulated state
    check_limits(cfg, source)
    check_record_memory(cfg, source)
    if tb.workdir is not None:
        from gmm_volunteer.cli.errors import CommandError
        from gmm_volunteer.cli.outputs import check_output_target

        try:
            check_output_target(tb.workdir, "testbed.workdir")
        except CommandError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        if Path(tb.workdir).exists() and not Path(tb.workdir).is_dir():
            raise ConfigError(f"{source}: testbed.workdir: {tb.workdir} exists and is not a directory")


def record_bytes(cfg: RunConfig) -> int:
    """Bytes of the per-step arrays a testbed run allocates when it starts: this
    process's measurements (testbed.run: CPU per node, the server's and the volunteers'
    consumption, the server's allocation; float32) and the server process's counts
    (testbed.server: events per node class, work, online and active users; 8 bytes
    each). A lower bound of what the run holds by its end."""
    from gmm_volunteer.model.constants import EVENTS, RESOURCES

    measured = 4 * ((int(cfg.users.count) + 1) + 3 * len(RESOURCES))
    counted = 8 * (2 * len(EVENTS) + 2 + 2)
    return int(cfg.steps) * (measured + counted)


def check_record_memory(cfg: RunConfig, source: str) -> None:
    """Refuse a run whose per-step arrays (`record_bytes`) exceed the memory available
    now: its processes would fail to allocate them after the start (the simulator's
    `gmmv run` has the same check of its state, `preflight.check_run`)."""
    from gmm_volunteer.run.preflight import available_memory

    need, avail = record_bytes(cfg), available_memory()
    if avail is not None and need > avail:
        raise ConfigError(f"{source}: steps: {cfg.steps:,} steps x {cfg.users.count + 1:,} nodes: the testbed's "
                          f"per-step arrays need {need / 1e9:,.1f} GB, and {avail / 1e9:,.1f} GB are available "
                          "now; use fewer steps (a testbed step is one second of real time)")


# What the kernel can enforce per node: a CFS quota of at least 1 ms per 100 ms period
# (isolation.CFS_PERIOD_US) and at most this machine's cores; a memory limit within its
# memory; tc rates of 8 kbit/s to 100 Gbit/s. Outside, a limit would be clamped (the run
# would not be the config's) or the kernel would refuse it mid-start.
MIN_CPU_PERCENT = 1.0
MIN_MBIT, MAX_MBIT = 0.008, 100_000.0


def _machine() -> tuple[float, float | None]:
    """(CPU % of all cores, memory in MB) of this machine."""
    cpu = 100.0 * (os.cpu_count() or 1)
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (ValueError, OSError, AttributeError):
        memory = None
    return cpu, memory


def check_limits(cfg: RunConfig, source: str) -> None:
    """Refuse node limits this machine cannot enforce as cgroup and tc limits."""
    from gmm_volunteer.model.constants import RESOURCES

    base = cfg.base_profile.as_array()
    nodes = {"server (server.max_allocation, or base_profile x server.capacity)": cfg.server.maximum(base),
             "a volunteer (base_profile x users.capacity)": base * cfg.users.capacity}
    cpu_max, memory_max = _machine()
    problems = []
    for who, limits in nodes.items():
        values = dict(zip(RESOURCES, (float(x) for x in limits)))
        cpu = values["cpu"]
        if not MIN_CPU_PERCENT <= cpu <= cpu_max:
            problems.append(f"{who}: cpu {cpu:g} %: a CPU quota must be within {MIN_CPU_PERCENT:g} % "
                            f"and this machine's {cpu_max:g} % ({cpu_max / 100:g} cores)")
        if memory_max is not None and not 1.0 <= values["memory"] <= memory_max:
            problems.append(f"{who}: memory {values['memory']:g} MB: a memory limit must be within 1 MB "
                            f"and this machine's {memory_max:,.0f} MB")
        for band in ("band_in", "band_out"):
            if who.startswith("a volunteer") and not MIN_MBIT <= values[band] <= MAX_MBIT:
                problems.append(f"{who}: {band} {values[band]:g} Mbit/s: a link's rate must be within "
                                f"{MIN_MBIT:g} and {MAX_MBIT:g} Mbit/s")
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))


def node_execution(cfg: RunConfig, tb: Testbed, source: str = "config") -> tuple[str, int]:
    """How every testbed node runs the batches placed on it: ("serial", k), k at a time
    in the order they were placed (a runtime with k workers), or ("shared", 0), all at
    once on threads of their own, the kernel sharing the node's CPU quota.

    A config that states `execution.discipline` (docs/model.md D28) gets what the
    simulator runs for it: fifo, `execution.concurrency` at a time; shared, all at once.
    One that does not keeps `testbed.execution` (default serial, the runs before the
    key existed). Both stated and contradicting each other: ConfigError naming the keys."""
    stated = "discipline" in cfg.execution.model_fields_set
    if not stated:
        return ("shared", 0) if tb.execution == "shared" else ("serial", 1)
    fifo = cfg.execution.discipline == "fifo"
    if "execution" in tb.model_fields_set and (tb.execution == "serial") != fifo:
        raise ConfigError(f"{source}: testbed.execution: {tb.execution!r} contradicts execution.discipline: "
                          f"{cfg.execution.discipline!r} (the testbed runs what the simulator models; "
                          "drop testbed.execution, or state the discipline that matches it)")
    return ("serial", cfg.execution.concurrency) if fifo else ("shared", 0)


def check_live(cfg: RunConfig, source: str) -> None:
    """Refuse what the live system cannot do the way the simulator does it."""
    problems = []
    if cfg.scheduler not in LIVE_SCHEDULERS:
        problems.append(f"scheduler: {cfg.scheduler!r} has no live implementation "
                        f"(choose {' or '.join(LIVE_SCHEDULERS)})")
    if cfg.executor != "default":
        problems.append("executor: the testbed's limits are the kernel's (cgroups, tc); use 'default'")
    if cfg.autoscaler != "fixed":
        problems.append("autoscaler: the testbed's server has a fixed quota; use 'fixed'")
    for who, law in (("users", cfg.users.allocation), ("server", cfg.server.allocation)):
        if law.base != "dedicated" or law.mean.values() or law.sd.values():
            problems.append(f"{who}.allocation: must be 'dedicated' (a cgroup limit is fixed for the run)")
    if cfg.users.initial_data != "empty":
        problems.append("users.initial_data: must be 'empty' (volunteers start with no model files)")
    if cfg.execution.variants or cfg.execution.subtask_data != "model" or not cfg.execution.batching:
        problems.append("execution: the testbed runs the defaults (batching, data per model, no variants)")
    if cfg.events:
        problems.append("events: scripted events have no live implementation")
    if cfg.users.classes is not None:
        problems.append("users.classes: the testbed's volunteers are one device class (docs/model.md D36)")
    if cfg.demand.model_dump() != type(cfg.demand)().model_dump():
        problems.append("demand: time-varying demand has no live implementation")
    if len(cfg.servers) > 1:
        problems.append("servers: the testbed runs one dedicated server (docs/model.md D35)")
    if any(srv.rtt is not None for srv in cfg.servers):
        problems.append("server.rtt: the testbed does not read it (its links' delay is testbed.link_delay_ms; "
                        "docs/model.md D35)")
    if cfg.users.count > 64 * 64:
        problems.append(f"users.count: at most {64 * 64} volunteer links fit the subnet")
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))
