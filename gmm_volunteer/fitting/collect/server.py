"""A local rate-limited HTTP server (loopback) for input/result/subtask-data transfers.

Every transfer is paced by a token bucket at the rate given in the request's query
(`?rate=<Mbit/s>`), so a collector can emulate several link speeds on one machine:

  GET  /blob/<name>?rate=R        the file <name> from the served directory
  GET  /batch/<type>?n=N&rate=R   N inputs of a subtask type, length-prefixed, one transfer
  POST /upload?rate=R             reads the body at rate R, answers 200 with the byte count

Socket buffers are kept small (64 KiB) on both sides so that the sender sees the
pacing (without it, loopback buffers of several MB would absorb a whole upload at once).
The server runs in its own process, so its CPU does not count against the measured worker.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

SOCK_BUF = 64 * 1024


class TokenBucket:
    """Token bucket: `rate` bytes/s, at most `burst` bytes of credit.

    `consume(n)` blocks until n bytes of tokens are available. Starting with an empty
    bucket keeps the first `burst` bytes from going out faster than the rate.
    """

    def __init__(self, rate_bytes_s: float, burst: float | None = None, start_full: bool = False):
        if rate_bytes_s <= 0:
            raise ValueError("rate must be > 0")
        self.rate = float(rate_bytes_s)
        self.burst = float(burst if burst is not None else max(4096.0, self.rate / 50.0))
        self.tokens = self.burst if start_full else 0.0
        self.t = time.monotonic()

    def consume(self, n: int) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
            self.t = now
            # a request larger than the burst is allowed once the bucket is full
            need = min(float(n), self.burst)
            if self.tokens >= need:
                self.tokens -= n
                return
            time.sleep((need - self.tokens) / self.rate)


def mbps_to_bytes(mbps: float) -> float:
    return mbps * 1e6 / 8.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gmmv-collect"

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCK_BUF)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCK_BUF)
        except OSError:
            pass

    def _rate(self, q) -> float:
        return float(q.get("rate", ["100"])[0])

    def _send_paced(self, payload: bytes | memoryview, rate_mbps: float, chunk: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        bucket = TokenBucket(mbps_to_bytes(rate_mbps))
        mv = memoryview(payload)
        for i in range(0, len(mv), chunk):
            part = mv[i:i + chunk]
            bucket.consume(len(part))
            self.wfile.write(part)
        self.wfile.flush()

    def do_GET(self):
        u = urlparse(self.path)
        q = parse_qs(u.query)
        root: Path = self.server.root  # type: ignore[attr-defined]
        chunk = int(q.get("chunk", ["8192"])[0])
        if u.path.startswith("/blob/"):
            rel = u.path[len("/blob/"):]
            p = root / rel
            if ".." in Path(rel).parts or rel.startswith("/") or not p.is_file():
                self.send_error(404)
                return
            self._send_paced(self.server.cache(p), self._rate(q), chunk)  # type: ignore[attr-defined]
        elif u.path.startswith("/batch/"):
            typ = u.path[len("/batch/"):]
            n = int(q.get("n", ["1"])[0])
            files = sorted((root / "inputs" / typ).glob("*.jpg"))
            if not files:
                self.send_error(404)
                return
            parts = []
            for i in range(n):
                b = self.server.cache(files[i % len(files)])  # type: ignore[attr-defined]
                parts.append(struct.pack("<I", len(b)))
                parts.append(b)
            self._send_paced(b"".join(parts), self._rate(q), chunk)
        elif u.path == "/ping":
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        else:
            self.send_error(404)

    def do_POST(self):
        u = urlparse(self.path)
        q = parse_qs(u.query)
        n = int(self.headers.get("Content-Length", "0"))
        bucket = TokenBucket(mbps_to_bytes(self._rate(q)))
        chunk = int(q.get("chunk", ["8192"])[0])
        got = 0
        while got < n:
            want = min(chunk, n - got)
            bucket.consume(want)
            data = self.rfile.read(want)
            if not data:
                break
            got += len(data)
        body = str(got).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, root: Path):
        super().__init__(addr, _Handler)
        self.root = Path(root)
        self._cache: dict[Path, bytes] = {}
        self._lock = threading.Lock()

    def cache(self, p: Path) -> bytes:
        with self._lock:
            b = self._cache.get(p)
            if b is None:
                b = self._cache[p] = p.read_bytes()
            return b


def _serve(root: str, port_q, host: str = "127.0.0.1") -> None:
    srv = _Server((host, 0), Path(root))
    port_q.put(srv.server_address[1])
    srv.serve_forever(poll_interval=0.2)


class LocalServer:
    """Context manager: the rate-limited server in a child process on `host` (the
    loopback by default; the host end of a testbed link for a limited collection)."""

    def __init__(self, root: str | Path, in_process: bool = False, host: str = "127.0.0.1"):
        self.root = str(root)
        self.in_process = in_process
        self.host = host
        self.port: int | None = None

    def __enter__(self) -> "LocalServer":
        if self.in_process:
            self._srv = _Server((self.host, 0), Path(self.root))
            self.port = self._srv.server_address[1]
            self._th = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True)
            self._th.start()
        else:
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            self._proc = ctx.Process(target=_serve, args=(self.root, q, self.host), daemon=True)
            self._proc.start()
            self.port = q.get(timeout=60)
        return self

    def __exit__(self, *exc) -> None:
        if self.in_process:
            self._srv.shutdown()
            self._srv.server_close()
        else:
            self._proc.terminate()
            self._proc.join(timeout=10)

    @property
    def pid(self) -> int:
        """Process id of the server (this process when it runs in-process)."""
        import os

        return os.getpid() if self.in_process else int(self._proc.pid)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
