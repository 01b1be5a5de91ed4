"""Small, fully specified model bundles for tests and examples.

`synthetic_bundle()` returns a bundle dict (docs/formats.md, section 1) whose every
number is chosen here, with simple closed forms: allocations are ARMA(1, 0) with an
identity Yeo-Johnson transform, phase hazards are constant per phase and subtask type
(geometric durations with the given means), consumption statistics are flat. Tests use
it to check the simulator against known answers without depending on fitted traces.
"""

from __future__ import annotations

import copy
import math

RESOURCES = ("band_in", "band_out", "cpu", "memory", "storage")


def _arma(phi: float = 0.5, sigma: float | None = None) -> dict:
    # Stationary variance 1 unless sigma is given: sigma^2 = 1 - phi^2.
    if sigma is None:
        sigma = math.sqrt(1.0 - phi * phi)
    return {"order": [1, 0], "ar": [phi], "ma": [], "sigma": sigma}


_IDENTITY_YJ = {"lam": 1.0, "z_mean": 0.0, "z_sd": 1.0}


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def synthetic_bundle(
    *,
    data_size_mb=(20.0, 200.0),
    exec_mean_s=(3.0, 8.0),
    transfer_mean_s: float = 2.0,
    exec_memory_mb=((100.0, 150.0), (600.0, 900.0)),
    download_memory_mb: float = 50.0,
    exec_cpu_pct=(80.0, 180.0),
    allocation_mean: float = 0.8,
    allocation_sd: float = 0.1,
) -> dict:
    """A two-subtask-type bundle (light, heavy) with four task types.

    `exec_memory_mb[m]` gives the mean + 2 sd execution memory at batch sizes (1, 10).
    Phase durations are geometric with means `transfer_mean_s` (download, upload) and
    `exec_mean_s[m]` (execution), whatever the consumption, batch size or age.
    """
    names = ("light", "heavy")
    subtask_types = []
    for m, name in enumerate(names):
        subtask_types.append(
            {
                "name": name,
                "description": f"synthetic {name} subtask type",
                "data_size_mb": float(data_size_mb[m]),
                "input_size_mb": 0.2,
                "output_size_mb": 0.01,
                "memory": {
                    "batch_sizes": [1, 10],
                    "execution_mb": [float(x) for x in exec_memory_mb[m]],
                    "download_mb": float(download_memory_mb),
                },
            }
        )
    task_types = [
        {"name": "light5", "subtasks": ["light"] * 5},
        {"name": "light10", "subtasks": ["light"] * 10},
        {"name": "heavy5", "subtasks": ["heavy", "light", "light", "heavy", "light"]},
        {"name": "heavy10", "subtasks": ["heavy", "light"] * 5},
    ]

    def block(mean_rows, sd_frac=0.1):
        return {
            "arma": _arma(0.7),
            "yeo_johnson": dict(_IDENTITY_YJ),
            "stats": {
                "mean": [list(map(float, row)) for row in mean_rows],
                "sd": [[float(x) * sd_frac for x in row] for row in mean_rows],
            },
        }

    band_levels = [10.0, 50.0, 100.0]
    util = [[0.8 * lv for lv in band_levels]] * 2  # transfers use 80 % of the level
    batch_levels = [1.0, 10.0]
    exec_cpu = [[exec_cpu_pct[m], min(exec_cpu_pct[m] * 2.0, 400.0)] for m in range(2)]
    exec_mem = [[exec_memory_mb[m][0] * 0.7, exec_memory_mb[m][1] * 0.7] for m in range(2)]
    flat = lambda v, n: [[v] * n, [v] * n]  # noqa: E731
    consumption = {
        "idw_power": 2.0,
        "stages": {
            "data_download": {
                "level": "band_in",
                "levels": band_levels,
                "resources": {"band_in": block(util), "cpu": block(flat(10.0, 3)), "memory": block(flat(30.0, 3))},
            },
            "input_download": {
                "level": "band_in",
                "levels": band_levels,
                "resources": {"band_in": block(util), "cpu": block(flat(5.0, 3)), "memory": block(flat(40.0, 3))},
            },
            "execution": {
                "level": "batch_size",
                "levels": batch_levels,
                "resources": {"cpu": block(exec_cpu), "memory": block(exec_mem)},
            },
            "upload": {
                "level": "band_out",
                "levels": band_levels,
                "resources": {"band_out": block(util), "cpu": block(flat(5.0, 3)), "memory": block(flat(40.0, 3))},
            },
        },
    }

    def constant_hazard(resource, means):
        # logit h = intercept + type_coef[m], no covariate terms: h = 1 / mean.
        base = _logit(1.0 / means[0])
        return {
            "consumption_resource": resource,
            "covariate_mean": [0.0, 0.0, 0.0],
            "covariate_sd": [1.0, 1.0, 1.0],
            "terms": [],
            "coef": [],
            "intercept": base,
            "type_coef": [_logit(1.0 / mu) - base for mu in means],
        }

    hazard = {
        "degree": 1,
        "phases": {
            "download": constant_hazard("band_in", [transfer_mean_s] * 2),
            "execution": constant_hazard("cpu", list(exec_mean_s)),
            "upload": constant_hazard("band_out", [transfer_mean_s] * 2),
        },
    }
    allocation = {
        r: {"arma": _arma(0.9), "yeo_johnson": dict(_IDENTITY_YJ), "mean": allocation_mean, "sd": allocation_sd}
        for r in RESOURCES
    }
    return copy.deepcopy(
        {
            "format": "gmmv-model-bundle",
            "format_version": 1,
            "provisional": True,
            "created": "synthetic",
            "provenance": "gmm_volunteer.synthetic.synthetic_bundle: every number chosen in code, for tests",
            "resources": list(RESOURCES),
            "allocation": allocation,
            "subtask_types": subtask_types,
            "task_types": task_types,
            "consumption": consumption,
            "hazard": hazard,
        }
    )
