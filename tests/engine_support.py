"""Shared set-up for simulator tests: a synthetic bundle on disk and quick configs."""

from __future__ import annotations

from pathlib import Path

from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.testing.synthetic import synthetic_bundle


def bundle_dir(tmp: Path, **kwargs) -> Path:
    path = Path(tmp) / "bundle"
    if not (path / "bundle.yaml").exists():
        write_bundle(synthetic_bundle(**kwargs), path)
    return path


def make_config(model: Path, *, users=50, steps=300, scheduler="uniform", seed=1, server=10.0,
                user_capacity=1.0, initial_data="filled", **extra):
    d = {
        "steps": steps,
        "seed": seed,
        "users": {"count": users, "capacity": user_capacity, "initial_data": initial_data},
        "server": {"capacity": server},
        "scheduler": scheduler,
        "model": str(model),
    }
    d.update(extra)
    return config_from_dict(d)
