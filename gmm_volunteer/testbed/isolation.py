"""Kernel-enforced limits of the testbed's nodes: cgroups (CPU quota, memory limit) and
links (a network namespace per volunteer, joined to the host by a veth pair shaped by
`tc`). Paper 2.1 gives every node an allocation per resource; here the kernel holds each
process to its node's maximum allocation instead of the model's executor.

Every resource is named with `prefix` (``gmmvtb<pid>``, the orchestrator's pid), and
`Resources` undoes exactly what it created, last first, on `close()` (called from a
`finally`, and from `atexit` if the process dies another way): a run never touches a
cgroup, namespace or link it did not make.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000
CLONE_NEWNET = 0x40000000
NETNS_DIRS = (Path("/run/netns"), Path("/var/run/netns"))


class IsolationError(RuntimeError):
    """The machine cannot give the testbed its limits (not root, no cgroups, no netns)."""


def cgroup_version() -> str:
    """'v1' when the cpu, cpuacct and memory controllers are mounted as v1 hierarchies,
    else 'v2' when a unified hierarchy offers cpu and memory; IsolationError otherwise."""
    if os.geteuid() != 0:
        raise IsolationError("the testbed needs root (cgroups, network namespaces, tc)")
    if all((CGROUP_ROOT / c / "tasks").is_file() for c in ("cpu", "cpuacct", "memory")):
        return "v1"
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        ctl = root / "cgroup.controllers"
        if ctl.is_file() and {"cpu", "memory"} <= set(ctl.read_text().split()):
            return "v2"
    raise IsolationError("no cgroup v1 cpu/cpuacct/memory hierarchies and no cgroup v2 "
                         "hierarchy with the cpu and memory controllers")


def _v2_root() -> Path:
    return CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").is_file() and \
        {"cpu", "memory"} <= set((CGROUP_ROOT / "cgroup.controllers").read_text().split()) \
        else CGROUP_ROOT / "unified"


class Cgroup:
    """A CPU quota (%, 100 = one core) and a memory limit (bytes) for a set of processes."""

    def __init__(self, version: str, name: str, cpu_percent: float, memory_bytes: int):
        """Names only: nothing exists until `create`, so that its removal can be
        registered first (`Resources.cgroup`)."""
        self.version, self.name = version, name
        self.cpu_percent, self.memory_bytes = float(cpu_percent), int(memory_bytes)
        if version == "v1":
            self.dirs = {c: CGROUP_ROOT / c / name for c in ("cpu", "cpuacct", "memory")}
        else:
            d = _v2_root() / name
            self.dirs = {"cpu": d, "cpuacct": d, "memory": d}
        self.made: list[Path] = []  # the directories this object created (only they are removed)

    def create(self) -> "Cgroup":
        quota = max(1000, int(round(CFS_PERIOD_US * self.cpu_percent / 100.0)))
        if self.version == "v1":
            for d in self.dirs.values():
                d.mkdir()
                self.made.append(d)
            (self.dirs["cpu"] / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(quota))
            (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
        else:
            root = _v2_root()
            sub = (root / "cgroup.subtree_control")
            if not {"cpu", "memory"} <= set(sub.read_text().split()):
                sub.write_text("+cpu +memory")
            d = self.dirs["cpu"]
            d.mkdir()
            self.made.append(d)
            (d / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
            (d / "memory.max").write_text(str(self.memory_bytes))
            (d / "memory.swap.max").write_text("0") if (d / "memory.swap.max").exists() else None
        return self

    def set_memory_limit(self, memory_bytes: int) -> None:
        """Move the memory limit of the live cgroup (the testbed adds each process's own
        footprint once it is up: `run.add_footprints`)."""
        name = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
        (self.dirs["memory"] / name).write_text(str(int(memory_bytes)))
        self.memory_bytes = int(memory_bytes)

    def join(self, pid: int) -> None:
        for d in set(self.dirs.values()):
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in set(self.dirs.values()):
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return sorted(out)

    def cpu_seconds(self) -> float:
        """CPU time its processes used since it was made, s."""
        if self.version == "v1":
            return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        for line in (self.dirs["cpu"] / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
        return float("nan")

    def memory_used(self) -> int:
        """Anonymous memory of its processes now, bytes (page cache of model files left out:
        the kernel reclaims it before the limit binds)."""
        if self.version == "v1":
            stat = (self.dirs["memory"] / "memory.stat").read_text().split("\n")
            kv = dict(line.split() for line in stat if line)
            return int(kv.get("total_rss", kv.get("rss", 0)))
        kv = dict(line.split() for line in (self.dirs["memory"] / "memory.stat").read_text().splitlines())
        return int(kv.get("anon", 0))

    def memory_held(self) -> int:
        """What its processes hold that the kernel cannot reclaim, bytes: the charge
        against the limit less the page cache (anonymous memory, kernel stacks, slab,
        socket buffers)."""
        d = self.dirs["memory"]
        if self.version == "v1":
            kv = dict(line.split() for line in (d / "memory.stat").read_text().splitlines() if line)
            return int((d / "memory.usage_in_bytes").read_text()) - int(kv.get("total_cache", kv.get("cache", 0)))
        kv = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
        return int((d / "memory.current").read_text()) - int(kv.get("file", 0))

    def memory_peak(self) -> int:
        """Largest charge (anonymous and cache) the limit ever saw, bytes."""
        d = self.dirs["memory"]
        if self.version == "v1":
            return int((d / "memory.max_usage_in_bytes").read_text())
        p = d / "memory.peak"
        return int(p.read_text()) if p.exists() else int((d / "memory.current").read_text())

    def oom_kills(self) -> int:
        d = self.dirs["memory"]
        if self.version == "v1":
            kv = dict(line.split() for line in (d / "memory.oom_control").read_text().splitlines())
            return int(kv.get("oom_kill", 0))
        kv = dict(line.split() for line in (d / "memory.events").read_text().splitlines())
        return int(kv.get("oom_kill", 0))

    def throttled_seconds(self) -> float:
        """Time its processes waited because the quota was used up, s."""
        kv = dict(line.split() for line in (self.dirs["cpu"] / "cpu.stat").read_text().splitlines())
        if self.version == "v1":
            return int(kv.get("throttled_time", 0)) / 1e9
        return int(kv.get("throttled_usec", 0)) / 1e6

    def kill_all(self) -> None:
        """SIGKILL every process inside this cgroup (only ours), until none is left."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def remove(self) -> None:
        if not self.made:
            return
        self.kill_all()
        for d in reversed(self.made):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def free_subnet(wanted: str | None) -> str:
    """`wanted` ("a.b"), or the first 10.231 ... 10.254 no address on this machine is in;
    IsolationError if `wanted` is in use (another testbed running: its links would clash)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    used = {".".join(f.split("/")[0].split(".")[:2]) for line in out.splitlines()
            for f in line.split() if f.count(".") == 3 and "/" in f}
    if wanted is not None:
        if wanted in used:
            raise IsolationError(f"testbed.subnet {wanted}: addresses of {wanted}.0.0/16 are in use "
                                 "on this machine (another testbed?); choose another or leave it null")
        return wanted
    for b in range(231, 255):
        if f"10.{b}" not in used:
            return f"10.{b}"
    raise IsolationError("no free subnet among 10.231 ... 10.254 for the volunteers' links")


def _sh(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise IsolationError(f"`{' '.join(cmd)}` failed: {r.stderr.strip() or r.returncode}")


def _shaping(dev: str, mbit: float, delay_ms: float, netns: str | None = None) -> None:
    """Egress of `dev` limited to `mbit` (token bucket; netem in front for a delay)."""
    pre = ("ip", "netns", "exec", netns) if netns else ()
    kbit = max(8, int(round(mbit * 1000)))
    burst = max(16_000, int(kbit * 1000 / 8 / 100))  # 10 ms of the rate, at least 16 kB
    if delay_ms > 0:
        _sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
            "delay", f"{delay_ms}ms", "limit", "100000")
        _sh(*pre, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf",
            "rate", f"{kbit}kbit", "burst", str(burst), "latency", "500ms")
    else:
        _sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{kbit}kbit",
            "burst", str(burst), "latency", "500ms")


class Link:
    """Volunteer i's link: namespace `ns` holding veth `inner` (address `addr`), joined to
    host veth `outer` (address `host`); the host end's egress is the volunteer's inbound
    bandwidth (band_in), the inner end's egress its outbound (band_out)."""

    def __init__(self, prefix: str, i: int, subnet: str, band_in: float, band_out: float, delay_ms: float):
        tag = prefix.removeprefix("gmmvtb")
        self.ns = f"{prefix}n{i}"
        self.outer, self.inner = f"gt{tag}h{i}", f"gt{tag}v{i}"
        if len(self.outer) > 15:
            raise IsolationError(f"interface name {self.outer!r} is longer than 15 characters")
        base = 4 * (i & 63)
        net = f"{subnet}.{i >> 6}"
        self.host, self.addr = f"{net}.{base + 1}", f"{net}.{base + 2}"
        self.band_in, self.band_out, self.delay_ms = band_in, band_out, delay_ms
        self.created: list[str] = []  # what exists so far: only that is removed

    def create(self) -> "Link":
        band_in, band_out, delay_ms = self.band_in, self.band_out, self.delay_ms
        _sh("ip", "netns", "add", self.ns)
        self.created.append("ns")
        _sh("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        self.created.append("veth")
        _sh("ip", "link", "set", self.inner, "netns", self.ns)
        _sh("ip", "addr", "add", f"{self.host}/30", "dev", self.outer)
        _sh("ip", "link", "set", self.outer, "up")
        _sh("ip", "netns", "exec", self.ns, "ip", "addr", "add", f"{self.addr}/30", "dev", self.inner)
        _sh("ip", "netns", "exec", self.ns, "ip", "link", "set", self.inner, "up")
        _sh("ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "up")
        _shaping(self.outer, band_in, delay_ms)
        _shaping(self.inner, band_out, delay_ms, self.ns)
        return self

    def bytes_to_volunteer(self) -> int:
        return int(Path(f"/sys/class/net/{self.outer}/statistics/tx_bytes").read_text())

    def bytes_from_volunteer(self) -> int:
        return int(Path(f"/sys/class/net/{self.outer}/statistics/rx_bytes").read_text())

    def remove(self) -> None:
        if "veth" in self.created:  # deleting one end deletes the pair
            subprocess.run(["ip", "link", "del", self.outer], capture_output=True)
        if "ns" in self.created:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        self.created.clear()


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace `name` (made by `ip netns add`);
    threads and sockets it creates afterwards are inside. For a process that cannot be
    started with `ip netns exec` (a multiprocessing worker: call it first thing)."""
    path = next((d / name for d in NETNS_DIRS if (d / name).exists()), None)
    if path is None:
        raise IsolationError(f"network namespace {name!r} not found under /run/netns")
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise IsolationError(f"setns into {name!r} failed: {os.strerror(err)}")
    finally:
        os.close(fd)


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # the finally blocks remove what the run made


@contextlib.contextmanager
def interrupts_end_in_finally():
    """Inside: SIGTERM, SIGINT and SIGHUP raise KeyboardInterrupt, so a kill or a closed
    terminal unwinds through the caller's `finally` (which closes its `Resources`). A
    background job's SIGINT is ignored by the shell that started it: ours is installed
    anyway. The previous handlers come back on leaving."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Resources:
    """What one testbed run created (cgroups, links, processes), undone last first."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._undo: list = []
        self._closed = False
        atexit.register(self.close)

    def cgroup(self, version: str, name: str, cpu_percent: float, memory_bytes: int) -> Cgroup:
        cg = Cgroup(version, f"{self.prefix}{name}", cpu_percent, memory_bytes)
        self._undo.append(cg.remove)  # before it exists: a failure half-way is undone too
        return cg.create()

    def link(self, i: int, subnet: str, band_in: float, band_out: float, delay_ms: float) -> Link:
        link = Link(self.prefix, i, subnet, band_in, band_out, delay_ms)
        self._undo.append(link.remove)  # before it exists: a half-made link is undone too
        return link.create()

    def process(self, proc: subprocess.Popen) -> subprocess.Popen:
        def stop(p=proc):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self._undo.append(stop)
        return proc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # one failure must not leave the rest behind
                pass
        atexit.unregister(self.close)
