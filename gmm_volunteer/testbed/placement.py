"""The centralized and uniform rules (paper 2.3) on the live server's state.

The same decisions as `policies.centralized` and `policies.uniform`, written for the
state a real server holds (dicts of requests, nodes and batches) instead of the
simulator's arrays, and in the same order each step (`policies.base.Scheduler.act`):
subtask-data downloads, cancel the placements of ended requests, finish requests whose
subtasks are all done, place pending subtasks oldest request first. Memory estimates are
the bundle's (mean + 2 sd, `params.memory_table`), so both sides reserve the same.

Uniform draws a node uniformly among the feasible ones; the simulator reaches the same
law by rejection sampling then an exact scan, so the two agree in law, not draw by draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gmm_volunteer.model.constants import MEMORY, STORAGE
from gmm_volunteer.model.params import memory_table

SERVER = 0


@dataclass
class Slot:
    """Slot p of request `rid`: subtask type j, where it runs and how far it got."""

    rid: int
    p: int
    j: int
    node: int = -1
    batch: int = -1
    done: bool = False


@dataclass
class Request:
    rid: int
    user: int
    k: int
    start: int
    slots: list[Slot]

    @property
    def ndone(self) -> int:
        return sum(s.done for s in self.slots)


@dataclass
class Batch:
    """Subtasks of one type placed on one node in one step (paper 2.2): one execution."""

    bid: int
    node: int
    j: int
    born: int
    members: list[Slot] = field(default_factory=list)
    mem: float = 0.0  # memory estimate reserved for it, MB


@dataclass
class Node:
    alloc: np.ndarray  # maximum allocation per resource (constants.RESOURCES order)
    online: bool = False
    ready: set = field(default_factory=set)
    loading: int = -1  # subtask type whose data is being downloaded, -1 none
    paused: set = field(default_factory=set)
    committed: float = 0.0  # memory reserved by placements and downloads, MB

    def reserved_storage(self, data_mb) -> float:
        held = set(self.ready) | set(self.paused) | ({self.loading} if self.loading >= 0 else set())
        return float(sum(data_mb[j] for j in held))


class LiveScheduler:
    """Placement state and the rules of `scheduler` ('centralized' or 'uniform')."""

    def __init__(self, scheduler: str, bundle, server_max: np.ndarray, user_max: np.ndarray,
                 n_users: int, rng: np.random.Generator, max_downloads_per_node: int = 1):
        self.scheduler = scheduler
        self.rng = rng
        self.max_downloads = max_downloads_per_node
        st = bundle.subtask_types
        self.names = [s.name for s in st]
        self.task_sub = [[self.names.index(n) for n in t.subtasks] for t in bundle.task_types]
        self.data_mb = np.array([s.data_size_mb for s in st])
        self.dl_mem = np.array([s.memory.download_mb for s in st])
        self.mem_est = np.stack([memory_table(s.memory.batch_sizes, s.memory.execution_mb) for s in st])
        # Only subtask types some request asks for are downloaded (P.n_req).
        self.requested = sorted({j for row in self.task_sub for j in row})
        self.nodes = [Node(np.asarray(server_max, float), online=True, ready=set(range(len(st))))]
        self.nodes += [Node(np.asarray(user_max, float)) for _ in range(n_users)]
        self.requests: dict[int, Request] = {}
        self.batches: dict[int, Batch] = {}
        self._next_bid = 0

    # ---- estimates (actions.free_memory, marginal_memory) ---------------------------
    def mem(self, j: int, n: int) -> float:
        table = self.mem_est[j]
        if n < table.size:
            return float(table[n])
        return float(table[-1] + (table[-1] - table[-2]) * (n - table.size + 1))

    def free_memory(self, v: int) -> float:
        return self.nodes[v].alloc[MEMORY] - self.nodes[v].committed

    def _born_now(self, v: int, j: int, t: int) -> Batch | None:
        for b in self.batches.values():
            if b.node == v and b.j == j and b.born == t:
                return b
        return None

    def marginal_memory(self, v: int, j: int, t: int) -> float:
        b = self._born_now(v, j, t)
        n = len(b.members) if b is not None else 0
        return self.mem(j, n + 1) - self.mem(j, n)

    # ---- actions ---------------------------------------------------------------------
    def assign(self, s: Slot, v: int, t: int) -> Batch:
        b = self._born_now(v, s.j, t)
        if b is None:
            b = Batch(self._next_bid, v, s.j, t)
            self._next_bid += 1
            self.batches[b.bid] = b
        b.members.append(s)
        s.node, s.batch = v, b.bid
        self._resize(b)
        return b

    def _resize(self, b: Batch) -> None:
        live = sum(not m.done and m.node == b.node for m in b.members)
        m = self.mem(b.j, live)
        self.nodes[b.node].committed += m - b.mem
        b.mem = m
        if live == 0:
            del self.batches[b.bid]

    def release(self, s: Slot) -> None:
        """The slot leaves its batch (its result is in, or it was cancelled or reset)."""
        b = self.batches.get(s.batch)
        if b is not None:
            if not s.done:
                b.members.remove(s)
            self._resize(b)

    def start_download(self, v: int, j: int) -> None:
        n = self.nodes[v]
        n.loading = j
        n.paused.discard(j)
        n.committed += self.dl_mem[j]

    def end_download(self, v: int, j: int, ok: bool) -> None:
        n = self.nodes[v]
        if n.loading == j:
            n.loading = -1
            n.committed -= self.dl_mem[j]
            if ok:
                n.ready.add(j)
            else:
                n.paused.add(j)

    # ---- one step of the policy stage (policies.base.Scheduler.act) -------------------
    def downloads(self) -> list[tuple[int, int]]:
        """common.schedule_downloads: each online user node with no download in progress
        starts one missing subtask-data download, drawn uniformly among those that fit its
        free storage and whose download-memory estimate fits its free memory. A paused
        download (its node went offline) resumes first (the executor's rule)."""
        if self.scheduler != "uniform":
            return []
        out = []
        for v in range(1, len(self.nodes)):
            n = self.nodes[v]
            if not n.online or n.loading >= 0:
                continue
            fs = n.alloc[STORAGE] - n.reserved_storage(self.data_mb)
            fm = self.free_memory(v)
            if n.paused:
                j = min(n.paused)
                if self.dl_mem[j] <= fm:
                    self.start_download(v, j)
                    out.append((v, j))
                continue
            cand = [j for j in self.requested if j not in n.ready
                    and self.data_mb[j] <= fs and self.dl_mem[j] <= fm]
            if cand:
                j = cand[int(self.rng.integers(len(cand)))]
                self.start_download(v, j)
                out.append((v, j))
        return out

    def finish_ready(self) -> list[Request]:
        done = [r for r in self.requests.values() if r.ndone == len(r.slots)]
        for r in done:
            del self.requests[r.rid]
        return done

    def place(self, t: int) -> list[Batch]:
        """Pending subtasks, oldest request first (ties: lower user first), to a node:
        centralized the server while its memory estimate fits; uniform a node drawn
        among the online holders of the data and the server with room for the marginal
        estimate. Returns the batches that got members this step."""
        touched: dict[int, Batch] = {}
        full: set[int] = set()
        for r in sorted(self.requests.values(), key=lambda r: (r.start, r.user)):
            for s in r.slots:
                if s.node >= 0 or s.done or s.j in full:
                    continue
                if self.scheduler == "centralized":
                    v = SERVER if self.free_memory(SERVER) >= self.marginal_memory(SERVER, s.j, t) else -1
                else:
                    cand = [SERVER] + [u for u in range(1, len(self.nodes))
                                       if self.nodes[u].online and s.j in self.nodes[u].ready]
                    feas = [u for u in cand if self.free_memory(u) >= self.marginal_memory(u, s.j, t)]
                    v = feas[int(self.rng.integers(len(feas)))] if feas else -1
                if v < 0:
                    full.add(s.j)  # free memory only shrinks within the step
                    continue
                b = self.assign(s, v, t)
                touched[b.bid] = b
        return list(touched.values())

    def reset_node(self, v: int) -> list[Slot]:
        """Node v went offline: its unfinished placements go back to idle (paper 2.2);
        a download in progress pauses and keeps what it has."""
        out = []
        for b in list(self.batches.values()):
            if b.node != v:
                continue
            for s in list(b.members):
                if not s.done:
                    self.release(s)
                    s.node, s.batch = -1, -1
                    out.append(s)
        n = self.nodes[v]
        if n.loading >= 0:
            self.end_download(v, n.loading, ok=False)
        n.online = False
        return out

    def cancel(self, r: Request) -> list[Slot]:
        """The request ended unfinished: its placements are cancelled."""
        out = []
        for s in r.slots:
            if s.node >= 0 and not s.done:
                self.release(s)
                out.append(s)
                s.node = -1
        self.requests.pop(r.rid, None)
        return out
