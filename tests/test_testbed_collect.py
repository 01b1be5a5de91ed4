"""`gmmv collect ... --testbed CONFIG`: traces measured inside a testbed node's limits
(docs/testbed.md, "Fitting from the testbed").

The argument checks and the resources trace need no root; the limited worker (its
cgroup, its shaped link, their removal on every exit) is checked live where the machine
allows it, and skipped with the reason where it does not, like the live testbed run.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gmm_volunteer.cli.commands import main
from testbed_support import unavailable

ROOT = Path(__file__).resolve().parents[1]
LIGHT = ROOT / "configs" / "testbed" / "light-uniform.yaml"
MEASURE_MB = 200.0  # holds the imports and ppocr_cls, not ResNet-50 (about 240 MB itself)


def _collect(capsys, *argv: str) -> tuple[int, str]:
    code = main(["collect", *argv])
    return code, capsys.readouterr().err


# --- without root -------------------------------------------------------------------

def test_node_limits_are_the_testbeds(tmp_path):
    from gmm_volunteer.testbed.limits import node_limits

    user = node_limits(LIGHT, "user")
    assert (user.cpu_pct, user.memory_mb, user.band_in_mbps, user.band_out_mbps) == (15.0, 900.0, 20.0, 20.0)
    assert user.threads == 1 and user.shaped  # one intra-op thread for a fraction of a core
    server = node_limits(LIGHT, "server")
    assert (server.cpu_pct, server.memory_mb, server.threads, server.shaped) == (100.0, 2500.0, 1, False)


@pytest.mark.parametrize("argv, names", [
    (["resources", "--node", "server"], "--node needs --testbed"),
    (["subtasks", "--node", "user"], "--node needs --testbed"),
    (["resources", "--testbed", "no/such.yaml"], "no/such.yaml: no such file"),
    (["resources", "--testbed", str(ROOT / "configs" / "quickstart.yaml")], "users.allocation"),
    (["resources", "--testbed", str(LIGHT), "--link-mbps", "50"], "--link-mbps"),
    (["resources", "--testbed", str(LIGHT), "--nics", "eth0"], "--nics"),
    (["subtasks", "--testbed", str(LIGHT), "--bandwidths", "5"], "--bandwidths"),
    (["downloads", "--testbed", str(LIGHT), "--node", "server"], "--node server"),
    (["downloads", "--testbed", str(LIGHT), "--fixed-levels", "20"], "--fixed-levels"),
    (["downloads", "--testbed", str(LIGHT), "--levels", "3"], "--levels"),
])
def test_bad_input_exits_2_naming_it(capsys, tmp_path, argv, names):
    code, err = _collect(capsys, *argv, "--out", str(tmp_path / "out"))
    assert code == 2, err
    assert names in err
    assert not (tmp_path / "out").exists()  # refused before anything is made


def test_unequal_link_rates_refused_for_subtasks(capsys, tmp_path):
    cfg = tmp_path / "asym.yaml"
    cfg.write_text(LIGHT.read_text().replace("band_out: 20 ", "band_out: 10 "))
    code, err = _collect(capsys, "subtasks", "--testbed", str(cfg), "--out", str(tmp_path / "out"))
    assert code == 2 and "band_out (10)" in err, err


def test_resources_are_the_configured_limits(capsys, tmp_path):
    import pandas as pd

    from gmm_volunteer.fitting.traces import _check_resources

    out = tmp_path / "resources"
    code, err = _collect(capsys, "resources", "--testbed", str(LIGHT), "--out", str(out), "--samples", "50",
                         "--interval", "3")
    assert code == 0, err
    df = pd.read_csv(out / "resources.csv.gz")
    machine = json.loads((out / "machine.json").read_text())
    assert len(df) == 50 and df["time_s"].iloc[-1] == 150
    assert (df["cpu_pct"] == 15).all() and (df["memory_mb"] == 900).all()
    assert (df["band_in_mbps"] == 20).all() and (df["band_out_mbps"] == 20).all()
    assert machine["capacity"] == {"band_in_mbps": 20.0, "band_out_mbps": 20.0, "cpu_pct": 15.0,
                                   "memory_mb": 900.0, "storage_mb": 1000.0}
    assert "not measured" in machine["source"]
    _check_resources(df, machine)  # what `gmmv fit` reads: allocation fraction 1, sd 0


# --- live: root, cgroups, namespaces ----------------------------------------------

def _leftovers(pid: int) -> list[str]:
    """Cgroups, namespaces and links named for collector `pid` that still exist."""
    tag = f"gmmvtb{pid}"
    out = [str(p) for p in Path("/sys/fs/cgroup").rglob(f"{tag}*")] if Path("/sys/fs/cgroup").exists() else []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [line.split()[0] for line in ns.splitlines() if line.startswith(tag)]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out += [w for w in links.split() if w.startswith(f"gt{pid}h")]
    return out


def _in_cgroup(pid: int) -> list[int]:
    """Processes in the CPU cgroup of collector `pid` (its worker, once it joined)."""
    for d in Path("/sys/fs/cgroup").rglob(f"gmmvtb{pid}collect"):
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            pass
    return []


def _inside() -> dict:
    """Runs in the limited worker: where it is, and how much CPU a second of spinning got."""
    c0, t0 = time.process_time(), time.monotonic()
    while time.monotonic() - t0 < 1.5:
        pass
    return {"cgroup": Path("/proc/self/cgroup").read_text(), "netns": os.readlink("/proc/self/ns/net"),
            "cpu_share": (time.process_time() - c0) / (time.monotonic() - t0)}


def test_limited_worker_runs_inside_and_leaves_nothing(tmp_path):
    why = unavailable(runtime=False)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    import concurrent.futures as cf
    import multiprocessing as mp

    from gmm_volunteer.testbed.limits import LimitedWorker, node_limits

    limits = node_limits(LIGHT, "user")
    with LimitedWorker(limits, link=True) as lw:
        made = lw.names()
        quota = int((lw.cg.dirs["cpu"] / ("cpu.cfs_quota_us" if lw.cg.version == "v1" else "cpu.max"))
                    .read_text().split()[0])
        with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), initializer=lw.initializer,
                                    initargs=lw.initargs) as ex:
            seen = ex.submit(_inside).result()
        counted = lw.report()
    assert quota == 15_000  # 15 % of the 100 ms period
    assert lw.cg.name in seen["cgroup"]
    assert seen["netns"] != os.readlink("/proc/self/ns/net")  # in the link's namespace, not ours
    # CFS lets a quota's 15 ms run at once: over 1.5 s the share is within a period of 15 %
    assert seen["cpu_share"] < 0.15 + 0.1 / 1.5 + 0.02, seen
    assert counted["cpu_s"] > 0.1 and counted["throttled_s"] > 0 and counted["oom_kills"] == 0
    assert len(made) == 3 and _leftovers(os.getpid()) == []


def test_limited_worker_removes_what_it_made_on_an_error():
    why = unavailable(runtime=False)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    from gmm_volunteer.testbed.limits import LimitedWorker, node_limits

    with pytest.raises(RuntimeError, match="inside"):
        with LimitedWorker(node_limits(LIGHT, "user"), link=True):
            assert _leftovers(os.getpid())  # made
            raise RuntimeError("inside")
    assert _leftovers(os.getpid()) == []


def _gmmv(*argv: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from gmm_volunteer.cli.commands import main; sys.exit(main(sys.argv[1:]))",
            *argv]


def test_limited_subtask_collection_end_to_end(tmp_path):
    """A short collection in a device's limits: the worker's CPU is the cgroup's, the runs
    record the link's rate, and nothing named for the collector is left."""
    why = unavailable(runtime=True)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    out = tmp_path / "subtasks"
    p = subprocess.Popen(_gmmv("collect", "subtasks", "--testbed", str(LIGHT), "--types", "ppocr_cls",
                               "--batch-sizes", "1,2", "--repetitions", "1", "--quiet-threshold", "2",
                               "--out", str(out), "-q"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["limits"]["cpu_pct"] == 15 and meta["intra_op_threads"] == 1
    counted = meta["limits_counted"]
    assert counted["cpu_s"] > 0 and counted["oom_kills"] == 0
    assert counted["link_bytes_to_node"] > 0 and counted["link_bytes_from_node"] > 0  # over the link
    with gzip.open(out / "runs.csv.gz", "rt") as f:
        rows = f.read().splitlines()
    assert len(rows) == 3 and all(",20," in r for r in rows[1:])
    assert _leftovers(p.pid) == []


def test_limited_collection_interrupted_removes_what_it_made(tmp_path):
    why = unavailable(runtime=True)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    proc = subprocess.Popen(_gmmv("collect", "subtasks", "--testbed", str(LIGHT), "--types", "ppocr_det",
                                  "--batch-sizes", "5", "--repetitions", "5", "--quiet-threshold", "2",
                                  "--out", str(tmp_path / "subtasks"), "-q"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _in_cgroup(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _in_cgroup(proc.pid), "no worker joined the collection's cgroup"
        time.sleep(2.0)  # the worker is inside, measuring
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # it did not end on SIGTERM: end it the way it must, then fail
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, err
    assert _leftovers(proc.pid) == []
    assert not (tmp_path / "subtasks" / "meta.json").exists()


@pytest.mark.parametrize("argv, names", [
    (["--node", "user"], "--node needs --testbed"),
    (["--testbed", "no/such.yaml"], "no/such.yaml: no such file"),
    (["--types", "ppocr_cls,nosuch"], "--types: nosuch is not a subtask type"),
    (["--types", ","], "--types names no subtask type"),
])
def test_calibrate_bad_limits_exit_2(capsys, tmp_path, argv, names):
    from gmm_volunteer.testbed.calibrate import main as calibrate_main

    code = calibrate_main([str(ROOT / "gmm_volunteer" / "bundles" / "default"), str(tmp_path / "out"), *argv])
    assert code == 2 and names in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_calibrate_names_a_type_the_nodes_memory_cannot_hold():
    """Each type is measured in its own process inside the node's limits: a model too big
    for the memory limit is killed by the kernel and named, the others are measured."""
    why = unavailable(runtime=True)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    from dataclasses import replace

    from gmm_volunteer.testbed.calibrate import _measure_limited
    from gmm_volunteer.testbed.limits import node_limits

    # ResNet-50's session alone takes about 240 MB above the imports (docs/testbed.md, "Memory")
    small = replace(node_limits(LIGHT, "user"), cpu_pct=100.0, memory_mb=MEASURE_MB)
    measured, skipped = _measure_limited(small, ["ppocr_cls", "resnet50"], [1], repetitions=1)
    assert set(measured) == {"ppocr_cls"} and measured["ppocr_cls"][1] > 0
    assert set(skipped) == {"resnet50"} and "OOM kill" in skipped["resnet50"]


def _run_gmmv(tmp_path, *argv: str, timeout: float = 600) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen(_gmmv(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    _, err = p.communicate(timeout=timeout)
    return p, err


def test_limited_collection_of_the_server_node_and_of_downloads(tmp_path):
    """The server's limits (no link, its threads) for subtasks; a device's link for downloads."""
    why = unavailable(runtime=True)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    p, err = _run_gmmv(tmp_path, "collect", "subtasks", "--testbed", str(LIGHT), "--node", "server",
                       "--types", "ppocr_cls", "--batch-sizes", "1", "--bandwidths", "20", "--repetitions", "1",
                       "--quiet-threshold", "2", "--out", str(tmp_path / "subtasks"), "-q")
    assert p.returncode == 0, err
    meta = json.loads((tmp_path / "subtasks" / "meta.json").read_text())
    assert meta["limits"]["node"] == "server" and meta["limits"]["cpu_pct"] == 100 and not meta["limits"]["link"]
    assert meta["limits_counted"]["cpu_s"] > 0 and "link_bytes_to_node" not in meta["limits_counted"]
    assert _leftovers(p.pid) == []
    p, err = _run_gmmv(tmp_path, "collect", "downloads", "--testbed", str(LIGHT), "--types", "ppocr_cls",
                       "--out", str(tmp_path / "downloads"), "-q")
    assert p.returncode == 0, err
    meta = json.loads((tmp_path / "downloads" / "meta.json").read_text())
    levels = json.loads((tmp_path / "downloads" / "levels.json").read_text())
    assert levels["levels_mbps"] == [20.0] and meta["runs"][0]["subtask_type"] == "ppocr_cls"
    assert 0 < meta["runs"][0]["mean_mbps"] <= 20.0  # the link's tc rate bounds it
    assert meta["limits_counted"]["link_bytes_to_node"] >= meta["runs"][0]["bytes"]
    assert _leftovers(p.pid) == []


def test_worker_killed_by_the_memory_limit_exits_1_and_leaves_nothing(tmp_path):
    why = unavailable(runtime=True)
    if why:
        pytest.skip(f"testbed limits unavailable: {why}")
    cfg = tmp_path / "small.yaml"
    cfg.write_text(LIGHT.read_text().replace("memory: 900 ", "memory: 40 "))
    p, err = _run_gmmv(tmp_path, "collect", "subtasks", "--testbed", str(cfg), "--types", "ppocr_det",
                       "--batch-sizes", "1", "--repetitions", "1", "--quiet-threshold", "2",
                       "--out", str(tmp_path / "subtasks"), "-q")
    assert p.returncode == 1, err
    assert "memory limit of the testbed node (40 MB" in err
    assert _leftovers(p.pid) == []
    assert not (tmp_path / "subtasks" / "meta.json").exists()


def test_calibrate_cold_takes_the_types_in_rotation_with_the_heap_trimmed(monkeypatch):
    """`--cold`: after one untimed run each, every timed batch follows batches of the other
    types and a heap trim; warm repeats each type back to back and never trims."""
    from gmm_volunteer.fitting.collect import models
    from gmm_volunteer.testbed.calibrate import measure

    log = []
    monkeypatch.setattr(models, "model_path", lambda name: name)
    monkeypatch.setattr(models, "make_session", lambda path, threads: path)
    monkeypatch.setattr(models, "make_input", lambda name, g: b"x")
    monkeypatch.setattr(models, "run_batch", lambda name, session, blobs: log.append((name, len(blobs))))
    monkeypatch.setattr(models, "trim_heap", lambda: log.append("trim"))
    out = measure(["a", "b"], [1, 2], repetitions=2, cold=True)
    assert set(out) == {"a", "b"} and set(out["a"]) == {1, 2}
    assert log[:2] == [("a", 1), ("b", 1)]  # the untimed first runs
    timed = [("a", 1), ("b", 1), ("a", 2), ("b", 2)] * 2
    assert log[2:] == [x for t in timed for x in ("trim", t)]
    log.clear()
    measure(["a", "b"], [1, 2], repetitions=2)
    assert "trim" not in log and log == [("a", 1), ("a", 1), ("a", 1), ("a", 2), ("a", 2),
                                         ("b", 1), ("b", 1), ("b", 1), ("b", 2), ("b", 2)]


def test_calibrate_types_measures_only_those(monkeypatch, tmp_path):
    """`--types`: only the named types are measured; the others keep the bundle's work, and
    the provenance says which were measured."""
    import yaml

    from gmm_volunteer.io.bundlefiles import bundle_file
    from gmm_volunteer.testbed import calibrate as cal

    asked = []

    def fake(names, sizes, repetitions, seed=0, cold=False, mmap_kb=0):
        asked.append(list(names))
        return {name: {n: 0.5 * n for n in sizes} for name in names}

    monkeypatch.setattr(cal, "measure", fake)
    default = ROOT / "gmm_volunteer" / "bundles" / "default"
    out = cal.calibrate(default, tmp_path / "out", max_batch=2, repetitions=1, types=["ppocr_cls", "mobilenet_v2"])
    before = {s["name"]: s for s in yaml.safe_load(bundle_file(default).read_text())["subtask_types"]}
    after = {s["name"]: s for s in yaml.safe_load(bundle_file(out).read_text())["subtask_types"]}
    assert asked == [["ppocr_cls", "mobilenet_v2"]] or asked == [["mobilenet_v2", "ppocr_cls"]]
    assert after["ppocr_cls"]["work"]["mean_cpu_s"][0] == 0.5
    assert after["ppocr_det"]["work"] == before["ppocr_det"]["work"]
    assert "only " in yaml.safe_load(bundle_file(out).read_text())["provenance"]
