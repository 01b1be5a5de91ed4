"""The testbed's step clock and the files its processes share (docs/testbed.md).

A step is one second of wall time from t0, the instant the orchestrator writes in
``start.json`` once every process is up; every process reads the same t0 (CLOCK_REALTIME
is one clock on one machine), so a step number means the same interval everywhere. The
server's policy stage for step t runs at t0 + t + 1, as the simulator's policies act at
the end of step t (paper 2.2, the order of factors).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

START_FILE = "start.json"


def write_start(workdir: Path, t0: float, steps: int) -> None:
    tmp = workdir / (START_FILE + ".tmp")
    tmp.write_text(json.dumps({"t0": t0, "steps": steps}))
    tmp.rename(workdir / START_FILE)


async def wait_start(workdir: Path) -> tuple[float, int]:
    f = workdir / START_FILE
    while not f.exists():
        await asyncio.sleep(0.05)
    d = json.loads(f.read_text())
    return float(d["t0"]), int(d["steps"])


class Clock:
    def __init__(self, t0: float, steps: int):
        self.t0, self.steps = t0, steps

    def step(self) -> int:
        """The step the present instant belongs to (clipped to the run)."""
        return min(max(int(math.floor(time.time() - self.t0)), 0), self.steps - 1)

    def over(self) -> bool:
        return time.time() >= self.t0 + self.steps

    async def until(self, at_step: float) -> None:
        """Sleep until t0 + at_step seconds."""
        delay = self.t0 + at_step - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
