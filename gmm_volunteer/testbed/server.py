"""The testbed's dedicated server v0 (paper 2.1), a real process: it accepts the users'
requests, splits them into subtasks (the bundle's task types), places them each step
with the live centralized or uniform rule (`placement`), executes its own batches with
ONNX Runtime, serves model files and inputs to the volunteers, collects their results
and answers the users.

Why HTTP on aiohttp (docs/testbed.md): model files are large and a volunteer that went
offline resumes its download where it stopped, which HTTP gives by Range requests and
aiohttp's file responses; requests, long polls and uploads are plain request/response,
so one asyncio loop serves every volunteer and user without a broker. A message queue
(ZeroMQ) would need its own chunking and resumption for the model files.

Run as ``python -m gmm_volunteer.testbed.server WORKDIR PORT HOST...`` inside the server's
cgroup; it stops by itself after the last step and writes ``server.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from aiohttp import web

from gmm_volunteer.model.constants import (
    EV_CANCEL, EV_COMPLETE, EV_RESET, EV_START, OUT_ABANDONED, OUT_COMPLETED, OUT_DROPPED, EVENTS,
)
from gmm_volunteer.testbed.clock import Clock, wait_start
from gmm_volunteer.testbed.device import node_slots, timed_batch
from gmm_volunteer.testbed.placement import SERVER, LiveScheduler, Request, Slot

POLL_S = 2.0  # longest wait of a volunteer's poll for instructions


class Server:
    def __init__(self, workdir: Path, spec: dict):
        from gmm_volunteer.fitting.collect import models
        from gmm_volunteer.io.bundlefiles import load_bundle

        self.workdir, self.spec = workdir, spec
        models.fix_mmap_threshold(spec.get("mmap_threshold_kb", 0))  # before any session (docs/testbed.md)
        self.bundle = load_bundle(spec["model"])
        seq = np.random.SeedSequence(spec["entropy"]).spawn(spec["users"] + 1)[0]
        g_sched, g_inputs = (np.random.Generator(np.random.PCG64(s)) for s in seq.spawn(2))
        self.sched = LiveScheduler(spec["scheduler"], self.bundle, np.array(spec["server_max"]),
                                   np.array(spec["user_max"]), spec["users"], g_sched,
                                   spec.get("max_downloads_per_node", 1))
        names = self.sched.names
        self.model_files = {n: models.model_path(n) for n in names}
        self.sessions = {n: models.make_session(self.model_files[n], threads=spec["server_threads"])
                         for n in names}
        self.inputs = {n: [models.make_input(n, g_inputs) for _ in range(spec["inputs_per_type"])] for n in names}
        self.run_batch = models.run_batch
        # One at a time (serial), or up to `slots` at once taken from the pool's queue in
        # the order they were placed (fifo with k workers; shared: MAX_SHARED)
        self.slots = node_slots(spec)
        self.pool = ThreadPoolExecutor(self.slots)
        self.per_thread = self.slots > 1 and spec["server_threads"] == 1
        self.queue: asyncio.Queue = asyncio.Queue()
        self.outbox = {v: [] for v in range(1, spec["users"] + 1)}
        self.wake = {v: asyncio.Event() for v in self.outbox}
        self.waiters: dict[int, asyncio.Future] = {}
        self.active_of: dict[int, int] = {}  # user -> rid of its active request
        self.next_rid = 0
        self.hello: set[int] = set()
        self.log_req: list[list[int]] = []  # user, type, start, end, outcome, rid
        self.accepted: dict[tuple[int, int], int] = {}
        self.rejected = 0
        self.clock: Clock | None = None
        steps = spec["steps"]
        self.events = np.zeros((steps, 2, len(EVENTS)), np.int64)
        self.work = np.zeros((steps, 2))
        self.batches: list[list] = []  # what each of the server's batches cost (timed_batch)
        self.online = np.zeros(steps, np.int64)
        self.active = np.zeros(steps, np.int64)

    # ---- bookkeeping ------------------------------------------------------------------
    def now(self) -> int:
        return self.clock.step() if self.clock else 0

    def event(self, v: int, ev: int, n: int = 1) -> None:
        self.events[self.now(), 0 if v == SERVER else 1, ev] += n

    def send(self, v: int, msg: dict) -> None:
        self.outbox[v].append(msg)
        self.wake[v].set()

    def end_request(self, r: Request, end: int, outcome: int) -> None:
        self.log_req.append([r.user, r.k, r.start, end, outcome, r.rid])
        self.active_of.pop(r.user, None)
        fut = self.waiters.pop(r.rid, None)
        if fut is not None and not fut.done():
            fut.set_result({"outcome": int(outcome), "end": int(end)})

    # ---- the policy stage, once per step ----------------------------------------------
    async def ticks(self) -> None:
        sc = self.sched
        for t in range(self.spec["steps"]):
            await self.clock.until(t + 1)
            self.online[t] = sum(n.online for n in sc.nodes[1:])
            self.active[t] = len(sc.requests)
            for v, j in sc.downloads():
                self.send(v, {"op": "download", "j": j, "name": sc.names[j]})
            for r in sc.finish_ready():
                self.end_request(r, t, OUT_COMPLETED)
            for b in sc.place(t):
                fresh = [s for s in b.members if b.born == t and not s.done]
                self.events[t, 0 if b.node == SERVER else 1, EV_START] += len(fresh)
                if b.node == SERVER:
                    await self.queue.put(b.bid)
                else:
                    self.send(b.node, {"op": "run", "bid": b.bid, "j": b.j, "name": sc.names[b.j], "mem": b.mem,
                                       "slots": [[s.rid, s.p] for s in b.members if not s.done]})

    async def executor(self) -> None:
        """Run the server's batches in the order they were placed: one at a time
        (execution: serial), k at a time (fifo with concurrency k: the pool's k threads
        take them in order) or each at once on its own thread (shared)."""
        running: set[asyncio.Task] = set()
        while True:
            bid = await self.queue.get()
            if self.slots > 1:
                task = asyncio.create_task(self.execute(bid))
                running.add(task)
                task.add_done_callback(running.discard)
            else:
                await self.execute(bid)

    async def execute(self, bid: int) -> None:
        b = self.sched.batches.get(bid)
        live = [s for s in (b.members if b else []) if not s.done and s.node == SERVER]
        if not live:
            return
        name = self.sched.names[b.j]
        blobs = [self.inputs[name][s.rid % len(self.inputs[name])] for s in live]
        loop = asyncio.get_running_loop()
        _, cpu = await loop.run_in_executor(self.pool, timed_batch, self.run_batch, name, self.sessions[name],
                                            blobs, self.per_thread, self.batches, self.slots == 1)
        t = self.now()
        self.work[t, 0] += cpu
        for s in live:
            if s.node == SERVER and not s.done:  # not cancelled meanwhile
                self.accept(s)
                self.events[t, 0, EV_COMPLETE] += 1

    def accept(self, s: Slot) -> None:
        s.done = True
        self.sched.release(s)
        key = (s.rid, s.p)
        self.accepted[key] = self.accepted.get(key, 0) + 1

    # ---- users --------------------------------------------------------------------------
    async def h_request(self, req: web.Request) -> web.Response:
        v, k = int(req.match_info["v"]), int(req.query["type"])
        sc = self.sched
        if not sc.nodes[v].online or v in self.active_of or self.clock.over():
            return web.json_response({"rid": -1})
        rid = self.next_rid
        self.next_rid += 1
        slots = [Slot(rid, p, j) for p, j in enumerate(sc.task_sub[k])]
        sc.requests[rid] = Request(rid, v, k, self.now(), slots)
        self.active_of[v] = rid
        return web.json_response({"rid": rid, "start": sc.requests[rid].start})

    async def h_wait(self, req: web.Request) -> web.Response:
        rid = int(req.match_info["rid"])
        done = [r for r in self.log_req if r[5] == rid]
        if done:
            return web.json_response({"outcome": done[0][4], "end": done[0][3]})
        fut = self.waiters.setdefault(rid, asyncio.get_running_loop().create_future())
        return web.json_response(await fut)

    def _end_active(self, v: int, outcome: int) -> None:
        rid = self.active_of.get(v)
        r = self.sched.requests.get(rid) if rid is not None else None
        if r is None:
            return
        placed = [(s.node, s.rid, s.p) for s in r.slots if s.node >= 0 and not s.done]
        self.sched.cancel(r)
        for node, rid, p in placed:
            self.event(node, EV_CANCEL)
            if node != SERVER:  # the volunteer stops working on it
                self.send(node, {"op": "cancel", "slots": [[rid, p]]})
        self.end_request(r, max(self.now() - 1, r.start), outcome)

    async def h_abandon(self, req: web.Request) -> web.Response:
        v = int(req.match_info["v"])
        rid = int(req.query["rid"])
        if self.active_of.get(v) == rid:
            self._end_active(v, OUT_ABANDONED)
        return web.json_response({})

    # ---- volunteers ---------------------------------------------------------------------
    async def h_hello(self, req: web.Request) -> web.Response:
        self.hello.add(int(req.match_info["v"]))
        return web.json_response({})

    async def h_status(self, req: web.Request) -> web.Response:
        return web.json_response({"hello": len(self.hello)})

    async def h_online(self, req: web.Request) -> web.Response:
        v = int(req.match_info["v"])
        self.sched.nodes[v].online = True
        return web.json_response({})

    async def h_offline(self, req: web.Request) -> web.Response:
        v = int(req.match_info["v"])
        self._end_active(v, OUT_DROPPED)
        reset = self.sched.reset_node(v)
        self.event(v, EV_RESET, len(reset))
        self.outbox[v].clear()
        return web.json_response({})

    async def h_poll(self, req: web.Request) -> web.Response:
        v = int(req.match_info["v"])
        if not self.outbox[v]:
            self.wake[v].clear()
            try:
                await asyncio.wait_for(self.wake[v].wait(), POLL_S)
            except asyncio.TimeoutError:
                pass
        msgs, self.outbox[v] = self.outbox[v], []
        return web.json_response(msgs)

    async def h_model(self, req: web.Request) -> web.StreamResponse:
        name = req.match_info["name"]
        if name not in self.model_files:
            raise web.HTTPNotFound()
        return web.FileResponse(self.model_files[name])  # honours Range: resumed downloads

    async def h_ready(self, req: web.Request) -> web.Response:
        v, j = int(req.match_info["v"]), int(req.match_info["j"])
        if self.sched.nodes[v].online:
            self.sched.end_download(v, j, ok=True)
        return web.json_response({})

    def _slot(self, rid: int, p: int) -> Slot | None:
        r = self.sched.requests.get(rid)
        return r.slots[p] if r is not None and 0 <= p < len(r.slots) else None

    async def h_input(self, req: web.Request) -> web.Response:
        rid, p = int(req.match_info["rid"]), int(req.match_info["p"])
        s = self._slot(rid, p)
        if s is None:
            raise web.HTTPGone()
        name = self.sched.names[s.j]
        return web.Response(body=self.inputs[name][rid % len(self.inputs[name])])

    async def h_result(self, req: web.Request) -> web.Response:
        rid, p, v = int(req.match_info["rid"]), int(req.match_info["p"]), int(req.query["node"])
        await req.read()
        s = self._slot(rid, p)
        if s is None or s.node != v or s.done or not self.sched.nodes[v].online:
            self.rejected += 1
            return web.json_response({"accepted": False})
        self.accept(s)
        self.events[self.now(), 1, EV_COMPLETE] += 1
        self.work[self.now(), 1] += float(req.query.get("cpu", 0.0))
        return web.json_response({"accepted": True})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.add_routes([
            web.post("/hello/{v}", self.h_hello), web.get("/status", self.h_status),
            web.post("/online/{v}", self.h_online), web.post("/offline/{v}", self.h_offline),
            web.post("/request/{v}", self.h_request), web.get("/wait/{rid}", self.h_wait),
            web.post("/abandon/{v}", self.h_abandon), web.get("/poll/{v}", self.h_poll),
            web.get("/model/{name}", self.h_model), web.post("/ready/{v}/{j}", self.h_ready),
            web.get("/input/{rid}/{p}", self.h_input), web.post("/result/{rid}/{p}", self.h_result),
        ])
        return app

    def write_log(self) -> None:
        out = {
            "requests": self.log_req,
            "active_at_end": sorted(self.sched.requests),
            "events": self.events.tolist(), "work": self.work.tolist(),
            "online": self.online.tolist(), "active": self.active.tolist(),
            "accepted": [[k[0], k[1], n] for k, n in self.accepted.items()],
            "rejected": self.rejected, "issued": self.next_rid, "batches": self.batches,
        }
        tmp = self.workdir / "server.json.tmp"
        tmp.write_text(json.dumps(out))
        tmp.rename(self.workdir / "server.json")


async def serve(workdir: Path, port: int, hosts: list[str]) -> None:
    spec = json.loads((workdir / "spec.json").read_text())
    server = Server(workdir, spec)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    for h in hosts:
        await web.TCPSite(runner, h, port).start()
    (workdir / "server.up").write_text(str(os.getpid()))
    t0, steps = await wait_start(workdir)
    server.clock = Clock(t0, steps)
    worker = asyncio.create_task(server.executor())
    try:
        await server.ticks()
    finally:
        worker.cancel()
        server.write_log()
        for fut in server.waiters.values():  # users still waiting: the run is over
            if not fut.done():
                fut.set_result({"outcome": -1, "end": -1})
        await asyncio.sleep(0.2)
        await runner.cleanup()
        server.pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str]) -> int:
    workdir, port, hosts = Path(argv[0]), int(argv[1]), argv[2].split(",")
    asyncio.run(serve(workdir, port, hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
