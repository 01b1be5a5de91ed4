"""The speed of the machine a testbed run ran on, against the bundle whose work the
simulator reads (docs/model.md D30; docs/validation.md section 6, "The machine's speed").

A shared machine's CPU drifts, between sessions and within one: on 2026-12-06 the same
cold batches cost 0.79-0.94 times at 08:25 UTC what they cost at 03:51 UTC on one CPU
(family 23). A run's speed is read from its sidecar `<store stem>.speed.txt`: the
measurements `python -m gmm_volunteer.testbed.calibrate BUNDLE OUT --cold` prints right
before the run (lines `type<TAB>batch size<TAB>CPU-s`; `#` starts a comment), each over
the reference bundle's work at the same type and size, their geometric mean. The
simulator predicts that run with `execution.work_scale` at that speed
(`testbed.compare --speed-reference BUNDLE`). `gmmv testbed ... --speed` makes the
measurement itself right before the run and writes the sidecar with the store (`measure`).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SUFFIX = ".speed.txt"


class SpeedError(ValueError):
    """A sidecar is missing, unreadable, or shares nothing with the reference."""


def sidecar(store: Path) -> Path:
    """The speed file beside a testbed store: `X/case-seed3.zarr` -> `X/case-seed3.speed.txt`."""
    return store.with_name(store.name.removesuffix(".zarr") + SUFFIX)


def read(path: Path) -> list[tuple[str, int, float]]:
    """The (type, batch size, CPU-s) measurements of a speed file."""
    if not path.is_file():
        raise SpeedError(f"{path}: no speed file (the cold measurements printed by "
                         "`python -m gmm_volunteer.testbed.calibrate BUNDLE OUT --cold` before the run)")
    return parse(path.read_text(), str(path))


def parse(text: str, where: str) -> list[tuple[str, int, float]]:
    """The measurements of a speed file's `text`; errors name `where` and the line."""
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        parts = body.split()
        try:
            name, size, cpu = parts[0], int(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            raise SpeedError(f"{where}:{i}: expected 'type batch-size CPU-s', got {line.strip()!r}") from None
        if len(parts) != 3 or size < 1 or not (cpu > 0 and math.isfinite(cpu)):
            raise SpeedError(f"{where}:{i}: expected 'type batch-size CPU-s' with a size >= 1 and a CPU-s > 0, "
                             f"got {line.strip()!r}")
        rows.append((name, size, cpu))
    return rows


def speed(path: Path, reference: dict[str, np.ndarray]) -> float:
    """The geometric mean of a speed file's measurements over the reference's work at the
    same type and size (`testbed.batches.bundle_work`); types the reference lacks are
    left out."""
    ratios = [cpu / reference[name][size] for name, size, cpu in read(path)
              if name in reference and size < reference[name].size and reference[name][size] > 0]
    if not ratios:
        raise SpeedError(f"{path}: no measurement of a type the reference bundle has "
                         f"({', '.join(sorted(reference))})")
    return geometric_mean(ratios)


def geometric_mean(xs) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(xs, float)))))


def store_speeds(stores: list[Path], reference: dict[str, np.ndarray]) -> list[float]:
    """Each store's speed against the reference bundle's work (`testbed.batches.bundle_work`
    of it), in the stores' order; every missing or bad sidecar is named in one error."""
    out, problems = [], []
    for store in stores:
        try:
            out.append(speed(sidecar(store), reference))
        except SpeedError as err:
            problems.append(str(err))
    if problems:
        raise SpeedError("; ".join(problems))
    return out


def work_scale(speeds) -> str:
    """The simulator's override for runs at these speeds (their geometric mean; D30)."""
    return f"execution.work_scale={geometric_mean(speeds):.4f}"


def measure(bundle_dir: str | Path, mmap_kb: int, run=subprocess.run) -> str:
    """A speed file's text for this machine now: what `python -m
    gmm_volunteer.testbed.calibrate BUNDLE OUT --cold --mmap-threshold-kb KB` prints, in
    a fresh process (as the documented two-command procedure does; its bundle goes to a
    temporary directory, removed), under a comment naming the command, time and load.
    SpeedError when the measurement fails or prints nothing readable."""
    load = f"{os.getloadavg()[0]:.2f}"  # as run.py records it
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="gmmv-speed-") as tmp:
        cmd = [sys.executable, "-m", "gmm_volunteer.testbed.calibrate", str(bundle_dir), str(Path(tmp) / "bundle"),
               "--cold", "--mmap-threshold-kb", str(int(mmap_kb))]
        out = run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SpeedError(f"the speed measurement failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    text = (f"# python -m gmm_volunteer.testbed.calibrate {bundle_dir} OUT --cold --mmap-threshold-kb {mmap_kb}, "
            f"right before this run ({when}, 1-minute load {load})\n# columns: subtask type, batch size, CPU-s\n"
            + out.stderr)
    if not parse(text, "the speed measurement's output"):
        raise SpeedError(f"the speed measurement printed no measurement: {out.stderr.strip()[-500:]!r}")
    return text
