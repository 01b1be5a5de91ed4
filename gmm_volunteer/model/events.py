"""Scripted perturbations: node overload, node departures, nodes joining (issue 12
item 5; docs/model.md D25; docs/usage.md, "Scripted events").

The paper's users follow stationary laws (paper 2.2). Seed 000's testbed (section 6.1)
instead perturbs its nodes on a script: a node joins (T2), one reboots (T3), two are
overloaded by a stress process (T5) and recover (T6). A run config's ``events`` list
scripts the same kinds of perturbation for any run:

* ``overload``: the nodes' CPU and memory allocations are multiplied by ``factor`` over
  [at_s, at_s + duration_s) (a stress process taking the rest); the server may be one;
* ``depart``: the users go offline at ``at_s`` and are held offline for ``duration_s``;
  then they are in whatever state their own availability process is in by then;
* ``join``: the users are held offline from step 0, come online at ``at_s`` and are held
  online for ``duration_s`` (to the end of the run if not given); then, as for depart,
  their availability process takes over.

While held, a user's availability process goes on in the background (the same keyed
draws, D5), so a script changes nothing else: the other users, and this user once
released, see the same draws as without it (common random numbers). With no events (the
default) nothing changes, bit for bit.

Nodes: ``nodes`` lists node ids (0 = the server, users 1..N), or ``user_range: [a, b]``
takes the users i with a N < i <= b N (users are exchangeable: all follow the same laws).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

FOREVER = 1 << 62  # a hold that lasts to the end of any run


class ScriptedEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: Literal["overload", "depart", "join"]
    at_s: int = Field(ge=0)
    # Length of the perturbation, s; none: to the end of the run.
    duration_s: int | None = Field(None, ge=1)
    nodes: list[int] | None = Field(None, min_length=1)
    user_range: tuple[float, float] | None = None
    # overload only: the share of its CPU and memory allocation a node keeps.
    factor: float | None = Field(None, ge=0, lt=1)

    @model_validator(mode="after")
    def _consistent(self):
        if (self.nodes is None) == (self.user_range is None):
            raise ValueError("give exactly one of nodes and user_range")
        if self.user_range is not None:
            a, b = self.user_range
            if not 0 <= a < b <= 1:
                raise ValueError(f"user_range: need 0 <= a < b <= 1 (got {[a, b]})")
        if self.nodes is not None:
            if any(v < 0 for v in self.nodes):
                raise ValueError("nodes: node ids are >= 0 (0 = the server)")
            if len(set(self.nodes)) != len(self.nodes):
                raise ValueError("nodes: repeated node id")
            if self.kind != "overload" and 0 in self.nodes:
                raise ValueError(f"nodes: the server (0) is always online; it can be overloaded, not {self.kind}")
        if self.kind == "overload":
            if self.factor is None:
                self.factor = 0.1
        elif self.factor is not None:
            raise ValueError(f"factor: applies to overload events only, not {self.kind}")
        return self

    def node_ids(self, n_users: int, n_srv: int = 1) -> np.ndarray:
        """The event's nodes: 0 the (first) server, user i node i; with `n_srv` servers
        the state's nodes, user i at n_srv - 1 + i (docs/model.md D35)."""
        if self.nodes is not None:
            ids = np.array(self.nodes, np.int64)
        else:
            a, b = self.user_range
            lo, hi = math.floor(a * n_users), math.floor(b * n_users)
            ids = np.arange(lo + 1, hi + 1, dtype=np.int64)
        return np.where(ids > 0, ids + (n_srv - 1), ids)

    def end(self) -> int:
        return FOREVER if self.duration_s is None else self.at_s + self.duration_s


def check_events(events: list[ScriptedEvent], n_users: int) -> None:
    """Errors that need the run's size, naming ``events.<i>.<key>`` (a ValueError)."""
    for k, ev in enumerate(events):
        if ev.nodes is not None and max(ev.nodes) > n_users:
            raise ValueError(f"events.{k}.nodes: node {max(ev.nodes)} does not exist "
                             f"(users are 1..{n_users}, 0 is the server)")
        if ev.user_range is not None and ev.node_ids(n_users).size == 0:
            raise ValueError(f"events.{k}.user_range: {list(ev.user_range)} holds none of the "
                             f"{n_users} users")
    # A user held by two availability events at once would have two release times.
    spans: dict[int, list[tuple[int, int, int]]] = {}
    for k, ev in enumerate(events):
        if ev.kind == "overload":
            continue
        start = 0 if ev.kind == "join" else ev.at_s
        for v in ev.node_ids(n_users).tolist():
            for a, b, k2 in spans.get(v, []):
                if start < b and a < ev.end():
                    raise ValueError(f"events.{k}: holds node {v} while events.{k2} holds it "
                                     "(departures and joins of one node must not overlap)")
            spans.setdefault(v, []).append((start, ev.end(), k))


# Actions the script applies at the start of a step, before the dynamics (codes of
# kernels.script): hold offline, hold online, release, set the allocation factor.
HOLD_OFF, HOLD_ON, RELEASE, SCALE = range(4)


class Script:
    """The run's events as actions in step order; `act` applies those due at step t
    (engine.Simulation calls it where the control plane acts, between fused chunks)."""

    def __init__(self, events: list[ScriptedEvent], n_users: int, n_srv: int = 1):
        acts = []  # (step, order, code, nodes, value)
        for ev in events:
            nodes = ev.node_ids(n_users, n_srv)
            if ev.kind == "overload":
                acts.append((ev.at_s, 1, SCALE, nodes, float(ev.factor)))
                if ev.duration_s is not None:
                    acts.append((ev.end(), 0, SCALE, nodes, 1.0))
            elif ev.kind == "depart":
                acts.append((ev.at_s, 1, HOLD_OFF, nodes, float(ev.end())))
                if ev.duration_s is not None:
                    acts.append((ev.end(), 0, RELEASE, nodes, 0.0))
            else:  # join: away from the start, then here
                acts.append((0, 1, HOLD_OFF, nodes, float(ev.at_s)))
                acts.append((ev.at_s, 0, RELEASE, nodes, 0.0))
                acts.append((ev.at_s, 1, HOLD_ON, nodes, float(ev.end())))
                if ev.duration_s is not None:
                    acts.append((ev.end(), 0, RELEASE, nodes, 0.0))
        # releases before new holds at the same step; otherwise in config order
        self.actions = sorted(acts, key=lambda a: (a[0], a[1]))
        self.pos = 0

    def checkpoint_state(self) -> dict:
        """How far the script has come (its actions are rebuilt from the config)."""
        return {"pos": self.pos}

    def restore_checkpoint(self, state: dict) -> None:
        pos = state.get("pos") if isinstance(state, dict) and set(state) == {"pos"} else None
        if type(pos) is not int or not 0 <= pos <= len(self.actions):
            raise ValueError(f"script: position {pos!r} is not within its {len(self.actions)} actions")
        self.pos = pos

    @property
    def next_event(self) -> int | float:
        return self.actions[self.pos][0] if self.pos < len(self.actions) else math.inf

    def act(self, S, P, t: int) -> None:
        from gmm_volunteer.model.kernels.script import hold, release, scale

        while self.pos < len(self.actions) and self.actions[self.pos][0] <= t:
            _, _, code, nodes, value = self.actions[self.pos]
            if code == SCALE:
                scale(S, nodes, value)
            elif code == RELEASE:
                release(S, P, nodes, t)
            else:
                hold(S, P, nodes, code == HOLD_ON, int(value), t)
            self.pos += 1
