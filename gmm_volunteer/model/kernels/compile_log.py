"""`CompileLog`: which kernels numba compiled while it listened, and the CPU time each took.

numba announces every compilation through its event API (``numba.core.event``, kind
``numba:compile``); a version loaded from the on-disk cache is not a compilation and
raises no event. Compilations nest: a kernel that calls another one compiles the callee
while it is being typed, so the caller's time includes the callee's. `CompileLog` keeps
both: ``total_s`` per compilation (inclusive) and ``own_s`` (the callees' compilations
taken out), in process CPU time, so that the figures mean the same on a loaded machine.
The sum of ``own_s`` over all entries is the CPU time numba spent compiling.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable

from numba.core import event


@dataclass(frozen=True)
class Compiled:
    """One compiled version: the kernel's ``module.qualname``, its argument types, the
    CPU seconds of its compilation with (``total_s``) and without (``own_s``) the
    compilations of the kernels it calls."""

    name: str
    args: str
    total_s: float
    own_s: float


def _name(dispatcher) -> str:
    func = getattr(dispatcher, "py_func", None)
    if func is None:
        return repr(dispatcher)
    return f"{func.__module__}.{func.__qualname__}"


class CompileLog(event.Listener):
    """Listens to numba's compilations while `listening()` is active (one thread).

    ``on_compiled(entry)`` is called as each compilation ends (for progress lines)."""

    def __init__(self, on_compiled: Callable[[Compiled], None] | None = None):
        self.entries: list[Compiled] = []
        self.on_compiled = on_compiled
        self._open: list[list[float]] = []  # [start CPU time, callees' CPU time] per open compilation

    def on_start(self, ev) -> None:
        self._open.append([time.process_time(), 0.0])

    def on_end(self, ev) -> None:
        start, callees = self._open.pop()
        total = time.process_time() - start
        if self._open:
            self._open[-1][1] += total
        data = ev.data or {}
        entry = Compiled(_name(data.get("dispatcher")), str(tuple(data.get("args", ()))), total, total - callees)
        self.entries.append(entry)
        if self.on_compiled is not None:
            self.on_compiled(entry)

    @contextlib.contextmanager
    def listening(self):
        with event.install_listener("numba:compile", self):
            yield self

    @property
    def seconds(self) -> float:
        """CPU seconds numba spent compiling (each compilation counted once)."""
        return sum(e.own_s for e in self.entries)

    @property
    def functions(self) -> set[str]:
        return {e.name for e in self.entries}

    def summary(self) -> str:
        """One line: how many versions of how many kernels, and their CPU time."""
        if not self.entries:
            return "no kernel compiled (all loaded from numba's cache)"
        return (f"{len(self.entries)} kernel versions of {len(self.functions)} functions compiled "
                f"in {self.seconds:.1f} s of process time")

    def table(self, top: int | None = None) -> str:
        """The compilations by own CPU time, largest first (``top`` of them)."""
        rows = sorted(self.entries, key=lambda e: e.own_s, reverse=True)[:top]
        lines = [f"{'own s':>7} {'total s':>8}  kernel (argument types)"]
        lines += [f"{e.own_s:7.2f} {e.total_s:8.2f}  {e.name} {_short(e.args)}" for e in rows]
        return "\n".join(lines)


def _short(args: str, width: int = 60) -> str:
    return args if len(args) <= width else args[: width - 3] + "..."
