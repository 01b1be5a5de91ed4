"""A `Simulation` between steps as plain data, and back (`run.checkpoint`, format 3;
docs/formats.md, "Checkpoints").

What a run changes is held by name, each part by the object that owns it:

* the engine's own: the step counter ``t``, the step its pools last grew at, the wall
  time so far, the root `SeedSequence` (entropy, spawn key, children spawned) and the
  state arrays (`state.State`, with the random streams and the record so far);
* each policy (executor, scheduler, autoscaler): its class (checked, never imported),
  its Generator ``rng``, and what its ``checkpoint_state`` hook returns
  (`policies.base.checkpoint_refusal` says which policies have one);
* the autoscaler's control plane (units, orders, wishes, actions, its monitor's scrapes)
  and the scripted events' position, through the same pair of hooks.

Everything else (`DERIVED`, the policies' options, the script's actions) is rebuilt from
the config and the model bundle. Restoring builds the policies as a fresh run does
(`Simulation._build_policies`), with throwaway Generators, then hands each part back;
every value is checked on the way (`ValueError` naming where), so a checkpoint that
names no code can at worst fail to load.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.checkpoint_values import seed_sequence, seed_sequence_state

# Attributes of a Simulation rebuilt from the config and the model bundle on resume (the
# kernels' views S and P are rebuilt from the arrays and params).
DERIVED = ("cfg", "bundle", "params", "P", "S", "steps")
HELD = ("seed_seq", "executor", "scheduler", "autoscaler", "control", "script", "arrays", "t",
        "_grown_at", "wall_time_s")
POLICIES = ("executor", "scheduler", "autoscaler")
_KEYS = {"t", "grown_at", "wall_time_s", "seed_seq", "arrays", "control", "script", *POLICIES}


def class_name(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def refusals(cfg) -> list[str]:
    """Why runs of `cfg` cannot be checkpointed: one line per policy without checkpoint
    hooks (policies.base.checkpoint_refusal); empty when they can."""
    from gmm_volunteer.policies.base import checkpoint_refusal
    from gmm_volunteer.policies.registry import resolve

    out = []
    for kind in POLICIES:
        name = getattr(cfg, kind)
        why = checkpoint_refusal(resolve(kind, name))
        if why:
            out.append(f"{kind} {name!r}: {why}")
    return out


def simulation_state(sim) -> dict:
    """What `sim` has changed since it started, as checkpoint values
    (`checkpoint_values.encode` writes them). Raises ValueError for a simulation that
    holds what a checkpoint does not, or a policy without checkpoint hooks."""
    from gmm_volunteer.policies.base import checkpoint_refusal
    from gmm_volunteer.policies.guard import guard

    extra = sorted(set(vars(sim)) - set(HELD) - set(DERIVED))
    if extra:
        raise ValueError(f"the simulation holds {', '.join(extra)}, which a checkpoint does not")
    tree = {"t": int(sim.t), "grown_at": int(sim._grown_at), "wall_time_s": float(sim.wall_time_s),
            "seed_seq": seed_sequence_state(sim.seed_seq), "arrays": dict(sim.arrays._asdict()),
            "control": sim.control.checkpoint_state(), "script": sim.script.checkpoint_state()}
    for kind in POLICIES:
        policy, name = getattr(sim, kind), getattr(sim.cfg, kind)
        why = checkpoint_refusal(type(policy))
        if why:
            raise ValueError(f"{kind} {name!r} cannot be checkpointed: {why}")
        rng = getattr(policy, "rng", None)
        with guard([(kind, name)], "checkpoint_state"):
            own = policy.checkpoint_state()
        if not isinstance(own, dict):
            raise ValueError(f"{kind} {name!r}: checkpoint_state() returned a {type(own).__name__}, not a dict")
        tree[kind] = {"class": class_name(type(policy)),
                      "rng": rng if isinstance(rng, np.random.Generator) else None, "state": own}
    return tree


def _restore_part(what: str, obj, state) -> None:
    try:
        obj.restore_checkpoint(state)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 (a plugin's hook may raise anything)
        raise ValueError(f"{what}: {exc}") from None


def restore_simulation(cfg, bundle, tree):
    """The `Simulation` of `cfg` and `bundle` in the state `tree` (read by
    `checkpoint_values.decode`); ValueError naming the part that is not right."""
    from gmm_volunteer.run.engine import Simulation
    from gmm_volunteer.model.state import State, example_state, pack_state

    if not isinstance(tree, dict) or set(tree) != _KEYS:
        raise ValueError(f"not a simulation's state (keys {', '.join(sorted(_KEYS))})")
    for key, kind in (("t", int), ("grown_at", int), ("wall_time_s", float)):
        if type(tree[key]) is not kind:
            raise ValueError(f"{key}: {tree[key]!r} is not a {kind.__name__}")
    arrays = tree["arrays"]
    if not isinstance(arrays, dict) or set(arrays) != set(State._fields):
        raise ValueError("arrays: not the fields of the simulation's state")
    for field, made in example_state()._asdict().items():  # the kernels' types of the fields
        got = arrays[field]
        if not (isinstance(got, np.ndarray) and got.dtype == made.dtype and got.ndim == made.ndim
                and got.flags.c_contiguous and got.flags.writeable):
            what = f"{got.dtype}, {got.ndim}-d" if isinstance(got, np.ndarray) else type(got).__name__
            raise ValueError(f"arrays.{field}: {what}, where the state holds {made.dtype}, {made.ndim}-d")
    sim = Simulation.__new__(Simulation)
    sim.seed_seq = seed_sequence(tree["seed_seq"])  # the model's distances are drawn from it (D35)
    sim._build_model(cfg, bundle)
    # Throwaway Generators: `reset` may draw from them; the saved ones replace them.
    sim._build_policies(*(np.random.Generator(np.random.PCG64(0)) for _ in POLICIES))
    for kind in POLICIES:
        policy, node = getattr(sim, kind), tree[kind]
        if not isinstance(node, dict) or set(node) != {"class", "rng", "state"}:
            raise ValueError(f"{kind}: not a policy's state (class, rng, state)")
        if node["class"] != class_name(type(policy)):
            raise ValueError(f"{kind}: saved from {node['class']!r}; the config's {getattr(cfg, kind)!r} is "
                             f"{class_name(type(policy))}")
        if node["rng"] is not None:
            if not isinstance(node["rng"], np.random.Generator):
                raise ValueError(f"{kind}.rng: not a Generator")
            policy.rng = node["rng"]
        _restore_part(f"{kind} {getattr(cfg, kind)!r}", policy, node["state"])
    _restore_part("control", sim.control, tree["control"])
    _restore_part("script", sim.script, tree["script"])
    sim.arrays = State(**arrays)
    sim.S = pack_state(sim.arrays)
    sim.t, sim._grown_at, sim.wall_time_s = tree["t"], tree["grown_at"], tree["wall_time_s"]
    return sim
