"""Checks of a validated run config against its model bundle and this machine, made
before a run (or a sweep) starts so that it fails at once with exit 2, not mid-run.

* the model bundle is read and validated (`bundle.load_bundle`);
* ``requests.type_probabilities`` has one entry per request type of the bundle;
* the run's memory need is estimated (`estimate_memory`) and a run that cannot fit in
  the memory available now is refused with both figures.

Every problem raises `config.ConfigError` naming the config file and the key.

`check_start` is the one preflight of every command that starts a run (`gmmv run`,
`validate`, `sweep`, `testbed`, `run --resume`): `check_run`, then the kernels'
parameters, the policies' construction (a plugin whose ``__init__`` raises is a
`PolicyError`, exit 2) and the scripted events against the run's size. It creates
nothing, so a command calls it before any output, checkpoint, process or cgroup.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gmm_volunteer.run.config import ConfigError
from gmm_volunteer.model.timing import online_fraction

__all__ = ["check_start", "check_run", "estimate_memory", "available_memory", "bundle_for"]

_BUNDLES: dict[tuple, object] = {}


def bundle_for(cfg, source: str):
    """The validated bundle of `cfg` (cached per file content); `ConfigError` naming
    ``model`` when it cannot be used."""
    from gmm_volunteer.io.bundlefiles import bundle_file, load_bundle
    from gmm_volunteer.model.bundle import BundleError

    import hashlib

    f = bundle_file(cfg.model)
    try:  # keyed by content: a file rewritten within one clock tick is still seen as new
        key = (str(f), hashlib.sha256(f.read_bytes()).hexdigest())
    except (OSError, ValueError):
        key = None
    if key is not None and key in _BUNDLES:
        return _BUNDLES[key]
    try:
        bundle = load_bundle(cfg.model)
    except BundleError as exc:
        raise ConfigError("\n".join(f"{source}: model: {line}" for line in str(exc).splitlines())) from None
    if key is not None:
        _BUNDLES[key] = bundle
    return bundle


def available_memory() -> int | None:
    """Bytes of memory available to a new process now (Linux ``MemAvailable``), or None
    when this system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _state_bytes(bundle, restart: int, nodes: int, steps: int, per_model: bool = True) -> int:
    from gmm_volunteer.model.bundle import STAGES
    from gmm_volunteer.model.constants import CONSUMPTION_RESOURCES
    from gmm_volunteer.model.params import N_CRES, N_RES, consumption_rings, subtask_keys
    from gmm_volunteer.model.state import allocate

    res = CONSUMPTION_RESOURCES
    al_p = np.array([bundle.allocation[r].arma.order[0] for r in bundle.resources], np.int64)
    al_q = np.array([bundle.allocation[r].arma.order[1] for r in bundle.resources], np.int64)
    stages = bundle.consumption.stages
    order = lambda s, r, i: stages[s].resources[r].arma.order[i] if r in stages[s].resources else 0  # noqa: E731
    cs_p = np.array([[order(s, r, 0) for r in res[:N_CRES]] for s in STAGES], np.int64)
    cs_q = np.array([[order(s, r, 1) for r in res[:N_CRES]] for s in STAGES], np.int64)
    *_, b_hist, dl_hist = consumption_rings(cs_p, cs_q)
    n_sub = len(subtask_keys(bundle, per_model)[1])  # without variants: a lower bound
    P = SimpleNamespace(n_nodes=nodes, n_sub=n_sub, n_req=n_sub,
                        max_slots=max(len(t.subtasks) for t in bundle.task_types),
                        restart=restart, b_hist=b_hist, dl_hist=dl_hist, al_p=al_p, al_q=al_q,
                        amax=np.zeros((1, N_RES)))  # only its shape matters here (the server's row)
    return sum(a.nbytes for a in allocate(P, steps))


def estimate_memory(cfg, bundle) -> int:
    """A rough estimate, in bytes, of the memory a run of `cfg` needs at its peak.

    The state's arrays grow linearly in users and steps (measured on small allocations
    of the same bundle and extrapolated); to them are added the request log at the
    expected request rate with a quarter to spare (one request per mean think time of
    an online user; the median when the mean is infinite), the latencies computed when
    the store is written, and the per-step series twice. (0.6.x, 10^6 users over 2,000
    steps: 1.20 GB measured at the peak of `gmmv run`; the log adds 30 bytes per
    request, 38 since 0.10.0's end time (D34), about 1,200 a step: README "Speed".)
    """
    restart = 1 if cfg.allocation.restart == "freeze" else 0
    small, big = 1_001, 2_001
    per_model = cfg.execution.subtask_data == "model"
    base = _state_bytes(bundle, restart, small, 1, per_model)
    per_node = (_state_bytes(bundle, restart, big, 1, per_model) - base) / (big - small)
    per_step = (_state_bytes(bundle, restart, small, 1_001, per_model) - base) / 1_000
    nodes, steps = cfg.users.count + len(getattr(cfg, "servers", None) or [cfg.server]), cfg.steps
    state = base + per_node * (nodes - small) + per_step * (steps - 1)
    p_on = online_fraction(cfg)  # over the user classes (D36)
    think = cfg.requests.think_time.mean()
    cycle = max(1.0, think if math.isfinite(think) else cfg.requests.think_time.median())
    log_entries = 1.25 * nodes * steps * p_on / cycle
    # The log (user 4, type 1, start 8, end step 8, end time 8, outcome 1, accuracy 8 bytes) is held once
    # (the record holds views of it); the store adds the latency column (8) and a type's
    # mask (1) per request, and the chunk of records per type it is writing
    # (conventions.by_type: the chunk's floats and its requests' indices, 8 + 8 bytes).
    # Measured: 20 million requests added 287 MiB to the record while the store was
    # written (0.7.0; 1,069 MiB with 0.6.0's store format 3).
    from gmm_volunteer.io.conventions import ROW_CHUNK

    log_bytes = (38 + 9) * log_entries + 16 * min(log_entries, ROW_CHUNK)
    return int(state + log_bytes + 2 * per_step * steps)


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def check_run(cfg, source: str, *, bundle=None, memory: bool = True, available: int | None = None):
    """Check `cfg` against its bundle (and, with `memory`, against the memory available
    now, or `available` bytes); return the bundle. Raises `ConfigError`."""
    if bundle is None:
        bundle = bundle_for(cfg, source)
    n_types = len(bundle.task_types)
    probs = cfg.requests.type_probabilities
    if len(probs) != n_types:
        names = ", ".join(t.name for t in bundle.task_types)
        raise ConfigError(
            f"{source}: requests.type_probabilities: has {len(probs)} entries but the model "
            f"bundle {Path(cfg.model)} defines {n_types} request types ({names})")
    if cfg.execution.progress == "paper":
        from gmm_volunteer.model.constants import PHASES

        missing = list(PHASES) if bundle.hazard is None else [p for p in PHASES if p not in bundle.hazard.phases]
        if missing:
            raise ConfigError(
                f"{source}: execution.progress: paper draws phase ends from the bundle's fitted "
                f"hazards, but the model bundle {Path(cfg.model)} has none for {', '.join(missing)} "
                f"(its `hazard` block, which `gmmv fit` writes); use progress: work or a bundle "
                f"fitted with hazards")
    from gmm_volunteer.model.limits import check_representation

    check_representation(cfg, bundle, source)
    if memory:
        avail = available_memory() if available is None else available
        if avail is not None:
            need = estimate_memory(cfg, bundle)
            if need > avail:
                raise ConfigError(
                    f"{source}: users.count: a run of {cfg.users.count:,} users over "
                    f"{cfg.steps:,} steps needs about {_gb(need)} of memory, but only "
                    f"{_gb(avail)} are available; use fewer users or steps")
    return bundle


def check_start(cfg, source: str, *, bundle=None, memory: bool = True, available: int | None = None):
    """Everything a run of `cfg` needs before its first step (the module's list); return
    the bundle. Raises `ConfigError` (a bad value, naming `source` and the key) or
    `PolicyError` (a plugin that fails to construct)."""
    from gmm_volunteer.model.events import check_events
    from gmm_volunteer.model.params import build_params
    from gmm_volunteer.policies import make_autoscaler, make_executor, make_scheduler
    from gmm_volunteer.policies.base import several_servers_refusal
    from gmm_volunteer.policies.guard import PolicyError, guard

    bundle = check_run(cfg, source, bundle=bundle, memory=memory, available=available)
    try:
        params = build_params(cfg, bundle)
        check_events(cfg.events, params.n_users)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{source}: {exc}") from None
    servers = getattr(cfg, "servers", None) or [cfg.server]
    for kind, make in (("executor", make_executor), ("scheduler", make_scheduler),
                       ("autoscaler", make_autoscaler)):
        try:
            with guard([(kind, getattr(cfg, kind))], "__init__"):  # a plugin's failure: PolicyError
                policy = make(getattr(cfg, kind), getattr(cfg, f"{kind}_options"))
            if hasattr(policy, "check_params"):  # options that name parts of the bundle
                policy.check_params(params)
        except (ConfigError, PolicyError):
            raise
        except ValueError as exc:  # a built-in policy refusing its options
            raise ConfigError(f"{source}: {exc}") from None
        refusal = several_servers_refusal(kind, getattr(cfg, kind), policy, [s.name for s in servers])
        if refusal:
            raise ConfigError(f"{source}: {refusal}")
    return bundle
