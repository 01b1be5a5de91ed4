"""The merge table (kernels/ops.py: `merge_record`, `merge_lookup`) against the dense
index per (node, subtask, phase) it replaced (paper 2.2: subtasks of the same node,
subtask type, phase and age form one batch)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.kernels.ops import merge_lookup, merge_record
from gmm_volunteer.model.state import merge_table_size, pack_state


def _small_table(sim, size):
    """`sim` with a merge table of `size` slots, so that keys collide and probe."""
    a = sim.arrays
    sim.arrays = a._replace(mg_key=np.zeros(size, np.int64), mg_id=np.full(size, -1, np.int32),
                            mg_t=np.full(size, -1, np.int64))
    sim.S = pack_state(sim.arrays)


@pytest.mark.parametrize("size", [8, 16, 1024])
def test_lookups_match_a_dense_index_over_random_records(synthetic_model, size):
    sim = Simulation(make_config(synthetic_model, users=40, steps=10))
    _small_table(sim, size)
    S, P = sim.S, sim.P
    g = np.random.default_rng(size)
    dense = {}  # (v, j, phase) -> (batch, step), the old mg_id / mg_t
    n_keys = size // 2  # distinct keys per step: at most half the table, as the pool bound ensures
    for t in range(300):
        keys = [(int(g.integers(0, 41)), int(g.integers(0, sim.params.n_sub)), int(g.integers(0, 4)))
                for _ in range(n_keys)]
        for _ in range(3 * n_keys):
            v, j, ph = keys[g.integers(0, n_keys)]
            if g.random() < 0.5:
                b = int(g.integers(0, 10_000))
                merge_record(S, P, b, v, j, ph, t)
                dense[v, j, ph] = (b, t)
            b, at = dense.get((v, j, ph), (-1, -1))
            assert merge_lookup(S, P, v, j, ph, t) == (b if at == t else -1)
        # Keys of earlier steps, and keys never recorded, are absent in this step.
        for v, j, ph in list(dense)[:20]:
            b, at = dense[v, j, ph]
            assert merge_lookup(S, P, v, j, ph, t) == (b if at == t else -1)


def test_table_size_is_a_power_of_two_with_four_slots_per_batch():
    for cap in (1, 3, 256, 257, 500_000):
        size = merge_table_size(cap)
        assert size & (size - 1) == 0 and 4 * cap <= size < 8 * cap


@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_every_batch_formed_this_step_is_found(synthetic_model, scheduler):
    """After every step, each live batch formed in it (age 0) is the one the table gives
    for its (node, subtask, phase), as the dense index held."""
    sim = Simulation(make_config(synthetic_model, users=300, steps=400, scheduler=scheduler))
    _small_table(sim, merge_table_size(sim.arrays.b_node.shape[0]))
    formed = 0
    while sim.t < sim.steps:
        t = sim.t
        sim.step()
        S, a = sim.S, sim.arrays
        live = a.b_list[: a.n_b[0]]
        now = live[(a.b_born[live] == t) & (a.b_age[live] == 0)]
        keys = set()
        for b in now:
            key = (int(a.b_node[b]), int(a.b_sub[b]), int(a.b_phase[b]))
            assert key not in keys  # batching: one batch per key and step
            keys.add(key)
            assert merge_lookup(S, sim.P, *key, t) == b
        formed += now.size
    assert a.mg_key.shape[0] == merge_table_size(a.b_node.shape[0])
    assert formed > 100  # the check above saw batches
