"""Synthetic traces folder with known parameters (test helper; `traces/FORMAT.md`).

`write_synthetic_traces(root, spec)` writes `resources/`, `subtasks/` and `downloads/`
the way the collectors do, from parameters held in `spec`, so that the fitting pipeline
can be run end to end and its estimates compared with the truth.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gmm_volunteer.model.constants import PHASES


@dataclass
class SyntheticSpec:
    seed: int = 0
    # resource trace: seconds, sampling interval, AR(1) coefficient of each fraction
    duration_s: int = 1800
    interval_s: float = 3.0
    capacity: dict = field(
        default_factory=lambda: {
            "band_in_mbps": 1000.0,
            "band_out_mbps": 1000.0,
            "cpu_pct": 800.0,
            "memory_mb": 16000.0,
            "storage_mb": 500000.0,
        }
    )
    fraction_mean: dict = field(
        default_factory=lambda: {
            "band_in_mbps": 0.8,
            "band_out_mbps": 0.85,
            "cpu_pct": 0.7,
            "memory_mb": 0.5,
            "storage_mb": 0.3,
        }
    )
    fraction_sd: float = 0.05
    phi: float = 0.9
    # subtasks: types (execution cost grows with the index), batch sizes, bandwidth levels
    n_types: int = 3
    batch_sizes: tuple[int, ...] = (1, 2, 5, 10)
    bandwidths_mbps: tuple[float, ...] = (10.0, 50.0)
    reps: int = 3
    # true discrete-time hazard per phase: logit h = b0 + b_c * c/scale_c + b_n * n/10 + b_l * log(age+1)
    hazard: dict = field(
        default_factory=lambda: {
            "download": (-1.0, 0.5, -0.8, 0.3),
            "execution": (-1.5, 0.3, -0.6, 0.4),
            "upload": (-0.5, 0.5, -0.3, 0.2),
        }
    )
    type_effect: float = -0.4  # added to logit h per type index (heavier = slower)
    # subtask-data downloads
    download_levels_mbps: tuple[float, ...] = (5.0, 20.0, 80.0)
    download_reps: int = 2


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """Unit-variance AR(1) path."""
    e = rng.standard_normal(n) * np.sqrt(1 - phi**2)
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


def _catalog(n_types: int) -> list[dict]:
    return [
        {
            "name": f"cv{k}",
            "description": f"synthetic subtask type {k}",
            "weights": "random",
            "data_size_mb": 4.0 + 6.0 * k,
            "input_size_mb": 0.2,
            "output_size_mb": 0.01,
        }
        for k in range(n_types)
    ]


def execution_profile(k: int, batch_size: int) -> tuple[float, float]:
    """True (cpu %, memory MB) mean of subtask type `k` at `batch_size`."""
    return 60.0 + 30.0 * k + 4.0 * batch_size, 200.0 + 150.0 * k + 12.0 * batch_size


def _phase_rows(rng, phase, k, n, bw, spec: SyntheticSpec):
    """Per-second consumption and true duration (s) of one phase, drawn step by step."""
    b0, bc, bn, bl = spec.hazard[phase]
    rows = []
    age = 0
    noise = _ar1(rng, 400, 0.7)
    while True:
        u = noise[age % 400]
        if phase == "execution":
            cpu_m, mem_m = execution_profile(k, n)
            cpu, mem, bin_, bout = cpu_m * (1 + 0.1 * u), mem_m + 10.0 * u, 0.01, 0.01
            c = cpu / 100.0
        elif phase == "download":
            bin_ = bw * (0.9 + 0.05 * u)
            cpu, mem, bout = 8.0 + u, 120.0 + 2.0 * u, 0.05 * bw
            c = bin_ / 50.0
        else:
            bout = bw * (0.9 + 0.05 * u)
            cpu, mem, bin_ = 6.0 + u, 110.0 + 2.0 * u, 0.05 * bw
            c = bout / 50.0
        rows.append((age, max(cpu, 0.0), max(mem, 0.0), max(bin_, 0.0), max(bout, 0.0)))
        logit = b0 + bc * c + bn * n / 10.0 + bl * np.log(age + 1) + spec.type_effect * k
        if rng.random() < 1.0 / (1.0 + np.exp(-logit)) or age > 300:
            seconds = age + 1 - rng.uniform(0.05, 0.95)  # ceil(seconds) = steps
            return rows, seconds
        age += 1


def write_synthetic_traces(root: str | Path, spec: SyntheticSpec | None = None) -> dict:
    """Write a traces folder under `root`; return the true parameters used."""
    import pandas as pd

    spec = spec or SyntheticSpec()
    rng = np.random.default_rng(spec.seed)
    root = Path(root)
    for sub in ("resources", "subtasks", "downloads"):
        (root / sub).mkdir(parents=True, exist_ok=True)

    # resources: AR(1) per resource on the 1 s grid, sampled every interval_s
    n = spec.duration_s + 1
    t_fine = np.arange(n, dtype=float)
    t_obs = np.arange(0.0, spec.duration_s + 1e-9, spec.interval_s)
    res = {"time_s": t_obs}
    for col, cap in spec.capacity.items():
        frac = spec.fraction_mean[col] + spec.fraction_sd * _ar1(rng, n, spec.phi)
        res[col] = np.interp(t_obs, t_fine, np.clip(frac, 0.0, 1.0) * cap)
    pd.DataFrame(res).to_csv(root / "resources" / "resources.csv.gz", index=False)
    machine = {
        "capacity": spec.capacity,
        "cpu_model": "synthetic",
        "cores": int(spec.capacity["cpu_pct"] // 100),
        "ram_mb": spec.capacity["memory_mb"],
        "os": "synthetic",
        "date": "2026-01-01",
        "command": "gmm_volunteer.fitting.synthetic.write_synthetic_traces",
        "interval_s": spec.interval_s,
        "duration_s": spec.duration_s,
        "nics": ["syn0"],
        "bandwidth_method": "synthetic",
    }
    (root / "resources" / "machine.json").write_text(json.dumps(machine, indent=1))

    # subtasks
    catalog = _catalog(spec.n_types)
    (root / "subtasks" / "catalog.json").write_text(json.dumps(catalog, indent=1))
    runs, cons = [], []
    run_id = 0
    for k, entry in enumerate(catalog):
        for bs in spec.batch_sizes:
            for bw in spec.bandwidths_mbps:
                for _ in range(spec.reps):
                    durations = {}
                    for phase in PHASES:
                        rows, seconds = _phase_rows(rng, phase, k, bs, bw, spec)
                        durations[phase] = seconds
                        cons += [(run_id, phase, *r) for r in rows]
                    runs.append((run_id, entry["name"], bs, bw, durations["download"], durations["execution"], durations["upload"]))
                    run_id += 1
    pd.DataFrame(runs, columns=["run_id", "subtask_type", "batch_size", "bandwidth_mbps", "download_s", "execution_s", "upload_s"]).to_csv(
        root / "subtasks" / "runs.csv.gz", index=False
    )
    pd.DataFrame(cons, columns=["run_id", "phase", "t", "cpu_pct", "memory_mb", "band_in_mbps", "band_out_mbps"]).to_csv(
        root / "subtasks" / "consumption.csv.gz", index=False
    )

    # subtask-data downloads at each level
    dl = []
    run_id = 0
    for level in spec.download_levels_mbps:
        for k, entry in enumerate(catalog):
            for _ in range(spec.download_reps):
                left = entry["data_size_mb"]
                noise = _ar1(rng, 2000, 0.6)
                t = 0
                while left > 1e-9 and t < 2000:
                    band = level * (0.92 + 0.04 * noise[t])
                    delta = min(band / 8.0, left)
                    left -= delta
                    dl.append((level, run_id, t, delta * 8.0, 5.0 + 0.5 * noise[t], 90.0 + 3.0 * noise[t], delta))
                    t += 1
                run_id += 1
    pd.DataFrame(dl, columns=["level_mbps", "run_id", "t", "band_in_mbps", "cpu_pct", "memory_mb", "storage_delta_mb"]).to_csv(
        root / "downloads" / "downloads.csv.gz", index=False
    )
    levels = {
        "levels_mbps": list(spec.download_levels_mbps),
        "thresholds_mbps": [],
        "source": "synthetic",
        "n_samples": len(t_obs),
        "preliminary": True,
        "method": "lloyd_max",
        "iters": 0,
    }
    (root / "downloads" / "levels.json").write_text(json.dumps(levels))
    return {"spec": spec, "catalog": catalog}
