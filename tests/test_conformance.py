"""The policy conformance checker (testing/conformance.py) over every registered policy
and the example plugin, and on broken policies it must reject."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numba import njit
from pydantic import BaseModel, ConfigDict

from gmm_volunteer.model.actions import assign, pending_requests_fifo
from gmm_volunteer.policies import executor_names, scheduler_names
from gmm_volunteer.policies.base import Scheduler
from gmm_volunteer.testing.conformance import ConformanceError, check_policy
from gmm_volunteer.policies.uniform import uniform_downloads, uniform_place

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def example_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES / "least_loaded"))


@pytest.mark.parametrize("name", scheduler_names())
def test_registered_schedulers_conform(synthetic_model, name):
    assert "determinism" in check_policy("scheduler", name, model=synthetic_model)


@pytest.mark.parametrize("name", executor_names())
def test_registered_executors_conform(synthetic_model, name):
    assert "invariants every step" in check_policy("executor", name, model=synthetic_model)


def test_example_plugin_conforms(synthetic_model, example_path):
    check_policy("scheduler", "least_loaded:LeastLoaded", {"max_downloads_per_node": 2},
                 model=synthetic_model)


# -- policies the checker must reject ---------------------------------------------------


class LaxOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a typo in the config would pass unseen


class LaxUniform(Scheduler):
    Options = LaxOptions
    downloads = uniform_downloads
    place = uniform_place

    def kernel_args(self):
        return (8, 1)


@njit(cache=True)
def global_random_place(S, P, t, args):
    # Draws from numba's own global generator, not the state's seeded streams.
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] < 0 and np.random.random() < 0.5:
                assign(S, P, i, p, 0, t)


class GlobalRandom(Scheduler):
    place = global_random_place


@njit(cache=True)
def anywhere_place(S, P, t, args):
    # Places everything on the first online user, whether it holds the data or not.
    if S.n_on[0] == 0:
        return
    v = S.on_list[0]
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] < 0:
                assign(S, P, i, p, v, t)


class Anywhere(Scheduler):
    place = anywhere_place


@pytest.mark.parametrize("name, message", [
    ("LaxUniform", "unknown option key was accepted"),
    ("GlobalRandom", "same seed, different records"),
    ("Anywhere", "invariant broken"),
])
def test_broken_policies_are_rejected(synthetic_model, name, message):
    with pytest.raises(ConformanceError, match=message):
        check_policy("scheduler", f"{__name__}:{name}", model=synthetic_model, steps=100)


def test_overriding_act_is_refused():
    with pytest.raises(TypeError, match="overrides Scheduler.act"):
        class Skips(Scheduler):  # noqa: F841
            place = uniform_place

            def act(self, S, P, t):
                pass
