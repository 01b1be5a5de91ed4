"""Start, measure and stop one testbed run; return its record in the simulator's format.

The orchestrator (the `gmmv testbed` process) makes each node's limits (isolation),
starts the server in its cgroup and one device process per user in its cgroup and
network namespace, waits for all to be up, writes t0 (clock), and then measures each
step what the kernel counts: CPU time and memory per cgroup, bytes per link. After the
last step it collects the server's and the devices' logs and builds a `RunRecord`
(io.runrecord), so the store is written by the simulator's own writer. Whatever happens,
`Resources.close()` removes every process, cgroup, namespace and link it made.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from gmm_volunteer._version import __version__
from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.model.bundle import bundle_digest
from gmm_volunteer.fitting.collect.procstat import cpu_ids, cpu_model
from gmm_volunteer.io.runrecord import RunRecord
from gmm_volunteer.model.constants import BAND_IN, BAND_OUT, CPU, MEMORY, RESOURCES, STORAGE
from gmm_volunteer.testbed.clock import write_start
from gmm_volunteer.testbed.config import node_execution
from gmm_volunteer.testbed.draws import keyed_spec
from gmm_volunteer.testbed.isolation import (IsolationError, Resources, cgroup_version, free_subnet,
                                             interrupts_end_in_finally)

MB = 1e6  # the model's MB (constants.RESOURCE_UNITS); memory limits are set in bytes
# Room a node's processes get above the config's memory while they start (imports, the
# server's sessions), before their limit becomes memory + footprint (add_footprints).
START_HEADROOM_MB = 1000.0


class TestbedError(RuntimeError):
    """A process of the run failed or did not come up in time."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(cfg, tb, entropy: int, server_max, user_max) -> dict:
    threads = tb.server_threads or max(1, int(server_max[CPU] // 100))
    mode, k = node_execution(cfg, tb)  # what execution.discipline asks (D28)
    return {
        "model": str(cfg.model), "entropy": entropy, "users": cfg.users.count, "steps": cfg.steps,
        "scheduler": cfg.scheduler, "server_max": server_max.tolist(), "user_max": user_max.tolist(),
        "server_threads": threads, "volunteer_threads": max(1, int(user_max[CPU] // 100)),
        "inputs_per_type": tb.inputs_per_type, "execution": mode, "concurrency": k,
        "sessions": tb.sessions, "mmap_threshold_kb": tb.mmap_threshold_kb,
        "draws": tb.draws,
        **(keyed_spec(cfg, entropy) if tb.draws == "keyed" else {}),
        "max_downloads_per_node": int(cfg.scheduler_options.get("max_downloads_per_node", 1)),
        "type_probabilities": list(cfg.requests.type_probabilities),
        "laws": {"online": cfg.availability.online.law().tolist(),
                 "offline": cfg.availability.offline.law().tolist(),
                 "think_time": cfg.requests.think_time.law().tolist(),
                 "patience": cfg.requests.patience.law().tolist()},
    }


def _status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
        return json.loads(r.read())


def _dir_mb(d: Path) -> float:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) / MB if d.exists() else 0.0


def run_testbed(cfg, tb, progress=None) -> RunRecord:
    """Run the testbed of `cfg` (a validated RunConfig) with section `tb`; `progress(t)`
    is called once per step. Raises IsolationError when the machine cannot host it."""
    version = cgroup_version()
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise IsolationError(f"`{tool}` (iproute2) is not installed")
    bundle = load_bundle(cfg.model)
    base = cfg.base_profile.as_array()
    server_max, user_max = cfg.server.maximum(base), base * cfg.users.capacity
    entropy = int(cfg.seed) if cfg.seed is not None else int(np.random.SeedSequence().entropy)
    n = cfg.users.count
    temporary = tb.workdir is None
    spec = _spec(cfg, tb, entropy, server_max, user_max)
    res = Resources(f"gmmvtb{os.getpid()}")
    # Ctrl-C, kill and a closed terminal all end in the finally below, which undoes
    # whatever was made: every resource is registered with `res` before it is created.
    signals = interrupts_end_in_finally()
    signals.__enter__()
    wall0 = time.time()
    workdir = None
    try:
        workdir = Path(tempfile.mkdtemp(prefix=f"gmmv-testbed-{os.getpid()}-")) if temporary else Path(tb.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in ("start.json", "server.json", "server.up"):
            (workdir / stale).unlink(missing_ok=True)
        (workdir / "spec.json").write_text(json.dumps(spec))
        # with the footprint added, a node starts with room for it (START_HEADROOM_MB) and
        # gets its limit once it is up (add_footprints)
        head = START_HEADROOM_MB if tb.footprint == "added" else 0.0
        cg_server = res.cgroup(version, "s", server_max[CPU], int((server_max[MEMORY] + head) * MB))
        cgs = [res.cgroup(version, f"u{v}", user_max[CPU], int((user_max[MEMORY] + head) * MB))
               for v in range(1, n + 1)]
        subnet = free_subnet(tb.subnet)
        links = [res.link(v, subnet, user_max[BAND_IN], user_max[BAND_OUT], tb.link_delay_ms)
                 for v in range(1, n + 1)]
        port = _free_port()
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        hosts = ",".join(["127.0.0.1"] + [link.host for link in links])
        procs = [res.process(subprocess.Popen(
            [sys.executable, "-m", "gmm_volunteer.testbed.server", str(workdir), str(port), hosts],
            preexec_fn=lambda: cg_server.join(os.getpid()), env=env,
            stdout=open(workdir / "server.log", "wb"), stderr=subprocess.STDOUT))]
        deadline = time.time() + tb.startup_timeout_s
        while not (workdir / "server.up").exists():
            if procs[0].poll() is not None or time.time() > deadline:
                raise TestbedError(f"the server did not start (see {workdir / 'server.log'})")
            time.sleep(0.1)
        for v, (cg, link) in enumerate(zip(cgs, links), start=1):
            procs.append(res.process(subprocess.Popen(
                ["ip", "netns", "exec", link.ns, sys.executable, "-m", "gmm_volunteer.testbed.device",
                 str(workdir), str(v), f"http://{link.host}:{port}"],
                preexec_fn=lambda cg=cg: cg.join(os.getpid()), env=env,
                stdout=open(workdir / f"device{v}.log", "wb"), stderr=subprocess.STDOUT)))
        while _status(port)["hello"] < n:
            dead = [i for i, p in enumerate(procs) if p.poll() is not None]
            if dead:
                names = ["the server" if i == 0 else f"device {i}" for i in dead]
                raise TestbedError(f"{', '.join(names)} exited while starting (see its log in {workdir}; "
                                   "set testbed.workdir to keep the logs)")
            if time.time() > deadline:
                raise TestbedError(f"not every process was up after {tb.startup_timeout_s:g} s "
                                   f"(testbed.startup_timeout_s; logs in {workdir})")
            time.sleep(0.2)
        footprint_mb = add_footprints([cg_server, *cgs], [server_max[MEMORY]] + [user_max[MEMORY]] * n,
                                      tb.footprint)
        load_start = os.getloadavg()
        t0 = time.time() + 1.0
        write_start(workdir, t0, cfg.steps)
        lost: list = []
        meas = _measure(cfg.steps, t0, cg_server, cgs, links, workdir, bundle, progress,
                        lambda t: _take_lost_offline(t, procs, cgs, port, lost))
        deadline = time.time() + 30.0
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            time.sleep(0.1)
        if not (workdir / "server.json").exists():
            why = " (killed for memory: its cgroup's limit was reached)" if cg_server.oom_kills() else ""
            raise TestbedError(f"the server wrote no log{why}; see {workdir / 'server.log'} "
                               "(set testbed.workdir to keep it)")
        log = json.loads((workdir / "server.json").read_text())
        devices = [json.loads(p.read_text()) for p in sorted(workdir.glob("device*.json"))]
        limits = {"cpu_percent": [cg_server.cpu_percent] + [c.cpu_percent for c in cgs],
                  "memory_mb": [cg_server.memory_bytes / MB] + [c.memory_bytes / MB for c in cgs],
                  "memory_peak_mb": [cg_server.memory_peak() / MB] + [c.memory_peak() / MB for c in cgs],
                  "oom_kills": [cg_server.oom_kills()] + [c.oom_kills() for c in cgs],
                  "throttled_s": [cg_server.throttled_seconds()] + [c.throttled_seconds() for c in cgs],
                  "footprint_mb": footprint_mb,
                  "devices_lost": lost}
        load = {"start": list(load_start), "end": list(os.getloadavg())}
    finally:
        res.close()
        signals.__exit__(None, None, None)
        if temporary and workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    return _record(cfg, tb, bundle, entropy, version, log, devices, meas, limits, time.time() - wall0,
                   server_max, load)


def add_footprints(cgroups, memory_mb, mode: str) -> list[float]:
    """Each node's own footprint, MB: what its process holds once it is up and before
    step 0 (interpreter, runtime, the server's loaded sessions; `Cgroup.memory_held`).
    With `testbed.footprint: added` each limit is raised by it, so that the config's
    memory is what the node's batches get, as the model's node offers it to its
    schedulers (paper 2.3); their estimates (the bundle's, `params.memory_table`) hold
    batches only. Before, the footprint came out of the config's memory, and shared
    execution ended in OOM kills (docs/validation.md section 6)."""
    footprint = [cg.memory_held() / MB for cg in cgroups]
    if mode == "added":
        for cg, memory, f in zip(cgroups, memory_mb, footprint):
            cg.set_memory_limit(int((memory + f) * MB))
    return footprint


def _take_lost_offline(t: int, procs, cgs, port: int, lost: list) -> None:
    """A device process that exited during the run (the kernel's OOM killer, a crash)
    leaves for good: the server takes the node offline as at a departure (its request
    dropped, its unfinished subtasks back to the queue, paper 2.2), so the run goes on
    with the others. Each loss is recorded as [device, step, exit code, OOM kills]."""
    done = {d for d, *_ in lost}
    for v, p in enumerate(procs[1:], start=1):
        if v in done or p.poll() is None:
            continue
        lost.append([v, t, p.returncode, cgs[v - 1].oom_kills()])
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/offline/{v}", data=b"", method="POST")
            urllib.request.urlopen(req, timeout=2).close()
        except OSError:
            pass  # the server itself is gone: the run fails below for want of its log


def _measure(steps, t0, cg_server, cgs, links, workdir, bundle, progress, each_step=None) -> dict:
    """Per-step consumption as the kernel counts it (cgroups, link byte counters);
    `each_step(t)` runs after step t's reading."""
    n = len(cgs)
    node_cpu = np.zeros((steps, n + 1), np.float32)
    scons = np.zeros((steps, len(RESOURCES)), np.float32)
    ucons = np.zeros((steps, len(RESOURCES)), np.float32)
    server_data = sum(s.data_size_mb for s in bundle.subtask_types)  # it holds every model

    def cpu_read(cg):
        # Each counter is timed on its own read: on a loaded machine this process can be
        # descheduled between reads, and a counter read late against one shared timestamp
        # counts CPU from beyond the window it is divided by.
        before = time.monotonic()
        value = cg.cpu_seconds()
        return value, (before + time.monotonic()) / 2

    def read():
        cpu = np.array([cpu_read(cg) for cg in (cg_server, *cgs)])
        return (time.monotonic(), cpu[:, 0], cpu[:, 1],
                np.array([link.bytes_to_volunteer() for link in links], float),
                np.array([link.bytes_from_volunteer() for link in links], float))

    last = read()
    for t in range(steps):
        delay = t0 + t + 1 - time.time()
        if delay > 0:
            time.sleep(delay)
        now = read()
        dt = max(now[0] - last[0], 1e-3)
        cpu = (now[1] - last[1]) / np.maximum(now[2] - last[2], 1e-3) * 100.0
        node_cpu[t] = cpu
        down = (now[3] - last[3]).sum() * 8 / MB / dt  # server -> volunteers
        up = (now[4] - last[4]).sum() * 8 / MB / dt
        scons[t, [BAND_IN, BAND_OUT, CPU, MEMORY, STORAGE]] = (up, down, cpu[0], cg_server.memory_used() / MB,
                                                               server_data)
        ucons[t, [BAND_IN, BAND_OUT, CPU, MEMORY]] = (down, up, cpu[1:].sum(),
                                                      sum(c.memory_used() for c in cgs) / MB)
        if t % 10 == 0 or t == steps - 1:  # file sizes change slowly; read them now and then
            ucons[t, STORAGE] = sum(_dir_mb(workdir / f"node{v}" / "models") for v in range(1, n + 1))
        else:
            ucons[t, STORAGE] = ucons[t - 1, STORAGE]
        last = now
        if each_step is not None:
            each_step(t)
        if progress is not None:
            progress(t)
    return {"node_cpu": node_cpu, "server": scons, "user": ucons}


def _record(cfg, tb, bundle, entropy, version, log, devices, meas, limits, wall, server_max, load) -> RunRecord:
    steps, n = cfg.steps, cfg.users.count
    reqs = np.array(log["requests"], np.int64).reshape(-1, 6)
    accepted = np.array(log["accepted"], np.int64).reshape(-1, 3)
    ended = set(reqs[:, 5].tolist())
    active = set(log["active_at_end"])
    issued = [e[0] for d in devices for e in d["issued"]]
    unaccounted = sorted(set(issued) - ended - active)
    account = {
        "cgroup_version": version,
        "requests_issued_by_users": len(issued),
        "requests_received": int(log["issued"]),
        "requests_ended": len(ended),
        "requests_active_at_end": len(active),
        "requests_unaccounted": unaccounted,
        "results_accepted": int(accepted[:, 2].sum()) if accepted.size else 0,
        "results_accepted_twice": int((accepted[:, 2] > 1).sum()) if accepted.size else 0,
        "results_rejected": int(log["rejected"]),
        "devices_reporting": len(devices),
        "devices_lost": limits.pop("devices_lost"),
        # per reporting device: ONNX Runtime sessions loaded, the CPU-s that took, and the
        # idle sessions released to make room (testbed.sessions: fit)
        "session_loads": [d.get("session_loads") for d in devices],
        # every executed batch: [type, size, CPU-s counted, executing thread's CPU-s, wall s],
        # the server's, then each reporting device's
        "batches": {"server": log.get("batches", []), "devices": [d.get("batches", []) for d in devices]},
        "limits": limits,
        "load_average": load,  # the machine's 1, 5 and 15 min load at step 0 and after the last step
        # the work a batch takes depends on the CPU (docs/validation.md section 6)
        "machine": {"cpu_model": cpu_model(), "cpu_ids": cpu_ids(), "cores": os.cpu_count()},
    }
    attrs = {
        "config": cfg.to_yaml(),
        "seed_entropy": str(entropy),
        "gmmv_version": __version__,
        "model_bundle": str(cfg.model),
        "model_provisional": bool(bundle.provisional),
        "model_sha256": bundle_digest(bundle),
        "steps": steps,
        "users": n,
        "scheduler": cfg.scheduler,
        "executor": cfg.executor,
        "user_capacity": float(cfg.users.capacity),
        "server_capacity": float(cfg.server.capacity),
        "autoscaler": cfg.autoscaler,
        "wall_time_s": wall,
        "source": "testbed",
        "testbed_config": json.dumps(tb.model_dump(mode="json")),
        "testbed": json.dumps(account),
    }
    node = np.arange(n + 1)
    series = {
        "node_cpu": (("time", "node"), meas["node_cpu"],
                     {"long_name": "CPU used per node (0 = server), cgroup accounting", "units": "%"}),
        "node_cpu_limit": (("node",), np.array(limits["cpu_percent"], np.float32),
                           {"long_name": "CPU quota per node (cgroup)", "units": "%"}),
        "node_memory_limit": (("node",), np.array(limits["memory_mb"], np.float32),
                              {"long_name": "memory limit per node (cgroup)", "units": "MB"}),
        "node_memory_peak": (("node",), np.array(limits["memory_peak_mb"], np.float32),
                             {"long_name": "largest memory charge per node (cgroup)", "units": "MB"}),
    }
    alloc = np.tile(server_max.astype(np.float32), (steps, 1))
    return RunRecord(
        request_user=reqs[:, 0].astype(np.int32), request_type=reqs[:, 1].astype(np.int8),
        request_start=reqs[:, 2], request_end=reqs[:, 3], request_outcome=reqs[:, 4].astype(np.int8),
        online_users=np.array(log["online"], np.int32), active_requests=np.array(log["active"], np.int32),
        server_allocation=alloc, server_consumption=meas["server"], user_consumption=meas["user"],
        subtask_events=np.array(log["events"], np.int32),
        completed_work=np.array(log["work"], np.float32),
        request_type_names=tuple(t.name for t in bundle.task_types), attrs=attrs,
        policy_series=series, policy_coords={"node": node},
    )
