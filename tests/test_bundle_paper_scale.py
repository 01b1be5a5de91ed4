"""The paper-scale bundle (`model: paper-scale`, gmm_volunteer/bundles/paper-scale): it
loads, a short run works, and the bundle's own base-profile rule lands on the paper's
profile (paper 3.1: memory and CPU "slightly above the largest measured average subtask
consumption at batch size 2": 2,500 MB, 200 %)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmm_volunteer.fitting.catalog import CPU_STEP_PCT, MEMORY_STEP_MB, PAPER_BASE_PROFILE
from gmm_volunteer.io.bundlefiles import PACKAGED, load_bundle, packaged_bundle
from gmm_volunteer.run.config import load_config

SHIPPED = PACKAGED / "paper-scale"


def test_paper_scale_is_shipped_fitted_and_not_provisional():
    assert packaged_bundle("paper-scale") == SHIPPED
    b = load_bundle(SHIPPED)
    assert b.provisional is False
    assert len({s.name for s in b.subtask_types}) >= 10  # task types do not cycle a few models


def test_derived_base_profile_is_within_one_rounding_step_of_the_papers():
    p = load_bundle(SHIPPED).derived_base_profile
    assert abs(p["memory_mb"] - PAPER_BASE_PROFILE["memory_mb"]) <= MEMORY_STEP_MB
    assert abs(p["cpu_pct"] - PAPER_BASE_PROFILE["cpu_pct"]) <= CPU_STEP_PCT


def test_storage_holds_one_large_model_and_a_few_small_ones():
    """Paper 3.1: 3 GB "can hold several small subtasks or one large subtask with a few
    smaller ones"."""
    sizes = sorted(s.data_size_mb for s in load_bundle(SHIPPED).subtask_types)
    assert sizes[-1] + sum(sizes[:3]) <= 3000.0


def test_a_short_run_on_paper_scale(tmp_path):
    from gmm_volunteer.run.engine import simulate

    cfg_path = Path(tmp_path) / "run.yaml"
    cfg_path.write_text("steps: 600\nseed: 3\nusers: {count: 100, capacity: 1}\nserver: {capacity: 10}\n"
                        "scheduler: uniform\nmodel: paper-scale\n")
    cfg = load_config(cfg_path)
    assert Path(cfg.model) == SHIPPED.resolve()
    rec = simulate(cfg, progress=False)
    assert rec.steps == 600
    assert rec.online_users.max() > 0
    # requests end (completed, abandoned or dropped) and work is done on the paper-scale types
    assert len(rec.request_end) > 0
    assert float(rec.completed_work.sum()) > 0
