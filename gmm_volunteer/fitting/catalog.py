"""Subtask types, request (task) types and the base resource profile (paper 3.1).

Task types: the paper uses light and heavy requests of 5 or 10 subtasks. Subtask types
are ranked by mean execution time (averaged over the batch sizes every type was
measured at, so that no type looks heavy only because it was run at larger batches);
the lighter half (the middle one goes to light when the count is odd) are the light
types, the rest heavy. A task type fills its 5 or 10 slots by cycling through its
types in that order.

Base profile: the paper sets memory and CPU to round values slightly above the largest
mean subtask consumption at batch size 2. We re-derive them from the traces (memory
rounded up to the next 500 MB, CPU to the next 50 %) and report them beside the
paper's 2500 MB / 200 %; the simulator's config decides which to use.
"""

from __future__ import annotations

import math

import numpy as np

from gmm_volunteer.fitting.memory import mean_execution
from gmm_volunteer.fitting.rounding import sig

TASK_TYPES = (("light5", "light", 5), ("light10", "light", 10), ("heavy5", "heavy", 5), ("heavy10", "heavy", 10))
PAPER_BASE_PROFILE = {"memory_mb": 2500.0, "cpu_pct": 200.0}
MEMORY_STEP_MB = 500.0
CPU_STEP_PCT = 50.0
PROFILE_BATCH_SIZE = 2


def subtask_type_blocks(traces, memory: dict[str, dict], work: dict[str, dict]) -> list[dict]:
    return [
        {
            "name": e["name"],
            "description": str(e.get("description", "")) + (f" [weights: {e['weights']}]" if e.get("weights") else ""),
            "data_size_mb": sig(e["data_size_mb"]),
            "input_size_mb": sig(e["input_size_mb"]),
            "output_size_mb": sig(e["output_size_mb"]),
            "memory": memory[e["name"]],
            "work": work[e["name"]],
            # model variants (docs/formats.md): copied from the catalog when it names them
            **{k: e[k] for k in ("function", "accuracy") if e.get(k) is not None},
        }
        for e in traces.catalog
    ]


def execution_time_rank(traces) -> list[tuple[str, float]]:
    """(subtask type, mean execution seconds) from lightest to heaviest."""
    runs = traces.runs
    names = [e["name"] for e in traces.catalog]
    common = set.intersection(*(set(runs.loc[runs["subtask_type"] == n, "batch_size"]) for n in names))
    score = {}
    for n in names:
        r = runs[runs["subtask_type"] == n]
        if common:
            r = r[r["batch_size"].isin(common)]
        score[n] = float(r.groupby("batch_size")["execution_s"].mean().mean())
    return sorted(score.items(), key=lambda kv: (kv[1], kv[0]))


def task_type_blocks(traces) -> tuple[list[dict], dict]:
    ranked = [n for n, _ in execution_time_rank(traces)]
    n_light = math.ceil(len(ranked) / 2)
    groups = {"light": ranked[:n_light], "heavy": ranked[n_light:] or ranked}
    blocks = [
        {"name": name, "subtasks": [groups[kind][i % len(groups[kind])] for i in range(size)]}
        for name, kind, size in TASK_TYPES
    ]
    return blocks, groups


def _round_above(x: float, step: float) -> float:
    return (math.floor(x / step) + 1) * step


def derived_base_profile(traces) -> tuple[dict, dict]:
    """(bundle `derived_base_profile`, details for the report)."""
    detail = {}
    for key, column in (("memory_mb", "memory_mb"), ("cpu_pct", "cpu_pct")):
        per_type = {}
        for name, (sizes, means) in mean_execution(traces, column).items():
            # linear in batch size between measured sizes, like the simulator's memory model
            per_type[name] = float(np.interp(PROFILE_BATCH_SIZE, sizes, means))
        top = max(per_type.items(), key=lambda kv: kv[1])
        detail[key] = {"per_type": per_type, "largest": top}
    profile = {
        "memory_mb": _round_above(detail["memory_mb"]["largest"][1], MEMORY_STEP_MB),
        "cpu_pct": _round_above(detail["cpu_pct"]["largest"][1], CPU_STEP_PCT),
        "paper_memory_mb": PAPER_BASE_PROFILE["memory_mb"],
        "paper_cpu_pct": PAPER_BASE_PROFILE["cpu_pct"],
    }
    return profile, detail
