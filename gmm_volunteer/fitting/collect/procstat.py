"""Small readers of Linux /proc and /sys counters (no third-party dependency).

Everything here is a direct reading of kernel counters; the collectors turn the
differences between two readings into rates.
"""

from __future__ import annotations

import os
import time

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# Interfaces that are not a link to the outside: loopback, traffic-shaping mirrors,
# container bridges and veth pairs (counting them would double count or count local traffic).
_SKIP_PREFIXES = ("lo", "ifb", "docker", "veth", "br-", "virbr", "cni", "flannel")


def cpu_times() -> tuple[float, float]:
    """(idle_ticks, total_ticks) of all CPUs from /proc/stat (idle includes iowait)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    vals = [float(x) for x in parts[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0.0)
    # guest and guest_nice are already included in user and nice
    total = sum(vals[:8]) if len(vals) >= 8 else sum(vals)
    return idle, total


def n_cores() -> int:
    return os.cpu_count() or 1


def meminfo_mb() -> dict[str, float]:
    """Selected /proc/meminfo fields in MB (10^6 bytes)."""
    out: dict[str, float] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            fields = rest.split()
            if fields and key in ("MemTotal", "MemAvailable", "MemFree"):
                out[key] = float(fields[0]) * 1024.0 / 1e6
    return out


def default_nics() -> list[str]:
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []
    return [n for n in names if not n.startswith(_SKIP_PREFIXES)]


def nic_bytes(nics: list[str]) -> tuple[int, int]:
    """Summed (rx_bytes, tx_bytes) of the given interfaces."""
    rx = tx = 0
    for n in nics:
        base = f"/sys/class/net/{n}/statistics/"
        try:
            with open(base + "rx_bytes") as f:
                rx += int(f.read())
            with open(base + "tx_bytes") as f:
                tx += int(f.read())
        except OSError:
            continue
    return rx, tx


def nic_speed_mbps(nics: list[str]) -> float | None:
    """Summed link speed reported by the kernel, None when no interface reports one."""
    total = 0.0
    seen = False
    for n in nics:
        try:
            with open(f"/sys/class/net/{n}/speed") as f:
                s = float(f.read().strip())
        except (OSError, ValueError):
            continue
        if s > 0:
            total += s
            seen = True
    return total if seen else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def cpu_ids(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first CPU's family, model and stepping numbers from /proc/cpuinfo (empty where
    it has none): a virtual machine may name its CPU only by vendor and line ("AMD EPYC"),
    and the work of a batch differs between generations of one line (docs/validation.md 6)."""
    keys = {"cpu family": "family", "model": "model", "stepping": "stepping"}
    out: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends here
                k, _, v = line.partition(":")
                if k.strip() in keys:
                    out[keys[k.strip()]] = v.strip()
    except OSError:
        pass
    return out


def cpu_label(model: str, ids: dict | None) -> str:
    """A CPU as results name it: its model name and, where known, its family and model
    numbers, "AMD EPYC (family 23, model 49)"; the name alone has stood for CPUs whose
    batches differ by 2-3 times (docs/validation.md 6)."""
    ids = ids or {}
    nums = ", ".join(f"{k} {ids[k]}" for k in ("family", "model") if ids.get(k))
    return model + (f" ({nums})" if nums else "")


class ProcessSampler:
    """CPU time and RSS of one process (default: this one) from /proc/<pid>/."""

    def __init__(self, pid: int | None = None):
        self.pid = pid or os.getpid()

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            data = f.read()
        # fields after the ")" that closes the command name
        rest = data.rsplit(")", 1)[1].split()
        utime, stime = float(rest[11]), float(rest[12])
        return (utime + stime) / CLK_TCK

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/statm") as f:
            parts = f.read().split()
        return int(parts[1]) * PAGE_SIZE / 1e6


def now() -> float:
    return time.monotonic()
