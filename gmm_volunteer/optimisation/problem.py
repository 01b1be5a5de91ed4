"""Eq. 2's pieces shared by the environment and the policy search (paper 2.4;
docs/model.md D19): the default run and the latency increments.

Latency increments follow docs/model.md D3: a request started in step s and last active
in step e has latency e - s, one increment in each step s+1..e. Through the end of step
t-1 the increments total L(t) = sum over ended requests of (e - s) + sum over active
requests of (t - 1 - s); a window [t0, t1) adds L(t1) - L(t0), and eq. 2's reward over it
is minus that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gmm_volunteer.run.config import RunConfig, config_from_dict, load_config

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "scheduling_env.yaml"
"""The default run of the environment and of `gmmv tune` (1,000 users, 1,800 steps),
shipped with the package (configs/scheduling_env.yaml in the repository links to it)."""


def resolve_config(config: str | Path | dict | RunConfig | None, overrides=()) -> RunConfig:
    """A RunConfig from a path (with ``key=value`` overrides), a mapping or a RunConfig
    (None: DEFAULT_CONFIG), with the weighted scheduler, the parametric policy the
    environment's actions and the search set."""
    if config is None:
        config = DEFAULT_CONFIG
    if isinstance(config, RunConfig):
        cfg = config
    elif isinstance(config, dict):
        cfg = config_from_dict(config)
    else:
        cfg = load_config(config, overrides)
        overrides = ()
    if overrides:
        raise ValueError("overrides apply to a config file only")
    if cfg.scheduler != "weighted":
        data = cfg.model_dump(mode="json")
        data["scheduler"] = "weighted"
        data["scheduler_options"] = {}
        cfg = config_from_dict(data)
    return cfg


def ended_latency(arrays, start: int = 0) -> int:
    """Sum of e - s over the request log's entries from index `start` on."""
    n = int(arrays.n_lg[0])
    return int(np.sum(arrays.lg_end[start:n] - arrays.lg_start[start:n]))


def active_latency(arrays, t: int) -> int:
    """Increments so far of the requests active after step t-1: sum of (t - 1 - s)."""
    active = arrays.rq_list[: int(arrays.n_rq[0])]
    return int(np.sum((t - 1) - arrays.rq_start[active]))


def latency_total(arrays, t: int) -> int:
    """L(t): every latency increment through the end of step t-1."""
    return ended_latency(arrays) + active_latency(arrays, t)
