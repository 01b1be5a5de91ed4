"""Traces measured under a testbed node's limits (`gmmv collect ... --testbed CONFIG`).

Paper 2.2 fits consumption and work from traces of the devices that will run the
subtasks. The testbed's devices are cgroups and shaped links (`isolation.py`), so the
traces that describe them are measured inside the same limits: `NodeLimits` reads them
from a testbed config (a user device: `base_profile` x `users.capacity`, its link
band_in / band_out; the server: its maximum allocation, its link not shaped), and
`LimitedWorker` makes one cgroup with that CPU quota and memory limit and, for a user
device, one veth link in its own network namespace shaped to its rates. The collector's
measured worker process joins them first thing (`LimitedWorker.initializer`) and the
collector's local server listens on the host end of the link, so inputs, results and
subtask data cross the shaped link as they do in the testbed.

Everything is made by `isolation.Resources` under the testbed's names (``gmmvtb<pid>``)
and removed on every exit: a normal end, an error, Ctrl-C, SIGTERM, SIGHUP (all unwind
through the `with`), or `atexit`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

NODES = ("user", "server")
MB = 1e6


class LimitsError(ValueError):
    """Bad input for a limited collection (exit 2; the message names the file or key)."""


@dataclass(frozen=True)
class NodeLimits:
    """The limits of one kind of testbed node, as `gmmv testbed` sets them."""

    config: str
    node: str               # "user" (a device: quota, memory limit, shaped link) or "server"
    cpu_pct: float          # CPU quota, % of one core
    memory_mb: float        # memory limit, MB (10^6 bytes)
    band_in_mbps: float     # link rate towards the node (user: tc; server: not shaped)
    band_out_mbps: float    # link rate from the node
    storage_mb: float       # the node's storage allocation (the testbed does not limit disk)
    threads: int            # ONNX Runtime intra-op threads the testbed gives the node
    link_delay_ms: float    # one-way delay of a user's link
    shaped: bool            # True: a veth link shaped with tc (user devices only)
    mmap_threshold_kb: int = 0  # glibc's fixed mmap threshold in the node's processes (0: dynamic)

    def as_dict(self) -> dict:
        return asdict(self)


def node_limits(config: str | os.PathLike, node: str = "user", overrides=()) -> NodeLimits:
    """The limits of `node` in testbed config `config` (with `--set` overrides);
    LimitsError naming the file and key on a bad config or node."""
    from gmm_volunteer.run.config import ConfigError
    from gmm_volunteer.model.constants import BAND_IN, BAND_OUT, CPU, MEMORY, STORAGE
    from gmm_volunteer.testbed.config import load_testbed

    if node not in NODES:
        raise LimitsError(f"--node {node!r}: must be one of {', '.join(NODES)}")
    if not Path(config).is_file():
        raise LimitsError(f"--testbed {config}: no such file")
    try:
        cfg, tb = load_testbed(config, overrides)
    except ConfigError as exc:
        raise LimitsError(str(exc)) from None
    base = cfg.base_profile.as_array()
    if node == "user":
        m = base * cfg.users.capacity
        threads = max(1, int(m[CPU] // 100))          # as run._spec gives the volunteers
    else:
        m = cfg.server.maximum(base)
        threads = tb.server_threads or max(1, int(m[CPU] // 100))
    return NodeLimits(config=str(config), node=node, cpu_pct=float(m[CPU]), memory_mb=float(m[MEMORY]),
                      band_in_mbps=float(m[BAND_IN]), band_out_mbps=float(m[BAND_OUT]),
                      storage_mb=float(m[STORAGE]), threads=int(threads),
                      link_delay_ms=float(tb.link_delay_ms), shaped=node == "user",
                      mmap_threshold_kb=int(tb.mmap_threshold_kb))


def _enter(cgroup, netns: str | None, mmap_threshold_kb: int = 0) -> None:
    """Initializer of the measured worker (runs in it before anything else): join the
    node's cgroup and, for a user device, its link's network namespace, and take the
    node's heap settings (`testbed.mmap_threshold_kb`), as the testbed's processes do."""
    from gmm_volunteer.fitting.collect.models import fix_mmap_threshold
    from gmm_volunteer.testbed.isolation import enter_netns

    cgroup.join(os.getpid())
    if netns is not None:
        enter_netns(netns)
    fix_mmap_threshold(mmap_threshold_kb)


class LimitedWorker:
    """Context manager: the cgroup (and for a user device the shaped link) a collector's
    worker runs in. Use `initializer` / `initargs` for its process pool and `host` for
    its local server; `report()` reads what the kernel counted. Raises
    `isolation.IsolationError` when the machine cannot host it (not root, no cgroups,
    no iproute2), before anything is made."""

    def __init__(self, limits: NodeLimits, link: bool):
        self.limits, self.want_link = limits, bool(link and limits.shaped)
        self.host = "127.0.0.1"
        self.res = self.cg = self.link = None

    def __enter__(self) -> "LimitedWorker":
        from gmm_volunteer.testbed.isolation import (IsolationError, Resources, cgroup_version, free_subnet,
                                                     interrupts_end_in_finally)

        version = cgroup_version()
        if self.want_link:
            for tool in ("ip", "tc"):
                if shutil.which(tool) is None:
                    raise IsolationError(f"`{tool}` (iproute2) is not installed")
        self._signals = interrupts_end_in_finally()
        self._signals.__enter__()
        self.res = Resources(f"gmmvtb{os.getpid()}")
        try:
            lim = self.limits
            self.cg = self.res.cgroup(version, "collect", lim.cpu_pct, int(lim.memory_mb * MB))
            if self.want_link:
                self.link = self.res.link(1, free_subnet(None), lim.band_in_mbps, lim.band_out_mbps,
                                          lim.link_delay_ms)
                self.host = self.link.host
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.res is not None:
                self.res.close()
        finally:
            self._signals.__exit__(None, None, None)

    @property
    def initializer(self):
        return _enter

    @property
    def initargs(self) -> tuple:
        return (self.cg, self.link.ns if self.link is not None else None, self.limits.mmap_threshold_kb)

    def stop_workers(self) -> None:
        """Kill whatever runs in the cgroup (the measured worker), so that a collection
        interrupted mid-run does not wait for the worker's plan to finish."""
        if self.cg is not None:
            self.cg.kill_all()

    def names(self) -> list[str]:
        """What this made: the cgroup, and the namespace and host veth of the link."""
        out = [self.cg.name] if self.cg is not None else []
        if self.link is not None:
            out += [self.link.ns, self.link.outer]
        return out

    def describe(self) -> dict:
        """The limits, for the trace's meta.json and a resumed collection's plan."""
        return {**self.limits.as_dict(), "link": self.want_link}

    def report(self) -> dict:
        """What the kernel counted for the worker's cgroup so far."""
        cg = self.cg
        out = {"cgroup_version": cg.version, "cpu_s": round(cg.cpu_seconds(), 3),
               "throttled_s": round(cg.throttled_seconds(), 3),
               "memory_peak_mb": round(cg.memory_peak() / MB, 1), "oom_kills": int(cg.oom_kills())}
        if self.link is not None:
            out["link_bytes_to_node"] = self.link.bytes_to_volunteer()
            out["link_bytes_from_node"] = self.link.bytes_from_volunteer()
        return out


def resource_rows(limits: NodeLimits, interval: float, n_samples: int) -> list[list[float]]:
    """The resources trace of a testbed node: what it offers for volunteering is its
    configured limits, the same in every sample (nothing else runs inside them)."""
    return [[round(k * interval, 3), limits.band_in_mbps, limits.band_out_mbps, limits.cpu_pct,
             limits.memory_mb, limits.storage_mb] for k in range(1, n_samples + 1)]
