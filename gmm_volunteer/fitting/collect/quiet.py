"""The quiet gate: a measured run counts only if the rest of the machine was idle.

Execution time and CPU % of a subtask (paper 2.2, "Resource consumption"; the base
profile of paper 3.1 is derived from them) are those of a volunteer device running the
subtask, not those of a device shared with other work. On a shared machine the worker
gets only part of the cores and its times stretch, so the collector checks every run:

  other load = (busy CPU time of the whole machine, /proc/stat)
               - (CPU time of the collector's own processes, /proc/<pid>/stat)
               over the run's wall time, in cores.

A run whose other load exceeds `threshold_cores` is thrown away; the gate then waits
until `QUIET_STREAK_S` consecutive 1 s windows are quiet (other work on a shared machine
comes in bursts: one quiet second is often a pause inside a burst) and the run is
repeated (at most `max_attempts` tries per run, at most `max_wait_s` seconds of waiting
per run, then `NotQuietError`).

The kernel counts CPU time in ticks (10 ms at the usual 100 Hz), so on a run of a few
milliseconds one tick would be a whole core: the window is extended after the run (the
worker sleeping) to at least `min_window_s`, so the load read is the load around the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .procstat import CLK_TCK

DEFAULT_THRESHOLD_CORES = 0.2  # 10 % of a 2-core machine: the worker keeps >= 90 % of it
DEFAULT_MAX_ATTEMPTS = 20
DEFAULT_MAX_WAIT_S = 1800.0
MIN_WINDOW_S = 1.0
POLL_S = 1.0
QUIET_STREAK_S = 5.0


class NotQuietError(RuntimeError):
    """The machine did not become quiet within the gate's bounds."""


@dataclass(frozen=True)
class Reading:
    t: float        # monotonic seconds
    busy_s: float   # CPU-seconds all cores were busy since boot (all processes and the kernel)
    own_s: float    # CPU-seconds of the collector's own processes


def busy_seconds() -> float:
    """CPU-seconds the machine was busy since boot: /proc/stat minus idle and iowait."""
    with open("/proc/stat") as f:
        vals = [float(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user/nice)
    busy = sum(vals[:8]) - vals[3] - (vals[4] if len(vals) > 4 else 0.0)
    return busy / CLK_TCK


def process_seconds(pid: int) -> float:
    """utime + stime of process `pid` (all its threads, live and exited), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (float(rest[11]) + float(rest[12])) / CLK_TCK


def other_load_cores(r0: Reading, r1: Reading) -> float:
    """Cores used by everything but the collector's own processes between two readings."""
    dt = r1.t - r0.t
    if dt <= 0:
        raise ValueError("readings must be in time order")
    return max(0.0, ((r1.busy_s - r0.busy_s) - (r1.own_s - r0.own_s)) / dt)


@dataclass
class QuietGate:
    """Checks runs against the other load; repeats loaded runs (see the module docstring).

    `reader`, `sleep` are injectable for tests; by default they read /proc for `pids`.
    """

    pids: list[int] = field(default_factory=list)
    threshold_cores: float = DEFAULT_THRESHOLD_CORES
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    min_window_s: float = MIN_WINDOW_S
    reader: Callable[[], Reading] | None = None
    sleep: Callable[[float], None] = time.sleep
    repeats: int = 0          # runs thrown away for load, over the gate's life
    waited_s: float = 0.0     # seconds spent waiting for quiet, over the gate's life
    rejected: list[float] = field(default_factory=list)  # other load of each rejected try

    def __post_init__(self):
        if self.threshold_cores <= 0 or self.max_attempts < 1 or self.max_wait_s < 0:
            raise ValueError("quiet gate: threshold must be > 0, attempts >= 1, max wait >= 0")

    def read(self) -> Reading:
        if self.reader is not None:
            return self.reader()
        own = 0.0
        for pid in self.pids:
            try:
                own += process_seconds(pid)
            except OSError:  # a helper process that ended: its time no longer moves
                pass
        return Reading(time.monotonic(), busy_seconds(), own)

    def close_window(self, r0: Reading) -> tuple[float, float]:
        """Extend the window opened at `r0` to `min_window_s`; (other load, window s)."""
        r1 = self.read()
        if r1.t - r0.t < self.min_window_s:
            self.sleep(self.min_window_s - (r1.t - r0.t))
            r1 = self.read()
        return other_load_cores(r0, r1), r1.t - r0.t

    def wait_quiet(self, what: str, budget: list[float]) -> None:
        """Sleep in `POLL_S` windows until `QUIET_STREAK_S` seconds in a row were quiet;
        `budget[0]` = seconds left to wait."""
        streak = 0.0
        while True:
            r0 = self.read()
            self.sleep(POLL_S)
            load = other_load_cores(r0, self.read())
            budget[0] -= POLL_S
            self.waited_s += POLL_S
            streak = streak + POLL_S if load <= self.threshold_cores else 0.0
            if streak >= QUIET_STREAK_S:
                return
            if budget[0] <= 0:
                raise NotQuietError(
                    f"quiet gate: {what}: the machine stayed busy for {self.max_wait_s:g} s of waiting "
                    f"(other load {load:.2f} cores > threshold {self.threshold_cores:g}); stop the other "
                    "work or raise --quiet-wait / --quiet-threshold")

    def measure(self, run: Callable[[], object], what: str) -> tuple[object, float, int]:
        """Run `run()` until one try is quiet: (its result, its other load, tries used).

        A rejected try's result is dropped; `run` must leave no state behind between tries.
        """
        budget = [self.max_wait_s]
        loads = []
        for attempt in range(1, self.max_attempts + 1):
            r0 = self.read()
            result = run()
            load, _ = self.close_window(r0)
            if load <= self.threshold_cores:
                return result, load, attempt
            loads.append(load)
            self.rejected.append(load)
            self.repeats += 1
            if attempt < self.max_attempts:
                self.wait_quiet(what, budget)
        raise NotQuietError(
            f"quiet gate: {what}: {self.max_attempts} tries, every one with other load above "
            f"{self.threshold_cores:g} cores ({', '.join(f'{x:.2f}' for x in loads)}); stop the other work "
            "or raise --quiet-attempts / --quiet-threshold")
