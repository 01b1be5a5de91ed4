"""Small, fully specified model bundles for tests and examples.

`synthetic_bundle()` returns a bundle dict (docs/formats.md, section 1) whose every
number is chosen here, with simple closed forms: allocations are ARMA(1, 0) with an
identity Yeo-Johnson transform, execution work is the given mean time at the given CPU
demand, consumption statistics are flat. `queueing_bundle()` is the single-job-type
bundle of the checks against queueing theory (exponential work, constant demand). Tests
use them to check the simulator against known answers without depending on fitted
traces.
"""

from __future__ import annotations

import copy
import math

from gmm_volunteer.model.constants import PHASES, RESOURCES


def _arma(phi: float = 0.5, sigma: float | None = None) -> dict:
    # Stationary variance 1 unless sigma is given: sigma^2 = 1 - phi^2.
    if sigma is None:
        sigma = math.sqrt(1.0 - phi * phi)
    return {"order": [1, 0], "ar": [phi], "ma": [], "sigma": sigma}


_IDENTITY_YJ = {"lam": 1.0, "z_mean": 0.0, "z_sd": 1.0}


def synthetic_bundle(
    *,
    data_size_mb=(20.0, 200.0),
    exec_mean_s=(3.0, 8.0),
    exec_memory_mb=((100.0, 150.0), (600.0, 900.0)),
    download_memory_mb: float = 50.0,
    exec_cpu_pct=(80.0, 180.0),
    work_log_sd: float = 0.3,
    allocation_mean: float = 0.8,
    allocation_sd: float = 0.1,
) -> dict:
    """A two-subtask-type bundle (light, heavy) with four task types.

    `exec_memory_mb[m]` gives the mean + 2 sd execution memory at batch sizes (1, 10).
    A batch of type m asks for `exec_cpu_pct[m]` % CPU at batch size 1 (twice that at
    10) and needs `exec_mean_s[m]` seconds of that demand on average (lognormal work
    with log-sd `work_log_sd`), so it executes in about `exec_mean_s[m]` when granted
    what it asks for and proportionally longer when not.
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
                "work": {
                    "distribution": "lognormal",
                    "batch_sizes": [1, 10],
                    "mean_cpu_s": [exec_mean_s[m] * exec_cpu_pct[m] / 100.0,
                                   exec_mean_s[m] * min(exec_cpu_pct[m] * 2.0, 400.0) / 100.0],
                    "log_sd": float(work_log_sd),
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

    allocation = {
        r: {"arma": _arma(0.9), "yeo_johnson": dict(_IDENTITY_YJ), "mean": allocation_mean, "sd": allocation_sd}
        for r in RESOURCES
    }
    return copy.deepcopy(
        {
            "format": "gmmv-model-bundle",
            "format_version": 2,
            "provisional": True,
            "created": "synthetic",
            "provenance": "gmm_volunteer.testing.synthetic.synthetic_bundle: every number chosen in code, for tests",
            "resources": list(RESOURCES),
            "allocation": allocation,
            "subtask_types": subtask_types,
            "task_types": task_types,
            "consumption": consumption,
        }
    )


def queueing_bundle(*, mean_work_s: float = 10.0, demand_pct: float = 100.0, memory_mb: float = 1.0) -> dict:
    """One subtask type `job` and one task type `single` of one job: the closed network
    of the checks against queueing theory (docs/validation.md).

    A job's work is exponential with mean `mean_work_s` CPU-seconds; it asks for exactly
    `demand_pct` % CPU every step (consumption sd 0) and `memory_mb` of memory, so that
    on a server with C % CPU n jobs complete at rate min(n * demand, C) / (100 * mean
    work) per second: a load-dependent processor-sharing station. Transfers are
    instantaneous-sized (1e-6 MB) and matter only on user nodes.
    """
    b = synthetic_bundle()
    job = {
        "name": "job",
        "description": "queueing check: exponential work, constant CPU demand",
        "data_size_mb": 1.0,
        "input_size_mb": 1e-6,
        "output_size_mb": 1e-6,
        "memory": {"batch_sizes": [1], "execution_mb": [float(memory_mb)], "download_mb": float(memory_mb)},
        "work": {"distribution": "exponential", "batch_sizes": [1], "mean_cpu_s": [float(mean_work_s)]},
    }
    b["subtask_types"] = [job]
    b["task_types"] = [{"name": "single", "subtasks": ["job"]}]
    for stage in b["consumption"]["stages"].values():
        for name, res in stage["resources"].items():
            n = len(stage["levels"])
            level_value = demand_pct if (stage["level"] == "batch_size" and name == "cpu") else res["stats"]["mean"][0][0]
            if name == "memory":
                level_value = float(memory_mb)
            res["stats"] = {"mean": [[float(level_value)] * n], "sd": [[0.0] * n]}
    return copy.deepcopy(b)


def queueing_config(model, *, users: int, steps: int, seed: int, think_mean_s: float = 100.0,
                    capacity_pct: float = 200.0, **extra):
    """The run config of the closed network (docs/validation.md section 1) on the bundle
    at `model` (a `queueing_bundle` written to disk): `users` always online, exponential
    think time of mean `think_mean_s`, unbounded patience, centralized on a server of
    `capacity_pct` % CPU (capacity 1), batching off. `extra` keys are merged in."""
    from gmm_volunteer.run.config import config_from_dict

    d = {
        "steps": steps, "seed": seed, "model": str(model), "scheduler": "centralized",
        "users": {"count": users, "capacity": 1.0, "initial_data": "filled"},
        "server": {"capacity": 1.0},
        "base_profile": {"cpu": float(capacity_pct)},
        "availability": {"online": {"dist": "never"}, "offline": {"dist": "exponential", "mean": 10.0}},
        "requests": {"think_time": {"dist": "exponential", "mean": float(think_mean_s)},
                     "patience": {"dist": "never"}, "type_probabilities": [1.0]},
        "execution": {"batching": False},
    }
    d.update(extra)
    return config_from_dict(d)


def two_size_bundle(*, mean_work_s: tuple[float, float] = (10.0, 40.0), demand_pct: float = 100.0) -> dict:
    """`queueing_bundle` with two job sizes: subtask types `short` and `long`, each the
    single subtask of its own task type, exponential work of mean `mean_work_s[0]` and
    `[1]` CPU-seconds at a constant `demand_pct` % CPU: the check of the execution
    disciplines (docs/model.md D28; tests/test_discipline.py)."""
    b = queueing_bundle(mean_work_s=mean_work_s[0], demand_pct=demand_pct)
    short = b["subtask_types"][0]
    long = copy.deepcopy(short)
    short["name"], long["name"] = "short", "long"
    long["work"]["mean_cpu_s"] = [float(mean_work_s[1])]
    b["subtask_types"] = [short, long]
    b["task_types"] = [{"name": "short", "subtasks": ["short"]}, {"name": "long", "subtasks": ["long"]}]
    for stage in b["consumption"]["stages"].values():
        for res in stage["resources"].values():
            for key in ("mean", "sd"):
                res["stats"][key] = res["stats"][key] * 2
    return copy.deepcopy(b)


def hazard_block(n_types: int, probability: dict | float = 0.5, consumption_coef: float = 0.0,
                 covariate_mean: float = 100.0, covariate_sd: float = 50.0) -> dict:
    """A bundle `hazard` block (paper 2.2; fitting/hazard.py) for `execution.progress:
    paper`: per phase, logit h = logit(p) + consumption_coef * (c - covariate_mean) /
    covariate_sd, with c the consumption of the phase's resource; no batch-size or age
    terms, every type alike. With consumption_coef 0 the hazard is constant: a phase
    lasts a geometric number of steps of mean 1 / p."""
    probs = probability if isinstance(probability, dict) else dict.fromkeys(PHASES, probability)
    resource = {"download": "band_in", "execution": "cpu", "upload": "band_out"}
    phases = {}
    for name, p in probs.items():
        phases[name] = {
            "consumption_resource": resource[name],
            "covariate_mean": [float(covariate_mean), 1.0, 0.0],
            "covariate_sd": [float(covariate_sd), 1.0, 1.0],
            "terms": [[1, 0, 0]] if consumption_coef else [],
            "coef": [float(consumption_coef)] if consumption_coef else [],
            "intercept": float(math.log(p / (1.0 - p))),
            "type_coef": [0.0] * n_types,
        }
    return {"degree": 1, "phases": phases}


# Magnitudes measured on this project's 2-core build machine with `gmmv collect subtasks`
# (traces/quick_measurements.md): median execution seconds and peak worker memory (MB)
# at batch sizes 1, 2, 5, 10, 20, 50, model file size (MB), input size (MB).
_MEASURED = {
    "ppocr_cls": dict(exec_s=[0.010, 0.010, 0.027, 0.088, 0.194, 0.482], peak_mb=[126, 127, 130, 135, 146, 178], data=0.59, inp=0.0043),
    "mobilenet_v2": dict(exec_s=[0.054, 0.141, 0.289, 0.629, 1.127, 2.408], peak_mb=[152, 160, 185, 227, 313, 568], data=13.99, inp=0.0223),
    "ppocr_rec": dict(exec_s=[0.160, 0.254, 0.632, 1.297, 2.375, 5.205], peak_mb=[159, 167, 197, 239, 318, 590], data=21.23, inp=0.0064),
    "resnet50": dict(exec_s=[0.334, 0.622, 1.394, 2.650, 5.112, 11.146], peak_mb=[239, 246, 271, 311, 394, 636], data=102.15, inp=0.0223),
    "ppocr_det": dict(exec_s=[2.525, 4.902, 10.704, 21.385, 38.871, 107.248], peak_mb=[260, 353, 643, 1052, 1820, 4316], data=9.93, inp=0.14),
}
_DESCRIPTIONS = {
    "ppocr_cls": "PP-OCR text direction classifier, trained weights shipped by rapidocr (ONNX)",
    "mobilenet_v2": "MobileNetV2 architecture with random weights (measures cost, not accuracy)",
    "ppocr_rec": "PP-OCR text recognizer, trained weights shipped by rapidocr (ONNX)",
    "resnet50": "ResNet-50 architecture with random weights (measures cost, not accuracy)",
    "ppocr_det": "PP-OCR text detector, trained weights shipped by rapidocr (ONNX)",
}
_BATCHES = [1, 2, 5, 10, 20, 50]


def provisional_bundle() -> dict:
    """The provisional default bundle: measured magnitudes, assumed shapes.

    Measured (traces/quick_measurements.md): model file sizes, input sizes, execution
    time and peak memory per subtask type and batch size. Assumed: allocation ARMA(1, 0)
    with fractions of capacity typical of an idle workstation, consumption levels (one
    core per executing batch, transfers at 80 % of the link), and the execution
    work with the measured median seconds as its mean at one core and a log-sd of 0.2.
    Replaced by `gmmv fit` output.
    """

    names = list(_MEASURED)
    subtask_types = [
        {
            "name": n,
            "description": _DESCRIPTIONS[n],
            "data_size_mb": _MEASURED[n]["data"],
            "input_size_mb": _MEASURED[n]["inp"],
            "output_size_mb": 0.004,
            "memory": {
                "batch_sizes": list(_BATCHES),
                "execution_mb": [float(x) for x in _MEASURED[n]["peak_mb"]],
                "download_mb": 60.0,
            },
            # The provisional consumption model asks one core per executing batch, so
            # the measured seconds are CPU-seconds at that demand.
            "work": {"distribution": "lognormal", "batch_sizes": list(_BATCHES),
                     "mean_cpu_s": [float(x) for x in _MEASURED[n]["exec_s"]], "log_sd": 0.2},
        }
        for n in names
    ]
    light = ["ppocr_cls", "mobilenet_v2", "ppocr_rec"]
    heavy = ["resnet50", "ppocr_det"]
    task_types = [
        {"name": "light5", "subtasks": [light[p % 3] for p in range(5)]},
        {"name": "light10", "subtasks": [light[p % 3] for p in range(10)]},
        {"name": "heavy5", "subtasks": [heavy[p % 2] for p in range(5)]},
        {"name": "heavy10", "subtasks": [heavy[p % 2] for p in range(10)]},
    ]
    base = synthetic_bundle()
    band_levels = [10.0, 50.0, 100.0]

    def block(mean_row, sd_frac=0.15, phi=0.7):
        rows_ = [list(map(float, mean_row)) for _ in names]
        return {
            "arma": _arma(phi),
            "yeo_johnson": dict(_IDENTITY_YJ),
            "stats": {"mean": rows_, "sd": [[x * sd_frac for x in r] for r in rows_]},
        }

    util = [0.8 * lv for lv in band_levels]
    consumption = {
        "idw_power": 2.0,
        "stages": {
            "data_download": {"level": "band_in", "levels": band_levels,
                              "resources": {"band_in": block(util), "cpu": block([8.0] * 3), "memory": block([40.0] * 3)}},
            "input_download": {"level": "band_in", "levels": band_levels,
                               "resources": {"band_in": block(util), "cpu": block([5.0] * 3), "memory": block([30.0] * 3)}},
            "execution": {"level": "batch_size", "levels": [float(b) for b in _BATCHES],
                          "resources": {
                              "cpu": block([100.0] * 6, sd_frac=0.2),
                              "memory": {
                                  "arma": _arma(0.7),
                                  "yeo_johnson": dict(_IDENTITY_YJ),
                                  # peak memory (measured) = mean + 2 sd with sd = 10 % of mean
                                  "stats": {"mean": [[p / 1.2 for p in _MEASURED[n]["peak_mb"]] for n in names],
                                            "sd": [[p / 12.0 for p in _MEASURED[n]["peak_mb"]] for n in names]},
                              },
                          }},
            "upload": {"level": "band_out", "levels": band_levels,
                       "resources": {"band_out": block(util), "cpu": block([5.0] * 3), "memory": block([30.0] * 3)}},
        },
    }
    fractions = {"band_in": (0.85, 0.1), "band_out": (0.85, 0.1), "cpu": (0.6, 0.2), "memory": (0.6, 0.1), "storage": (0.95, 0.02)}
    allocation = {
        r: {"arma": _arma(0.95), "yeo_johnson": dict(_IDENTITY_YJ), "mean": m, "sd": s}
        for r, (m, s) in fractions.items()
    }
    base.update(
        provisional=True,
        created="2026-12-01",
        provenance=(
            "PROVISIONAL: gmm_volunteer.testing.synthetic.provisional_bundle(). Measured on this project's "
            "2-core build machine (traces/quick_measurements.md): subtask model file sizes, input "
            "sizes, execution time and peak memory at batch sizes 1-50 of five CV subtask types "
            "(PP-OCR det/cls/rec with trained weights; MobileNetV2 and ResNet-50 architectures "
            "with random weights). Assumed, not fitted: allocation and consumption ARMA shapes "
            "and levels, the work's spread. Replace with `gmmv fit traces/ -o gmm_volunteer/bundles/default`."
        ),
        allocation=allocation,
        subtask_types=subtask_types,
        task_types=task_types,
        consumption=consumption,
    )
    return base
