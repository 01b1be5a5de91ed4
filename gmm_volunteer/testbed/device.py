"""A user's device in the testbed (paper 2.1: user i's device is node i), a real process
in its own cgroup and network namespace. It is both:

* the user (paper 2.2, requests): while online, after a think time it issues a request of
  a type drawn from the type probabilities, and waits for the answer at most its patience
  (then it abandons); going offline drops the active request;
* the volunteer (paper 2.2, readiness and execution): it downloads the model files the
  server tells it to (resuming a paused download with an HTTP Range request), and runs
  the batches placed on it: input downloads, one ONNX Runtime call for the batch
  (`fitting.collect.models.run_batch`, the collector's own code), result uploads.

It goes online and offline by the availability laws, from their stationary start
(docs/model.md D2). Its draws are the simulator's user's of the same seed or its own
(`testbed.draws`, module `draws`). Run as
``python -m gmm_volunteer.testbed.device WORKDIR V URL``; it stops after the last step and
writes ``device<V>.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp

from gmm_volunteer.model.constants import MEMORY
from gmm_volunteer.testbed.clock import Clock, wait_start
from gmm_volunteer.testbed.draws import Draws

MID_STEP = 0.4  # a user acts this far into a step, clear of the server's tick


MAX_SHARED = 32  # batches a node runs at once with execution: shared


def node_slots(spec: dict) -> int:
    """Batches a node executes at once: MAX_SHARED under shared execution, else the
    spec's `concurrency` (execution.discipline: fifo; testbed.config.node_execution)."""
    if spec.get("execution", "serial") == "shared":
        return MAX_SHARED
    return int(spec.get("concurrency", 1))


PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mb() -> float:
    """This process's resident memory, MB (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def peak_resident_mb(reset: bool = False) -> float | None:
    """This process's peak resident memory, MB (`VmHWM`), then with `reset` the peak set
    back to what it holds now (/proc/self/clear_refs); None where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
    except (OSError, StopIteration, ValueError):
        return None
    return kb * 1024 / 1e6


def timed_batch(run_batch, name: str, session, blobs: list, per_thread: bool, log: list | None = None,
                peak: bool = False):
    """Run one batch; return (results, CPU-s it took). With one intra-op thread ONNX
    Runtime computes on the calling thread, so that thread's CPU time is the batch's even
    while other batches run; otherwise the process's (batches then run one at a time).
    `log` gets [type, batch size, CPU-s counted, the calling thread's CPU-s, wall s, start
    on the machine's monotonic clock in s, the process's peak resident MB while it ran],
    so a run shows what each batch cost beside what the bundle says, and how long its
    node was idle before it (docs/testbed.md). The monotonic clock is the machine's, one
    for every process of a run. The peak is the batch's own only when it runs alone
    (`peak`, a node running one batch at a time); else None."""
    clock = time.thread_time if per_thread else time.process_time
    if peak:
        peak_resident_mb(reset=True)
    c0, t0, w0 = clock(), time.thread_time(), time.monotonic()
    out = run_batch(name, session, blobs)
    cpu = clock() - c0
    if log is not None:
        top = peak_resident_mb() if peak else None
        log.append([name, len(blobs), round(cpu, 5), round(time.thread_time() - t0, 5),
                    round(time.monotonic() - w0, 4), round(w0, 4), None if top is None else round(top, 1)])
    return out, cpu


class Device:
    def __init__(self, workdir: Path, v: int, url: str):
        spec = json.loads((workdir / "spec.json").read_text())
        self.spec, self.v, self.url = spec, v, url.rstrip("/")
        self.dir = workdir / f"node{v}"
        (self.dir / "models").mkdir(parents=True, exist_ok=True)
        self.draws = Draws(spec, v)  # testbed.draws: the simulator's keyed draws or own streams
        self.sessions: dict = {}  # model name -> ONNX Runtime session
        self.in_use: dict[str, int] = {}  # model name -> batches executing with it
        self.loads = [0, 0.0]  # sessions loaded, CPU-s spent loading them
        self.releases = 0  # idle sessions released to make room (sessions: fit)
        self.batches: list[list] = []  # what each batch cost (timed_batch)
        self.session_lock = threading.Lock()  # pool threads load and release sessions
        self.memory_mb = float(spec["user_max"][MEMORY])  # what the node offers its batches
        self.cancelled: set = set()
        # serial: k executions at a time (`concurrency`, 1 before it existed) in the order
        # they were placed, on the node's own CPU quota (docs/model.md D28)
        slots = node_slots(spec)
        self.exec_lock = asyncio.Semaphore(slots)
        self.per_thread = slots > 1 and spec["volunteer_threads"] == 1
        self.alone = slots == 1  # a batch's peak memory is its own (timed_batch)
        self.pool = ThreadPoolExecutor(slots)
        self.tasks: set[asyncio.Task] = set()
        self.issued: list[list[int]] = []  # rid, start, outcome seen (-1: none), end
        self.periods: list[list[int]] = []  # step online, step offline
        from gmm_volunteer.fitting.collect import models

        self.models = models  # imports onnxruntime and cv2 now, before step 0
        models.fix_mmap_threshold(spec.get("mmap_threshold_kb", 0))  # before any session

    # ---- plumbing ---------------------------------------------------------------------
    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def post(self, path: str, **kw):
        async with self.http.post(self.url + path, **kw) as r:
            return await r.json()

    # ---- the user ---------------------------------------------------------------------
    async def user(self, t_on: int) -> None:
        next_at = t_on + self.draws.think()
        while next_at < self.clock.steps:
            await self.clock.until(next_at + MID_STEP)
            k, patience = self.draws.request()
            r = await self.post(f"/request/{self.v}", params={"type": str(k)})
            if r["rid"] < 0:
                return
            rid, start = r["rid"], r["start"]
            entry = [rid, start, -1, -1]
            self.issued.append(entry)
            deadline = self.clock.t0 + start + patience + MID_STEP - time.time()
            try:
                async with self.http.get(f"{self.url}/wait/{rid}",
                                         timeout=aiohttp.ClientTimeout(total=max(deadline, 0.01))) as resp:
                    ans = await resp.json()
                entry[2], entry[3] = ans["outcome"], ans["end"]
                next_at = ans["end"] + 1 + self.draws.think()
            except asyncio.TimeoutError:
                await self.post(f"/abandon/{self.v}", params={"rid": str(rid)})
                entry[2] = 1  # abandoned (constants.OUTCOMES)
                next_at = start + patience + self.draws.think()

    # ---- the volunteer ----------------------------------------------------------------
    async def volunteer(self) -> None:
        while True:
            try:
                async with self.http.get(f"{self.url}/poll/{self.v}") as resp:
                    msgs = await resp.json()
            except aiohttp.ClientError:
                await asyncio.sleep(0.5)
                continue
            for m in msgs:
                if m["op"] == "download":
                    self.spawn(self.download(m["j"], m["name"]))
                elif m["op"] == "run":
                    self.spawn(self.run_batch(m))
                elif m["op"] == "cancel":
                    self.cancelled.update(tuple(s) for s in m["slots"])

    async def download(self, j: int, name: str) -> None:
        path = self.dir / "models" / f"{name}.onnx"
        part = path.with_suffix(".part")
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        async with self.http.get(f"{self.url}/model/{name}", headers=headers) as resp:
            mode = "ab" if resp.status == 206 else "wb"
            with open(part, mode) as f:
                async for chunk in resp.content.iter_chunked(1 << 16):
                    f.write(chunk)
        part.rename(path)
        await self.post(f"/ready/{self.v}/{j}")

    def _session(self, name: str, mem_mb: float):
        """The session of `name` (call with `session_lock` held), loaded if the node does not
        hold it. With `testbed.sessions: fit` idle sessions of other models are released
        (and the heap trimmed) when what the process holds above its start plus the batch's
        memory estimate `mem_mb` would exceed the node's memory: the estimate was measured
        on a worker holding one session (docs/testbed.md, "Memory")."""
        if self.spec.get("sessions", "kept") == "fit":
            idle = [k for k in self.sessions if k != name and not self.in_use.get(k)]
            if idle and resident_mb() - self.start_mb + mem_mb > self.memory_mb:
                for k in idle:
                    del self.sessions[k]
                self.models.trim_heap()
                self.releases += len(idle)
        if name not in self.sessions:
            c0 = time.thread_time()
            self.sessions[name] = self.models.make_session(self.dir / "models" / f"{name}.onnx",
                                                           threads=self.spec["volunteer_threads"])
            self.loads[0] += 1
            self.loads[1] += time.thread_time() - c0
        return self.sessions[name]

    def execute(self, name: str, mem_mb: float, blobs: list) -> tuple[list, float]:
        """One batch on a pool thread: its session, the ONNX Runtime call (timed), and with
        `sessions: fit` a trimmed heap afterwards, as between the collector's runs."""
        with self.session_lock:
            self.in_use[name] = self.in_use.get(name, 0) + 1
            session = self._session(name, mem_mb)
        try:
            return timed_batch(self.models.run_batch, name, session, blobs, self.per_thread, self.batches,
                               peak=self.alone)
        finally:
            with self.session_lock:
                self.in_use[name] -= 1
            if self.spec.get("sessions", "kept") == "fit":
                self.models.trim_heap()

    async def run_batch(self, m: dict) -> None:
        """Input download, execution, result upload (paper 2.2) of one batch."""
        name = m["name"]
        slots = [tuple(s) for s in m["slots"]]

        async def fetch(s):
            async with self.http.get(f"{self.url}/input/{s[0]}/{s[1]}") as resp:
                return await resp.read() if resp.status == 200 else None

        blobs = await asyncio.gather(*(fetch(s) for s in slots))
        live = [(s, b) for s, b in zip(slots, blobs) if b is not None and s not in self.cancelled]
        if not live:
            return
        loop = asyncio.get_running_loop()
        async with self.exec_lock:
            live = [(s, b) for s, b in live if s not in self.cancelled]
            if not live:
                return
            out, cpu = await loop.run_in_executor(self.pool, self.execute, name, float(m.get("mem", 0.0)),
                                                  [b for _, b in live])
        each = cpu / len(live)
        for (s, _), payload in zip(live, out):
            if s not in self.cancelled:
                await self.post(f"/result/{s[0]}/{s[1]}", data=payload,
                                params={"node": str(self.v), "cpu": f"{each:.6f}"})

    # ---- availability -------------------------------------------------------------------
    async def run(self) -> None:
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        try:
            await self.post(f"/hello/{self.v}")
            self.start_mb = resident_mb()  # the footprint, before any session (run.add_footprints)
            t0, steps = await wait_start(self.dir.parent)
            self.clock = Clock(t0, steps)
            online, change = self.draws.start()
            t = 0
            while t < steps:
                if online:
                    await self.clock.until(t + 0.1)
                    await self.post(f"/online/{self.v}")
                    period = [t, -1]
                    self.periods.append(period)
                    self.spawn(self.user(t))
                    self.spawn(self.volunteer())
                await self.clock.until(min(change, steps) + 0.1)
                if online and change < steps:
                    for task in list(self.tasks):  # unfinished work is lost (paper 2.2)
                        task.cancel()
                    await asyncio.gather(*self.tasks, return_exceptions=True)
                    await self.post(f"/offline/{self.v}")
                    period[1] = change
                    self.cancelled.clear()
                t, online = change, not online
                change = t + self.draws.period(online)
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.http.close()
            (self.dir.parent / f"device{self.v}.json").write_text(
                json.dumps({"issued": self.issued, "periods": self.periods,
                            "session_loads": [*self.loads, self.releases], "batches": self.batches}))


def main(argv: list[str]) -> int:
    device = Device(Path(argv[0]), int(argv[1]), argv[2])
    asyncio.run(device.run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
