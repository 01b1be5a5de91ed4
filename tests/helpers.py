"""Seeded synthetic run records for tests of the result store, sweeps and analysis.

`make_record` builds a `RunRecord` with the shapes and dtypes the engine produces, from
a seed alone, so tests of the writer and the analysis never need the simulator.
`fake_simulate` has the signature of `engine.simulate` and derives its record from the
config's fields (users, capacities, scheduler, seed), cheaply and deterministically.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.io.runrecord import EVENTS, NODE_CLASSES, RESOURCES, RunRecord

TYPE_NAMES = ("light5", "light10", "heavy5", "heavy10")
TYPE_PROBS = (0.4, 0.3, 0.2, 0.1)


def make_record(
    seed: int = 0,
    steps: int = 400,
    n_requests: int = 1000,
    users: int = 50,
    latency_scale: float = 20.0,
    outcome_probs=(0.7, 0.2, 0.1),
    attrs: dict | None = None,
) -> RunRecord:
    """A synthetic but well-formed record: requests inside [0, steps), positive series."""
    rng = np.random.default_rng(seed)
    n_res = len(RESOURCES)
    req_type = rng.choice(len(TYPE_NAMES), size=n_requests, p=TYPE_PROBS).astype(np.int8)
    # Heavier types take longer: a per-type factor makes per-type quantiles differ.
    factor = np.array([1.0, 1.5, 2.0, 3.0])[req_type]
    latency = np.floor(rng.exponential(latency_scale * factor)).astype(np.int64)
    latency = np.minimum(latency, steps - 1)
    start = rng.integers(0, steps - latency, dtype=np.int64)
    end = start + latency
    outcome = rng.choice(3, size=n_requests, p=outcome_probs).astype(np.int8)
    alloc = (rng.uniform(0.5, 1.0, size=(steps, n_res)) * np.array([1000, 1000, 2000, 25000, 30000])).astype(np.float32)
    cons = (alloc * rng.uniform(0.1, 1.2, size=(steps, n_res))).astype(np.float32)
    user_cons = (rng.gamma(2.0, 50.0, size=(steps, n_res))).astype(np.float32)
    events = rng.poisson(3.0, size=(steps, len(NODE_CLASSES), len(EVENTS))).astype(np.int32)
    # Completions never exceed starts over the run (rate <= 1), as in the engine.
    events[:, :, 1] = rng.binomial(events[:, :, 0], 0.8).astype(np.int32)
    base_attrs = {
        "config": f"seed: {seed}\nsteps: {steps}\n",
        "seed_entropy": str(seed),
        "model_bundle": "gmm_volunteer/bundles/default",
        "model_provisional": True,
        "users": users,
        "scheduler": "uniform",
        "user_capacity": 1.0,
        "server_capacity": 10.0,
        "wall_time_s": 0.5,
    }
    base_attrs.update(attrs or {})
    return RunRecord(
        request_user=rng.integers(1, users + 1, size=n_requests).astype(np.int32),
        request_type=req_type,
        request_start=start,
        request_end=end,
        request_outcome=outcome,
        online_users=rng.integers(0, users + 1, size=steps).astype(np.int32),
        active_requests=rng.integers(0, users + 1, size=steps).astype(np.int32),
        server_allocation=alloc,
        server_consumption=cons,
        user_consumption=user_cons,
        subtask_events=events,
        # Work finished never exceeds the CPU consumed (CPU-s = % / 100 over a 1 s step).
        completed_work=(np.stack([cons[:, 2], user_cons[:, 2]], axis=1) / 100.0
                        * rng.uniform(0.0, 1.0, size=(steps, 2))).astype(np.float32),
        request_type_names=TYPE_NAMES,
        attrs=base_attrs,
    )


def _field(cfg, dotted: str):
    obj = cfg
    for part in dotted.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


SCHEDULER_SPEED = {"centralized": 1.0, "uniform": 0.7, "affinity": 0.85}


def fake_simulate(cfg, progress: bool = False) -> RunRecord:
    """Stand-in for `engine.simulate`: cheap, deterministic in the config.

    Latency scale falls with server capacity and rises with users, so analysis and
    figures have a visible structure; the seed alone drives the randomness (common
    random numbers across schedulers and capacities).
    """
    seed = int(_field(cfg, "seed"))
    users = int(_field(cfg, "users.count"))
    ucap = float(_field(cfg, "users.capacity"))
    scap = float(_field(cfg, "server.capacity"))
    scheduler = str(_field(cfg, "scheduler"))
    steps = int(_field(cfg, "steps"))
    scale = 30.0 * SCHEDULER_SPEED.get(scheduler, 1.0) * (users / 100.0) ** 0.3 / (scap * ucap / 10.0) ** 0.5
    rec = make_record(
        seed=seed, steps=steps, n_requests=max(50, users), users=users,
        latency_scale=scale,
        attrs={"users": users, "scheduler": scheduler, "user_capacity": ucap,
               "server_capacity": scap, **_identity(cfg, seed)},
    )
    return rec


_DIGESTS: dict = {}


def _identity(cfg, seed) -> dict:
    """What the engine records about the run that made a store (config text and model
    digest), so that a sweep resumed over fake stores keeps them as it keeps real ones."""
    if not hasattr(cfg, "to_yaml"):
        return {"config": f"seed: {seed}\n"}
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import bundle_digest

    model = str(cfg.model)
    if model not in _DIGESTS:
        _DIGESTS[model] = bundle_digest(load_bundle(model))
    return {"config": cfg.to_yaml(), "model_sha256": _DIGESTS[model]}


def failing_simulate(cfg, progress: bool = False) -> RunRecord:
    """Like `fake_simulate`, but fails for the 'affinity' scheduler (tests error reporting)."""
    if str(_field(cfg, "scheduler")) == "affinity":
        raise RuntimeError("synthetic failure for scheduler affinity")
    return fake_simulate(cfg, progress)


# -- sweep fixtures -------------------------------------------------------------------

PAPER_SCHEDULERS = ("centralized", "uniform", "affinity")


def ensure_schedulers(names=PAPER_SCHEDULERS) -> None:
    """Make configs naming the paper's schedulers validate even before the real policies
    are registered (sweep tests never run a policy: they use `fake_simulate`)."""
    from gmm_volunteer.policies import registry

    known = registry.scheduler_names()  # loads the built-in policies first
    for name in names:
        if name not in known:
            registry.register_scheduler(name)(lambda **options: None)
    if "default" not in registry.executor_names():
        registry.register_executor("default")(lambda **options: None)


def write_tiny_grid(tmp_path, grid: dict | None = None, seeds=2, steps=300, output=None) -> "Path":
    """A base config + grid file under `tmp_path`; returns the grid file path."""
    from pathlib import Path

    import yaml

    ensure_schedulers()
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    from engine_support import bundle_dir

    bundle_dir(tmp_path)  # a valid (synthetic) bundle: grids are checked against it
    base = {
        "seed": 0, "steps": steps,
        "users": {"count": 100, "capacity": 1}, "server": {"capacity": 10},
        "scheduler": "uniform", "model": "bundle",
    }
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    spec = {
        "base": "base.yaml",
        "grid": grid or {
            "users.count": [100, 1000],
            "server.capacity": [10, 30],
            "scheduler": ["centralized", "uniform"],
        },
        "seeds": seeds,
        "output": str(output or tmp_path / "out"),
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
