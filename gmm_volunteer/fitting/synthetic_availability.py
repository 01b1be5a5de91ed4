"""A synthetic session trace drawn from stated laws (`traces/availability/`, labelled so).

Each device of a class runs the alternating online/offline renewal process of paper
section 2.2 in continuous time, from its stationary law (state by mean durations,
the current spell length-biased and the elapsed part uniform in it: docs/model.md D2),
over a window of `window_s` seconds; its sessions inside the window are written in the
format of `traces/FORMAT.md` ("availability/"), times in milliseconds. The draws use the
model's own inverse-survival draw (`laws.continuous_duration`), one generator per class
from `SeedSequence(seed).spawn`, so the sample repeats.

Run as a module to write the shipped sample::

    python -m gmm_volunteer.fitting.synthetic_availability traces/availability
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path

import numpy as np

from gmm_volunteer.model import laws

# The stated laws of the shipped sample (synthetic: not a measurement of any device).
SAMPLE_CLASSES = {
    "phone": {
        "devices": 120,
        "online": {"dist": "weibull", "scale": 600.0, "shape": 0.6},
        "offline": {"dist": "lognormal", "mu": math.log(3000.0), "sigma": 1.4},
    },
    "laptop": {
        "devices": 60,
        "online": {"dist": "weibull", "scale": 1800.0, "shape": 0.75},
        "offline": {"dist": "lognormal", "mu": math.log(7200.0), "sigma": 1.2},
    },
    "desktop": {
        "devices": 20,
        "online": {"dist": "lognormal", "mu": math.log(5400.0), "sigma": 1.0},
        "offline": {"dist": "weibull", "scale": 14000.0, "shape": 0.9},
    },
}
SAMPLE_WINDOW_S = 14 * 86400.0
SAMPLE_SEED = 52
RESOLUTION_S = 0.001  # times are written in milliseconds


def _law(spec: dict) -> np.ndarray:
    return laws.law_array(spec["dist"], *(spec[k] for k in laws.PARAMETERS[spec["dist"]]))


def _draw(law: np.ndarray, g: np.random.Generator) -> float:
    return float(laws.continuous_duration(int(law[0]), law[1], law[2], 1.0 - g.random(), g.random()))


def device_sessions(on: np.ndarray, off: np.ndarray, window_s: float, g: np.random.Generator):
    """[(start or nan, end or nan)] of one device over [0, window_s], from its stationary law:
    nan marks a session that began before the window or was still open at its end."""
    m_on, m_off = laws.mean(on), laws.mean(off)
    online = g.random() < m_on / (m_on + m_off)
    length = float(laws.length_biased(on if online else off, 1, g)[0])
    t = -g.random() * length  # the current spell began before the window
    sessions = []
    while t < window_s:
        end = t + length
        if online and end > 0:
            sessions.append((t if t >= 0 else math.nan, end if end <= window_s else math.nan))
        t, online = end, not online
        length = _draw(on if online else off, g)
    return sessions


def write_sample(root: str | Path, classes: dict = SAMPLE_CLASSES, window_s: float = SAMPLE_WINDOW_S,
                 seed: int = SAMPLE_SEED) -> Path:
    """Write `sessions.csv.gz` and `window.json` into `root`; returns `root`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    streams = np.random.SeedSequence(seed).spawn(len(classes))
    rows = ["device,class,start_s,end_s"]
    for (name, spec), ss in zip(classes.items(), streams):
        g = np.random.default_rng(ss)
        on, off = _law(spec["online"]), _law(spec["offline"])
        for i in range(spec["devices"]):
            for s, e in device_sessions(on, off, window_s, g):
                fmt = lambda x: "" if math.isnan(x) else f"{x:.3f}"  # noqa: E731
                rows.append(f"{name}-{i:03d},{name},{fmt(s)},{fmt(e)}")
    # mtime 0: the same sample gives the same bytes
    with gzip.GzipFile(root / "sessions.csv.gz", "wb", mtime=0) as f:
        f.write(("\n".join(rows) + "\n").encode())
    meta = {
        "start_s": 0.0,
        "end_s": window_s,
        "resolution_s": RESOLUTION_S,
        "synthetic": True,
        "seed": seed,
        "laws": {n: {"devices": s["devices"], "online": s["online"], "offline": s["offline"]}
                 for n, s in classes.items()},
        "command": "python -m gmm_volunteer.fitting.synthetic_availability " + str(root),
    }
    (root / "window.json").write_text(json.dumps(meta, indent=1) + "\n")
    return root


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="where to write sessions.csv.gz and window.json")
    p.add_argument("--seed", type=int, default=SAMPLE_SEED)
    args = p.parse_args(argv)
    write_sample(args.folder, seed=args.seed)
    print(f"wrote {args.folder}/sessions.csv.gz and window.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
