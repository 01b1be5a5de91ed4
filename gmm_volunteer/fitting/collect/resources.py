"""`gmmv collect resources`: sample the resources this machine could volunteer.

Every `interval` seconds one row (see traces/FORMAT.md):
  time_s, band_in_mbps, band_out_mbps, cpu_pct, memory_mb, storage_mb
all as amounts AVAILABLE for volunteering:
  cpu_pct    = idle share of all cores over the interval * 100 * cores (100 = one core)
  memory_mb  = MemAvailable (/proc/meminfo), MB = 10^6 bytes
  storage_mb = free bytes of the filesystem holding `--path`, in MB
  band_*     = PROXY: nominal link capacity minus the traffic observed on the
               machine's network interfaces (loopback and virtual interfaces excluded)
               over the interval, clipped at 0. The nominal capacity is the kernel's
               reported link speed when there is one, else `--link-mbps`
               (default 100 Mbit/s, the paper's base profile). This is not a
               measurement of the available internet bandwidth (which would need
               probing a remote host); it captures how much of a stated link the
               machine's own traffic leaves free.

Linux only (reads /proc and /sys directly; no third-party dependency).
The CSV is written (and flushed) row by row to `resources.csv` while running and
compressed to `resources.csv.gz` at the end, so an interrupted run leaves usable data.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from . import procstat

COLUMNS = ["time_s", "band_in_mbps", "band_out_mbps", "cpu_pct", "memory_mb", "storage_mb"]


def machine_info(path: str, link_in: float, link_out: float, nics: list[str]) -> dict:
    mem = procstat.meminfo_mb()
    cores = procstat.n_cores()
    total_storage = shutil.disk_usage(path).total / 1e6
    return {
        "capacity": {
            "band_in_mbps": link_in,
            "band_out_mbps": link_out,
            "cpu_pct": 100.0 * cores,
            "memory_mb": round(mem.get("MemTotal", 0.0), 1),
            "storage_mb": round(total_storage, 1),
        },
        "cpu_model": procstat.cpu_model(),
        "cores": cores,
        "ram_mb": round(mem.get("MemTotal", 0.0), 1),
        "os": f"{platform.system()} {platform.release()} ({platform.platform()})",
        "python": platform.python_version(),
        "nics": nics,
    }


def collect_resources(
    out_dir: str | os.PathLike,
    interval: float = 3.0,
    duration: float = 3700.0,
    n_samples: int | None = None,
    link_mbps: float | None = None,
    path: str = ".",
    nics: list[str] | None = None,
    command: str | None = None,
    quiet: bool = False,
) -> Path:
    """Sample every `interval` s for `duration` s (or exactly `n_samples` rows).

    Returns the path of the written `resources.csv.gz`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    nics = list(nics) if nics is not None else procstat.default_nics()
    reported = procstat.nic_speed_mbps(nics)
    if link_mbps is not None:
        link, method_src = float(link_mbps), "stated with --link-mbps"
    elif reported is not None:
        link, method_src = float(reported), "link speed reported by the kernel (/sys/class/net/*/speed)"
    else:
        link, method_src = 100.0, ("stated default 100 Mbit/s (the paper's base profile); "
                                   "the interfaces report no link speed")
    started = _dt.datetime.now(_dt.timezone.utc)
    info = machine_info(path, link, link, nics)
    info.update(
        {
            "date": started.isoformat(timespec="seconds"),
            "command": command or " ".join(sys.argv),
            "interval_s": interval,
            "duration_s": duration if n_samples is None else n_samples * interval,
            "storage_path": os.path.abspath(path),
            "bandwidth_method": (
                "proxy: available = nominal link capacity - observed traffic on "
                f"{', '.join(nics) or 'no interface'} over the interval, clipped at 0; "
                f"nominal capacity {link:g} Mbit/s ({method_src})"
            ),
            "status": "running",
        }
    )
    (out / "machine.json").write_text(json.dumps(info, indent=2) + "\n")

    csv_path = out / "resources.csv"
    n_target = n_samples if n_samples is not None else max(1, int(round(duration / interval)))
    t0 = time.monotonic()
    prev_t = t0
    prev_idle, prev_total = procstat.cpu_times()
    prev_rx, prev_tx = procstat.nic_bytes(nics)
    cores = procstat.n_cores()
    written = 0
    with open(csv_path, "w", buffering=1) as f:
        f.write(",".join(COLUMNS) + "\n")
        try:
            for k in range(1, n_target + 1):
                target = t0 + k * interval
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t = time.monotonic()
                idle, total = procstat.cpu_times()
                rx, tx = procstat.nic_bytes(nics)
                mem = procstat.meminfo_mb()
                free = shutil.disk_usage(path).free / 1e6
                dt = max(t - prev_t, 1e-6)
                dtot = total - prev_total
                idle_frac = (idle - prev_idle) / dtot if dtot > 0 else 1.0
                cpu_avail = min(max(idle_frac, 0.0), 1.0) * 100.0 * cores
                in_used = (rx - prev_rx) * 8 / 1e6 / dt
                out_used = (tx - prev_tx) * 8 / 1e6 / dt
                row = [
                    round(t - t0, 3),
                    round(max(link - in_used, 0.0), 4),
                    round(max(link - out_used, 0.0), 4),
                    round(cpu_avail, 2),
                    round(mem.get("MemAvailable", 0.0), 1),
                    round(free, 1),
                ]
                f.write(",".join(str(v) for v in row) + "\n")
                written += 1
                prev_t, prev_idle, prev_total, prev_rx, prev_tx = t, idle, total, rx, tx
                if not quiet and k % 100 == 0:
                    print(f"resources: {k}/{n_target} samples", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            if not quiet:
                print("resources: interrupted, keeping the samples so far", file=sys.stderr)
    gz_path = out / "resources.csv.gz"
    with open(csv_path, "rb") as src, gzip.open(gz_path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    csv_path.unlink()
    info["status"] = "complete" if written == n_target else f"interrupted after {written} samples"
    info["n_samples"] = written
    info["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    (out / "machine.json").write_text(json.dumps(info, indent=2) + "\n")
    return gz_path


def limits_resources(out_dir: str | os.PathLike, limits, interval: float = 3.0, duration: float = 3700.0,
                     n_samples: int | None = None, command: str | None = None) -> Path:
    """The resources trace of a testbed node (`gmmv collect resources --testbed CONFIG`).

    What a node offers for volunteering is, in the testbed, the limits the kernel holds
    it to (`testbed.limits.NodeLimits`: CPU quota, memory limit, link rates, and the
    storage allocation, which the testbed does not limit): nothing else runs inside
    them, so every sample is the same and nothing is measured or waited for. machine.json
    gives the limits as the capacity, so the fitted allocation is the fraction 1 (sd 0)
    that `allocation: dedicated` means; the testbed's configs use that, and the fit needs
    the file only because every bundle has an allocation block.
    """
    from gmm_volunteer.testbed.limits import resource_rows

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = n_samples if n_samples is not None else max(1, int(round(duration / interval)))
    rows = resource_rows(limits, interval, n)
    with gzip.open(out / "resources.csv.gz", "wt") as f:
        f.write(",".join(COLUMNS) + "\n")
        for row in rows:
            f.write(",".join(f"{v:g}" for v in row) + "\n")
    cores = procstat.n_cores()
    info = {
        "capacity": {"band_in_mbps": limits.band_in_mbps, "band_out_mbps": limits.band_out_mbps,
                     "cpu_pct": limits.cpu_pct, "memory_mb": limits.memory_mb, "storage_mb": limits.storage_mb},
        "cpu_model": procstat.cpu_model(), "cores": cores,
        "ram_mb": round(procstat.meminfo_mb().get("MemTotal", 0.0), 1),
        "os": f"{platform.system()} {platform.release()} ({platform.platform()})",
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or " ".join(sys.argv),
        "interval_s": interval, "duration_s": n * interval, "n_samples": n, "status": "complete",
        "source": (f"configured limits of the testbed's {limits.node} node in {limits.config}, not measured: "
                   "a testbed node offers exactly its cgroup quota, memory limit and link rates"),
        "limits": limits.as_dict(),
    }
    (out / "machine.json").write_text(json.dumps(info, indent=2) + "\n")
    return out / "resources.csv.gz"
