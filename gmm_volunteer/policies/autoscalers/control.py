"""The control plane: how an autoscaler's wishes become server capacity (issue 11 item 2;
docs/model.md D17).

Every ``period`` steps the autoscaler is asked for the units it wants, given the latest
observation its monitor lets it see. The control plane then, at the start of step t
(before the dynamics of t, so the allocation a_t already sees a change that takes effect
at t):

* clips the wish to [min_units, max_units];
* **scale-out**: units above the ordered total are ordered now and take effect
  ``provisioning_delay`` steps later (a replica that is starting serves nothing);
* **scale-in**: the recommendation actually followed is the largest wish of the last
  ``cooldown`` seconds (the stabilization window of a horizontal pod autoscaler), so
  capacity is removed only when every wish for that long was lower, and never within
  ``cooldown`` seconds of a wish that ordered more. Orders still provisioning are
  cancelled first (latest first); then units in effect are removed at once (a removed
  replica's work is lost like any allocation drop: the server's CPU share shrinks and
  the executor aborts batches that no longer fit its memory, D11).

Every action is recorded as (step ordered, step effective or -1 if cancelled, units
from, units to), and the capacity in effect per step is the series ``server_capacity``
of the result store. The ``fixed`` autoscaler never acts: no event is scheduled and the
fused runner runs exactly as without a control plane.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from gmm_volunteer.policies.autoscalers.monitor import Monitor

NEVER = np.iinfo(np.int64).max


def autoscaler_generator(seed_seq: np.random.SeedSequence) -> np.random.Generator:
    """The autoscaler's own Generator, derived without spawning from `seed_seq` (spawning
    would shift the children the other streams get, and with them every trajectory)."""
    ss = np.random.SeedSequence(seed_seq.entropy, spawn_key=tuple(seed_seq.spawn_key) + (0x5CA1E,))
    return np.random.Generator(np.random.PCG64(ss))


class ControlPlane:
    def __init__(self, autoscaler, cfg, params):
        self.autoscaler = autoscaler
        self.base = np.asarray(cfg.base_profile.as_array(), np.float64)
        # The server it scales (D35): `autoscaler_options.server`, the first by default
        # (a bare namespace with one `server` has only that).
        name = getattr(getattr(autoscaler, "options", None), "server", None)
        names = cfg.server_names() if hasattr(cfg, "server_names") else [None]
        self.server = names.index(name) if name in names else 0
        maxima = getattr(params, "sv_amax", None)  # each server's (D35); a namespace may give amax only
        self.fixed_capacity = np.array(params.amax[0] if maxima is None else maxima[self.server],
                                       np.float64)  # capacity x base
        self.scales = bool(getattr(autoscaler, "scales", False))
        self.actions: list[tuple[int, int, int, int]] = []
        self._changes: list[tuple[int, int]] = []  # (step, units in effect from then)
        if not self.scales:
            self.units = self.target = None
            self.next_event = NEVER
            return
        o = autoscaler.options
        self.o = o
        init = o.initial_units
        if init is None:
            # the server it scales (D35); a bare namespace with one `server` has only that
            scaled = cfg.server_named(o.server) if hasattr(cfg, "server_named") else cfg.server
            init = int(np.clip(round(float(scaled.capacity) / o.unit), o.min_units, o.max_units))
        self.units = self.target = int(init)
        self._changes.append((0, self.units))
        self.pending: list[list[int]] = []  # [step ordered, step effective, from, to]
        # The initial units count as a wish at step 0, so they too hold for a cooldown.
        self.recommendations: deque[tuple[int, int]] = deque([(0, self.units)])
        self.monitor = Monitor(o.monitor.period, o.monitor.lag, o.monitor.window)
        self.next_event = 1
        autoscaler.bind(self)

    # -- capacity ---------------------------------------------------------------------

    def capacity_of(self, units: int) -> np.ndarray:
        return self.base * (units * self.o.unit)

    def _cap(self, arrays) -> np.ndarray:
        """The scaled server's maximum allocation in the state (a view)."""
        n = self.base.size
        return arrays.srv_cap[self.server * n:(self.server + 1) * n]

    def start(self, arrays) -> None:
        """Set the initial capacity (before the state is initialized)."""
        if self.scales:
            self._cap(arrays)[:] = self.capacity_of(self.units)
            self.monitor.start(arrays)

    def _set_units(self, arrays, units: int, t: int) -> None:
        self.units = int(units)
        self._cap(arrays)[:] = self.capacity_of(self.units)
        self._changes.append((t, self.units))

    # -- acting -----------------------------------------------------------------------

    def act(self, arrays, t: int) -> None:
        """Everything due at the start of step t: scrape, decide, apply due orders."""
        if not self.scales:
            return
        o = self.o
        if self.monitor.due(t):
            self.monitor.scrape(arrays, t, self.units, self.server)
        if t > 0 and t % o.period == 0:
            obs = self.monitor.visible(t)
            raw = self.autoscaler.desired(obs, self.target, t)
            if isinstance(raw, bool) or not isinstance(raw, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(raw):
                raise ValueError(f"desired() returned {raw!r} at step {t}; it must return a whole "
                                 f"number of units")
            want = int(raw)
            self._reconcile(arrays, min(max(want, o.min_units), o.max_units), t)
        for order in [p for p in self.pending if p[1] <= t]:
            self.pending.remove(order)
            self._set_units(arrays, self.units + (order[3] - order[2]), t)
        self.next_event = min([self.monitor.next_event(t), (t // o.period + 1) * o.period]
                              + [p[1] for p in self.pending])

    def _reconcile(self, arrays, want: int, t: int) -> None:
        o = self.o
        while self.recommendations and self.recommendations[0][0] <= t - o.cooldown:
            self.recommendations.popleft()
        self.recommendations.append((t, want))
        if want > self.target:
            order = [t, t + o.provisioning_delay, self.target, want]
            self.pending.append(order)
            self.actions.append(tuple(order))
            self.target = want
            return
        stable = max(w for _, w in self.recommendations)  # the largest wish within the cooldown
        if stable >= self.target:
            return
        while self.pending and self.target > stable:  # cancel what is still provisioning
            order = self.pending[-1]
            if order[2] >= stable:
                self.pending.pop()
                self.actions.append((order[0], -1, order[2], order[3]))
                self.target = order[2]
            else:  # shrink the order
                self.actions.append((order[0], -1, stable, order[3]))
                order[3] = stable
                self.target = stable
        if self.target > stable:
            self.actions.append((t, t, self.target, stable))
            self._set_units(arrays, self.units - (self.target - stable), t)
            self.target = stable

    # -- checkpoints (run.checkpoint) ---------------------------------------------------

    def checkpoint_state(self) -> dict:
        """What acting changed: units, orders, wishes, actions and the monitor's state
        (nothing for an autoscaler that does not scale)."""
        if not self.scales:
            return {}
        def ints(rows, kind):
            return [kind(int(x) for x in r) for r in rows]

        return {"units": int(self.units), "target": int(self.target), "next_event": int(self.next_event),
                "actions": ints(self.actions, tuple), "changes": ints(self._changes, tuple),
                "pending": ints(self.pending, list), "recommendations": ints(self.recommendations, tuple),
                "monitor": self.monitor.checkpoint_state()}

    def restore_checkpoint(self, state: dict) -> None:
        """Take back `checkpoint_state`'s values (ValueError naming what is not right)."""
        if not self.scales:
            if state != {}:
                raise ValueError("control: holds a scaling state, but the autoscaler does not scale")
            return
        keys = {"units", "target", "next_event", "actions", "changes", "pending", "recommendations", "monitor"}
        if not isinstance(state, dict) or set(state) != keys:
            raise ValueError(f"control: not a control plane's state ({', '.join(sorted(keys))})")
        for key in ("units", "target", "next_event"):
            if type(state[key]) is not int or state[key] < 0:
                raise ValueError(f"control.{key}: {state[key]!r} is not a whole number >= 0")

        def rows(key, kind, width):
            got = state[key]
            if not (isinstance(got, list) and all(type(r) is kind and len(r) == width
                                                  and all(type(x) is int for x in r) for r in got)):
                raise ValueError(f"control.{key}: not a list of {width}-{kind.__name__}s of whole numbers")
            return got

        self.actions = rows("actions", tuple, 4)
        self._changes = rows("changes", tuple, 2)
        self.pending = rows("pending", list, 4)
        self.recommendations = deque(rows("recommendations", tuple, 2))
        self.units, self.target, self.next_event = state["units"], state["target"], state["next_event"]
        self.monitor.restore_checkpoint(state["monitor"])

    # -- record -----------------------------------------------------------------------

    def capacity_series(self, steps: int) -> np.ndarray:
        """(steps, N_RES) float32: the scaled server's maximum allocation in effect per step
        (the first server's when nothing scales)."""
        if not self.scales:
            return np.broadcast_to(self.fixed_capacity.astype(np.float32), (steps, self.base.size)).copy()
        units = self.units_series(steps)
        return (units[:, None] * self.o.unit * self.base[None, :]).astype(np.float32)

    def units_series(self, steps: int) -> np.ndarray:
        out = np.zeros(steps, np.float64)
        for t, u in self._changes:
            if t < steps:
                out[t:] = u
        return out

    def action_costs(self, steps: int) -> np.ndarray:
        """Capacity-hours each action added (negative: removed) from the step it took
        effect to the end of the run, in capacity multiplier x h (x base_profile, so x
        base_profile.cpu / 100 for core-hours); 0 for a cancelled order. Their sum plus
        the initial capacity x run length is the run's capacity-hours (telescoping)."""
        acts = self.action_table()
        unit = self.o.unit if self.scales else 0.0
        live = (acts[:, 1] >= 0) & (acts[:, 1] < steps)
        return np.where(live, (acts[:, 3] - acts[:, 2]) * unit * (steps - acts[:, 1]) / 3600.0, 0.0)

    def action_table(self) -> np.ndarray:
        """(n_actions, 4) int64: step ordered, step effective (-1: cancelled), from, to."""
        return np.asarray(self.actions, np.int64).reshape(-1, 4)
