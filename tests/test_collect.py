"""Tests of the trace collectors (gmm_volunteer/fitting/collect).

Run without the collect extras: only the tests that execute ONNX models skip when
onnxruntime / rapidocr are missing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os

import numpy as np
import pytest

from gmm_volunteer.fitting.collect.lloyd_max import distortion, lloyd_max

linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc (Linux)")

# Optimal 4-level quantizer of N(0, 1) (Max 1960): levels, thresholds, MSE.
NORMAL4_LEVELS = np.array([-1.5104, -0.4528, 0.4528, 1.5104])
NORMAL4_THRESH = np.array([-0.9816, 0.0, 0.9816])
NORMAL4_MSE = 0.1175


def test_lloyd_max_standard_normal_four_levels():
    n = 200_000
    x = np.random.default_rng(12345).standard_normal(n)
    levels, thresholds = lloyd_max(x, 4, 500)
    # The sampling sd of each empirical optimal level was measured at about 3/sqrt(n)
    # (30 seeds, n = 2e4 and 2e5); allow 5 sd, plus the 4-digit rounding of the table.
    tol = 15.0 / math.sqrt(n) + 1e-4
    assert levels.shape == (4,) and thresholds.shape == (3,)
    np.testing.assert_allclose(levels, NORMAL4_LEVELS, atol=tol)
    np.testing.assert_allclose(thresholds, NORMAL4_THRESH, atol=tol)
    # thresholds are the midpoints, levels the centroids of their cells
    np.testing.assert_allclose(thresholds, (levels[:-1] + levels[1:]) / 2)
    cell = np.searchsorted(thresholds, x)
    for i in range(4):
        assert levels[i] == pytest.approx(x[cell == i].mean(), abs=1e-9)
    assert distortion(x, levels) == pytest.approx(NORMAL4_MSE, abs=0.004)


def test_lloyd_max_uniform_gives_equal_cells():
    x = np.random.default_rng(1).uniform(0, 1, 100_000)
    levels, _ = lloyd_max(x, 4, 500)
    np.testing.assert_allclose(levels, [0.125, 0.375, 0.625, 0.875], atol=0.01)


def test_lloyd_max_few_distinct_values_and_ties():
    levels, thresholds = lloyd_max([100.0] * 50 + [99.5, 98.0], 4, 100)
    np.testing.assert_allclose(levels, [98.0, 99.5, 100.0])
    np.testing.assert_allclose(thresholds, [98.75, 99.75])
    # heavy ties at one value plus a spread tail: still n sorted, distinct levels
    x = np.concatenate([np.full(900, 100.0), np.linspace(50, 99, 100)])
    levels, thresholds = lloyd_max(x, 4, 200)
    assert levels.shape == (4,) and np.all(np.diff(levels) > 0)
    assert levels[-1] == pytest.approx(100.0, abs=1.0)
    with pytest.raises(ValueError):
        lloyd_max([], 4, 10)


class FakeClock:
    """Stands in for the `time` module of `gmm_volunteer.fitting.collect.server`: `sleep` advances a
    virtual clock instead of waiting, so the rate a token bucket enforces is measured in
    virtual seconds and no load on the machine can change it."""

    def __init__(self):
        import threading

        self.now = 1000.0
        self.slept = 0.0
        self._lock = threading.Lock()

    def monotonic(self):
        with self._lock:
            return self.now

    def sleep(self, dt):
        # A real sleep always lets some time pass; so does this one (1 us at least), or
        # a deficit below the clock's float resolution would never be paid off.
        dt = max(dt, 1e-6)
        with self._lock:
            self.now += dt
            self.slept += dt


@pytest.fixture
def fake_clock(monkeypatch):
    from gmm_volunteer.fitting.collect import server

    clock = FakeClock()
    monkeypatch.setattr(server, "time", clock)
    return clock


def test_token_bucket_rate(fake_clock):
    from gmm_volunteer.fitting.collect.server import TokenBucket

    rate = 2_000_000.0  # bytes/s
    b = TokenBucket(rate)
    chunks = 1_000_000 // 8192 + 1
    for _ in range(chunks):
        b.consume(8192)
    sent = chunks * 8192
    # The bucket starts empty and credit accrues only with (virtual) time: sending
    # `sent` bytes takes sent / rate seconds, up to the last chunk's rounding.
    assert fake_clock.slept == pytest.approx(sent / rate, rel=1e-6, abs=8192 / rate)
    # A request larger than the burst goes once the bucket is full, and is paid back.
    big = TokenBucket(rate, burst=10_000.0)
    t0 = fake_clock.now
    big.consume(100_000)
    big.consume(1)
    assert fake_clock.now - t0 == pytest.approx(100_001 / rate, abs=1e-5)


@linux_only
def test_rate_limited_server_loopback(tmp_path, fake_clock):
    from gmm_volunteer.fitting.collect.sampling import Sampler, http_get, http_post
    from gmm_volunteer.fitting.collect.server import LocalServer, mbps_to_bytes

    payload = os.urandom(600_000)
    (tmp_path / "blob.bin").write_bytes(payload)
    rate = mbps_to_bytes(20.0)
    with LocalServer(tmp_path, in_process=True) as srv:
        s = Sampler(10)
        t0 = fake_clock.slept
        body = http_get(f"{srv.url}/blob/blob.bin?rate=20", s, read_size=1024)
        slept_get = fake_clock.slept - t0
        t0 = fake_clock.slept
        got = http_post(f"{srv.url}/upload?rate=20", payload[:300_000], s)
        slept_post = fake_clock.slept - t0
    assert body == payload and s.bytes_in == len(payload)
    assert got == 300_000 and s.bytes_out == 300_000
    # The server held each transfer to 20 Mbit/s: the (virtual) time its token bucket
    # made it wait is the transfer's size over the rate, within one burst (1/50 s).
    for n, slept in ((len(payload), slept_get), (300_000, slept_post)):
        assert n / rate - 0.05 <= slept <= n / rate + 0.05, (n, slept)


def test_per_second_aggregation():
    from gmm_volunteer.fitting.collect.sampling import per_second

    # counters: cpu 0.5 s per s, rss 100 MB, 1 MB/s in, nothing out, 0.25 MB/s stored
    t = np.linspace(0.0, 2.5, 26)
    a = np.column_stack([t, 0.5 * t, np.full_like(t, 100.0), 1e6 * t, 0 * t, 0.25e6 * t])
    rows = per_second(a, 0.0, 2.5)
    assert [r["t"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["cpu_pct"] == pytest.approx(50.0)
        assert r["memory_mb"] == pytest.approx(100.0)
        assert r["band_in_mbps"] == pytest.approx(8.0)
        assert r["band_out_mbps"] == 0.0
    assert rows[2]["storage_delta_mb"] == pytest.approx(0.125)
    # a phase shorter than one second gives one row
    short = per_second(a, 1.0, 1.04)
    assert len(short) == 1 and short[0]["band_in_mbps"] == pytest.approx(8.0)


@linux_only
def test_tiny_resources_collection(tmp_path):
    from gmm_volunteer.fitting.collect.resources import COLUMNS, collect_resources

    path = collect_resources(tmp_path, interval=0.2, n_samples=2, quiet=True, command="test")
    with gzip.open(path, "rt") as f:
        lines = f.read().strip().splitlines()
    assert lines[0].split(",") == COLUMNS == [
        "time_s", "band_in_mbps", "band_out_mbps", "cpu_pct", "memory_mb", "storage_mb"]
    rows = [[float(v) for v in ln.split(",")] for ln in lines[1:]]
    assert len(rows) == 2
    info = json.loads((tmp_path / "machine.json").read_text())
    cap = info["capacity"]
    assert set(cap) == {"band_in_mbps", "band_out_mbps", "cpu_pct", "memory_mb", "storage_mb"}
    assert info["status"] == "complete" and info["n_samples"] == 2 and info["interval_s"] == 0.2
    for row in rows:
        d = dict(zip(COLUMNS, row))
        assert d["time_s"] > 0
        for k in cap:
            assert 0.0 <= d[k] <= cap[k] + 1e-6, (k, d[k], cap[k])
    assert rows[1][0] > rows[0][0]
    assert not (tmp_path / "resources.csv").exists()


def test_cli_parser():
    from gmm_volunteer.fitting.collect.cli import add_collect_parser

    p = argparse.ArgumentParser(prog="gmmv")
    sp = p.add_subparsers(dest="command")
    add_collect_parser(sp)
    a = p.parse_args(["collect", "resources", "--interval", "0.5", "--duration", "10"])
    assert a.collect_command == "resources" and a.interval == 0.5 and callable(a.func)
    a = p.parse_args(["collect", "subtasks", "--batch-sizes", "1,2", "--bandwidths", "5 20"])
    assert a.batch_sizes == [1, 2] and a.bandwidths == [5.0, 20.0]
    a = p.parse_args(["collect", "downloads", "--levels", "3"])
    assert a.levels == 3 and a.chunk_bytes == 1024


def _read_csv_gz(path):
    with gzip.open(path, "rt") as f:
        header, *rows = [ln.split(",") for ln in f.read().strip().splitlines()]
    return header, rows


@linux_only
def test_tiny_subtasks_and_downloads(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("rapidocr")
    pytest.importorskip("cv2")
    from gmm_volunteer.fitting.collect.downloads import collect_downloads
    from gmm_volunteer.fitting.collect.subtasks import CONS_COLUMNS, collect_subtasks

    # the quiet gate is opened wide: tests run beside other work, and this checks the files
    out = collect_subtasks(tmp_path / "sub", types=["ppocr_cls"], batch_sizes=[1, 2], bandwidths=[50.0],
                           repetitions=1, quiet=True, quiet_threshold=1e3)
    header, runs = _read_csv_gz(out / "runs.csv.gz")
    assert header[:7] == ["run_id", "subtask_type", "batch_size", "bandwidth_mbps",
                          "download_s", "execution_s", "upload_s"]
    assert len(runs) == 2 and all(r[1] == "ppocr_cls" for r in runs)
    assert header[-2:] == ["other_load_cores", "attempts"] and all(r[-1] == "1" for r in runs)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["session"]["intra_op_num_threads"] == 2 and meta["session"]["inter_op_num_threads"] == 1
    assert meta["quiet_gate"]["threshold_cores"] == 1e3 and meta["quiet_gate"]["repeats"] == 0
    header, cons = _read_csv_gz(out / "consumption.csv.gz")
    assert header == CONS_COLUMNS
    assert {r[1] for r in cons} == {"download", "execution", "upload"}
    cat = json.loads((out / "catalog.json").read_text())
    assert cat[0]["weights"] == "trained (rapidocr)" and cat[0]["data_size_mb"] > 0.1

    trace = tmp_path / "res.csv"
    trace.write_text("time_s,band_in_mbps\n" + "".join(f"{i},{v}\n" for i, v in enumerate([20, 21, 40, 41] * 5)))
    d = collect_downloads(tmp_path / "dl", resource_trace=trace, n_levels=2, types=["ppocr_cls"], quiet=True)
    lv = json.loads((d / "levels.json").read_text())
    assert lv["levels_mbps"] == pytest.approx([20.5, 40.5])
    header, rows = _read_csv_gz(d / "downloads.csv.gz")
    assert header == ["level_mbps", "run_id", "t", "band_in_mbps", "cpu_pct", "memory_mb", "storage_delta_mb"]
    assert {float(r[0]) for r in rows} == {20.5, 40.5}
    for run in {r[1] for r in rows}:
        stored = sum(float(r[6]) for r in rows if r[1] == run)
        assert stored == pytest.approx(cat[0]["data_size_mb"], rel=0.01)
