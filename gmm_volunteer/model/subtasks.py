"""The catalogue of subtasks a run keys its readiness, storage and batches by (paper
2.2; docs/model.md D7), and the model variants that may serve each (D24): what
`params.build_params` compiles from the bundle's task and subtask types."""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.bundle import Bundle


def subtask_keys(bundle: Bundle, per_model: bool):
    """(task_sub, sub_type): the subtask j of each (task type k, slot p), -1 past the
    type's slots, and the subtask type each j runs (docs/model.md D7).

    Per model, slots that run the same subtask type share one j (one copy of its data on
    a node, one batch); per slot, every (k, p) is a j of its own (paper 2.2)."""
    type_index = {s.name: m for m, s in enumerate(bundle.subtask_types)}
    n_task = len(bundle.task_types)
    task_sub = -np.ones((n_task, max(len(t.subtasks) for t in bundle.task_types)), np.int64)
    sub_type: list[int] = []
    key_of: dict[int, int] = {}
    for k, task in enumerate(bundle.task_types):
        for p, name in enumerate(task.subtasks):
            m = type_index[name]
            if not per_model or m not in key_of:
                key_of[m] = len(sub_type)
                sub_type.append(m)
            task_sub[k, p] = key_of[m]
    return task_sub, np.array(sub_type, np.int64)


def variant_tables(bundle: Bundle, task_sub, task_nsub, sub_type, enabled: bool, per_model: bool):
    """Model variants (issue 12 item 1; docs/model.md D24).

    Subtask j < n_req is a requested one; with variants enabled, every requested j whose
    subtask type names a `function` shared by other types may also be served by those
    types. Per model (D7), the variant of another type is that type's own subtask (its
    data is the same file), appended after the requested ones only if no slot requests
    it; per slot, it is one more subtask per (requested j, other type), with its own
    data, as the paper keys readiness by (v, k, p).
    Returns (sub_type, sub_acc, var_list, var_n, task_nacc): the extended type of each
    subtask, its accuracy (0 when its type gives none), the subtasks that may serve each
    requested one (itself first) and their number, and per task type the slots whose
    type has an accuracy."""
    st = bundle.subtask_types
    n_req = len(sub_type)
    types = list(sub_type)
    alts = [[j] for j in range(n_req)]
    if enabled:
        for j in range(n_req):
            f = st[sub_type[j]].function
            if f is None:
                continue
            for m, other in enumerate(st):
                if m == sub_type[j] or other.function != f:
                    continue
                if per_model and m in types:
                    alts[j].append(types.index(m))
                else:
                    alts[j].append(len(types))
                    types.append(m)
    sub_acc = np.array([st[m].accuracy or 0.0 for m in types])
    width = max(len(a) for a in alts)
    var_list = np.full((n_req, width), -1, np.int64)
    for j, a in enumerate(alts):
        var_list[j, : len(a)] = a
    task_nacc = np.array([sum(1 for p in range(task_nsub[k]) if sub_acc[task_sub[k, p]] > 0)
                          for k in range(len(task_nsub))], np.int64)
    return (np.array(types, np.int64), sub_acc, var_list,
            np.array([len(a) for a in alts], np.int64), task_nacc)
