"""In-process consumption sampling (~10 Hz) and aggregation to per-second rows.

The sampler records cumulative counters of the process it runs in:
  cpu_s      process CPU time of all its threads (time.process_time), seconds
  rss_mb     resident set size (/proc/self/statm), MB
  bytes_in   payload bytes received by the transfer helpers below
  bytes_out  payload bytes sent by them
Phase boundaries take an extra sample (`mark`), so a phase of a few milliseconds still
has exact counters at its start and end.
"""

from __future__ import annotations

import http.client
import math
import os
import socket
import struct
import threading
import time
from urllib.parse import urlparse

import numpy as np

from .procstat import ProcessSampler
from .server import SOCK_BUF


class Sampler:
    def __init__(self, hz: float = 10.0):
        self.period = 1.0 / hz
        self.bytes_in = 0
        self.bytes_out = 0
        self.storage_bytes = 0
        self._proc = ProcessSampler()
        self._lock = threading.Lock()
        self._rows: list[tuple[float, float, float, int, int, int]] = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> float:
        t = time.monotonic()
        row = (t, time.process_time(), self._proc.rss_mb(), self.bytes_in, self.bytes_out, self.storage_bytes)
        with self._lock:
            self._rows.append(row)
        return t

    mark = sample

    def _loop(self):
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            nxt += self.period
            d = nxt - time.monotonic()
            if d > 0:
                self._stop.wait(d)
            else:
                nxt = time.monotonic()

    def start(self) -> "Sampler":
        self._th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._th.join()

    def array(self) -> np.ndarray:
        with self._lock:
            a = np.array(self._rows, dtype=float)
        return a[np.argsort(a[:, 0], kind="stable")] if len(a) else a.reshape(0, 6)

    def clear_before(self, t: float) -> None:
        with self._lock:
            self._rows = [r for r in self._rows if r[0] >= t]

    def peak_rss(self, t0: float, t1: float) -> float:
        a = self.array()
        m = (a[:, 0] >= t0) & (a[:, 0] <= t1)
        return float(a[m, 2].max()) if m.any() else float("nan")


def per_second(a: np.ndarray, t0: float, t1: float) -> list[dict]:
    """Aggregate samples `a` (Sampler.array()) over the phase [t0, t1] into 1 s rows.

    Row k covers [t0 + k, min(t0 + k + 1, t1)]; a phase shorter than 1 s gives one row.
    Rates are counter differences (linearly interpolated at window edges) divided by the
    covered time; memory is the mean RSS of the samples in the window (interpolated when
    the window holds none).
    """
    dur = max(t1 - t0, 0.0)
    n = max(1, math.ceil(dur - 1e-9))
    # a process cannot use more than all cores; in windows of a few ms the two clocks'
    # reading jitter can suggest otherwise
    cpu_max = 100.0 * (os.cpu_count() or 1)
    ts = a[:, 0]
    rows = []
    for k in range(n):
        lo = t0 + k
        hi = min(t0 + k + 1, t1)
        w = max(hi - lo, 1e-6)
        cpu = (np.interp(hi, ts, a[:, 1]) - np.interp(lo, ts, a[:, 1])) / w * 100.0
        bin_ = (np.interp(hi, ts, a[:, 3]) - np.interp(lo, ts, a[:, 3])) * 8 / 1e6 / w
        bout = (np.interp(hi, ts, a[:, 4]) - np.interp(lo, ts, a[:, 4])) * 8 / 1e6 / w
        sto = (np.interp(hi, ts, a[:, 5]) - np.interp(lo, ts, a[:, 5])) / 1e6
        m = (ts >= lo) & (ts <= hi)
        mem = float(a[m, 2].mean()) if m.any() else float(np.interp((lo + hi) / 2, ts, a[:, 2]))
        rows.append({"t": k, "cpu_pct": min(max(cpu, 0.0), cpu_max), "memory_mb": mem,
                     "band_in_mbps": max(bin_, 0.0), "band_out_mbps": max(bout, 0.0),
                     "storage_delta_mb": max(sto, 0.0)})
    return rows


# ----------------------------------------------------------------------------- transfers
def _connect(url: str, timeout: float = 600.0) -> tuple[http.client.HTTPConnection, str]:
    u = urlparse(url)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCK_BUF)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCK_BUF)
    s.settimeout(timeout)
    s.connect((u.hostname, u.port))
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.sock = s
    path = u.path + ("?" + u.query if u.query else "")
    return conn, path


def http_get(url: str, sampler: Sampler | None = None, read_size: int = 65536, sink=None) -> bytes | int:
    """GET `url`, reading `read_size` bytes at a time and counting them in the sampler.

    With `sink` (a binary file), every chunk is written there as it arrives (and counted
    as storage) and the byte count is returned; otherwise the body is returned.
    """
    conn, path = _connect(url)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"GET {url}: HTTP {resp.status}")
        parts = []
        total = 0
        while True:
            b = resp.read(read_size)
            if not b:
                break
            total += len(b)
            if sampler is not None:
                sampler.bytes_in += len(b)
            if sink is not None:
                sink.write(b)
                if sampler is not None:
                    sampler.storage_bytes += len(b)
            else:
                parts.append(b)
        return total if sink is not None else b"".join(parts)
    finally:
        conn.close()


def http_post(url: str, data: bytes, sampler: Sampler | None = None, chunk: int = 16384) -> int:
    conn, path = _connect(url)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/octet-stream")
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders()
        mv = memoryview(data)
        for i in range(0, len(mv), chunk):
            part = mv[i:i + chunk]
            conn.sock.sendall(part)
            if sampler is not None:
                sampler.bytes_out += len(part)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {url}: HTTP {resp.status}")
        return int(body)
    finally:
        conn.close()


def unpack_batch(payload: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(payload):
        (n,) = struct.unpack_from("<I", payload, i)
        out.append(payload[i + 4:i + 4 + n])
        i += 4 + n
    return out


def pack_results(results: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(r)) + r for r in results)
