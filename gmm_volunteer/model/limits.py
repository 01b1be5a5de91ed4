"""Limits of the state's representation, checked when a run is set up (docs/usage.md,
"Errors"): a config and bundle that would overflow an index are refused with exit 2
naming the limit, instead of writing outside an array (numba does not check bounds).

Sizes that only cost memory (users, steps, subtask slots) are the memory preflight's
concern (`preflight.estimate_memory`); the ones here are the widths of stored ids.
"""

from __future__ import annotations

from gmm_volunteer.model.errors import ConfigError

INT32_MAX = 2**31 - 1  # slot, batch, download and holder ids are int32
REQUEST_TYPES_MAX = 127  # request types are int8 (state.rq_type, the request log)
# pending_requests_fifo packs (start step, user) into one int64 as start * 2^31 + user (actions._fifo_key)
STEP_KEY_MAX = (2**63 - 1) // 2**31


def check_representation(cfg, bundle, source: str) -> None:
    """Refuse `cfg` with `bundle` when an id would not fit its stored width."""
    nodes = int(cfg.users.count) + 1
    slots = max(len(t.subtasks) for t in bundle.task_types)
    worst = max(bundle.task_types, key=lambda t: len(t.subtasks))
    if len(bundle.task_types) > REQUEST_TYPES_MAX:
        raise ConfigError(f"{source}: model: {len(bundle.task_types)} request types; the "
                          f"representation holds at most {REQUEST_TYPES_MAX} (int8 ids)")
    if nodes * slots > INT32_MAX:
        raise ConfigError(
            f"{source}: users.count: {cfg.users.count:,} users x {slots} subtask slots (request "
            f"type {worst.name!r}) = {nodes * slots:,} slot ids; the representation holds at "
            f"most {INT32_MAX:,} (int32 ids)")
    if int(cfg.steps) > STEP_KEY_MAX:
        raise ConfigError(f"{source}: steps: {cfg.steps:,} steps; the representation holds at "
                          f"most {STEP_KEY_MAX:,}")
