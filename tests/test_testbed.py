"""The live testbed (docs/testbed.md): its config section, and a short real run whose
records must be complete and consistent and whose processes must stay inside their
kernel limits. The live run needs root, cgroups, network namespaces, iproute2 and the
`testbed` extra; without them it is skipped, saying which is missing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.run.config import ConfigError, load_config
from testbed_support import unavailable

EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "testbed" / "light-uniform.yaml"


def _small(tmp_path: Path, **changes) -> Path:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update(steps=40, seed=3)
    cfg["users"]["count"] = 3
    cfg["requests"]["think_time"] = {"dist": "pareto", "scale": 3.0, "shape": 1.5}
    cfg.update(changes)
    path = tmp_path / "tb.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_run_reads_a_testbed_config_without_its_section():
    cfg = load_config(EXAMPLE)
    assert "testbed" not in yaml.safe_load(cfg.to_yaml())


def test_a_bad_testbed_key_is_named(tmp_path, capsys):
    path = _small(tmp_path, testbed={"link_delay_ms": 0, "bogus": 1})
    with pytest.raises(ConfigError, match=r"testbed\.bogus"):
        load_config(path)
    assert main(["testbed", str(path), "-o", str(tmp_path / "x.zarr")]) == 2
    assert "testbed.bogus" in capsys.readouterr().err


@pytest.mark.parametrize("override, key", [
    ("scheduler=affinity", "scheduler"),
    ("users.allocation=fitted", "users.allocation"),
    ("users.initial_data=filled", "users.initial_data"),
    ("testbed.subnet=8.8", "testbed.subnet"),
    ("server.rtt=0.05", "server.rtt"),
])
def test_what_the_live_system_cannot_run_exits_2(tmp_path, capsys, override, key):
    path = _small(tmp_path)
    assert main(["testbed", str(path), "--set", override, "-o", str(tmp_path / "x.zarr")]) == 2
    assert f"{key}:" in capsys.readouterr().err


def test_a_short_live_run_accounts_for_everything_within_its_limits(tmp_path, capsys):
    why = unavailable()
    if why:
        pytest.skip(f"live testbed unavailable: {why}")
    from gmm_volunteer.experiments.summary import summarize
    from gmm_volunteer.io.results import open_result

    out = tmp_path / "tb.zarr"
    assert main(["testbed", str(_small(tmp_path)), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    ds = open_result(out)
    acc = json.loads(ds.attrs["testbed"])
    # every request a user issued is in the records or still active at the end
    assert acc["requests_unaccounted"] == []
    assert acc["requests_issued_by_users"] == acc["requests_received"] > 0
    assert acc["requests_received"] == acc["requests_ended"] + acc["requests_active_at_end"]
    assert int(ds.request_count.sum()) == acc["requests_ended"]
    assert (ds.request_outcome == 0).sum() > 0
    # no subtask's result is taken twice; without churn none arrives for a stale placement
    assert acc["results_accepted_twice"] == 0 and acc["results_rejected"] == 0
    events = ds.subtask_events.sum("time")
    assert (events.sel(event="complete") <= events.sel(event="start")).all()
    assert int(events.sel(event="complete").sum()) == acc["results_accepted"]
    # every batch is listed: the server's rows hold the server's completed work (rounded to
    # 1e-5 s per row; the store keeps float32), and they hold at least its completions
    rows = acc["batches"]["server"]
    assert len(acc["batches"]["devices"]) == acc["devices_reporting"]
    work = float(ds.completed_work.astype("float64").sum("time").values[0])
    assert abs(sum(r[2] for r in rows) - work) <= 1e-5 * len(rows) + 1e-5 * work
    assert sum(r[1] for r in rows) >= int(events.sel(event="complete").values[0])
    assert all(r[3] >= 0 and r[4] > 0 for part in [rows, *acc["batches"]["devices"]] for r in part)
    # a node's batches start in order on the machine's clock, each after the last ended
    # (the server's run one at a time under fifo; rounding to 1e-4 s)
    for part in [rows, *acc["batches"]["devices"]]:
        assert all(b[5] >= a[5] + a[4] - 2e-4 for a, b in zip(part, part[1:]))
    # limits: no process killed, memory never above its limit, CPU never above its quota
    assert acc["limits"]["oom_kills"] == [0] * 4
    assert (ds.node_memory_peak <= ds.node_memory_limit).all()
    # CPU, % per 1 s window as sampled: a window may hold one CFS period (0.1 s) more than
    # 1 s, so up to 1.1x the quota, plus the sampler's jitter; over 5 s windows, 1.02x
    cpu, limit = ds.node_cpu.values, ds.node_cpu_limit.values
    assert (cpu <= 1.2 * limit + 1.0).all(), cpu.max(axis=0)
    five = cpu[: cpu.shape[0] // 5 * 5].reshape(-1, 5, cpu.shape[1]).mean(axis=1)
    assert (five <= 1.05 * limit + 0.5).all(), five.max(axis=0)
    # nothing the run made is left behind
    prefix = f"gmmvtb{os.getpid()}"
    assert prefix not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"gt{os.getpid()}" not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert not any(p.name.startswith(prefix) for p in Path("/sys/fs/cgroup/cpu").glob("*"))
    assert "light5" in summarize(ds)



def test_a_device_killed_mid_run_goes_offline_and_the_run_goes_on(tmp_path, capsys):
    """A device process that dies (here SIGKILL, as the kernel's OOM killer sends) is
    taken offline for the rest of the run, as a departure: its request is dropped, its
    subtasks go back to the queue, and the run ends normally with the others."""
    why = unavailable()
    if why:
        pytest.skip(f"live testbed unavailable: {why}")
    import signal
    import threading
    import time

    from gmm_volunteer.io.results import open_result

    wd = tmp_path / "wd"
    cfg = _small(tmp_path, steps=30, testbed={"workdir": str(wd)})
    killed: list[int] = []

    def kill_device_2():
        deadline = time.time() + 120
        while not (wd / "start.json").exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(10)  # into the run
        for proc in Path("/proc").iterdir():
            try:
                argv = (proc / "cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
            if "gmm_volunteer.testbed.device" in argv and str(wd) in argv and argv[argv.index(str(wd)) + 1] == "2":
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))

    killer = threading.Thread(target=kill_device_2)
    killer.start()
    out = tmp_path / "tb.zarr"
    code = main(["testbed", str(cfg), "-o", str(out), "-q"])
    killer.join()
    assert code == 0, capsys.readouterr().err
    assert killed
    acc = json.loads(open_result(out).attrs["testbed"])
    [(v, step, rc, _)] = acc["devices_lost"]
    assert v == 2 and rc == -signal.SIGKILL and 5 <= step < 30
    ds = open_result(out)
    assert int(ds.online_users.values[step + 2:].max()) <= 2  # offline from then on
    assert acc["requests_received"] == acc["requests_ended"] + acc["requests_active_at_end"]
    assert acc["results_accepted_twice"] == 0

# ---- the live rules (testbed/placement.py) against what the simulator's rules do ----------


def _live(scheduler: str, users: int = 3, seed: int = 0, user_memory: float = 900.0):
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.testbed.placement import LiveScheduler

    cfg = load_config(EXAMPLE)
    server = np.array([200.0, 200.0, 100.0, 2500.0, 3000.0])
    user = np.array([20.0, 20.0, 15.0, user_memory, 1000.0])
    return LiveScheduler(scheduler, load_bundle(cfg.model), server, user, users, np.random.default_rng(seed))


def _request(sc, rid: int, user: int, k: int, start: int):
    from gmm_volunteer.testbed.placement import Request, Slot

    sc.requests[rid] = Request(rid, user, k, start, [Slot(rid, p, j) for p, j in enumerate(sc.task_sub[k])])
    return sc.requests[rid]


def test_centralized_places_on_the_server_oldest_first_while_its_memory_estimate_fits():
    sc = _live("centralized")
    for u in range(1, 4):
        sc.nodes[u].online = True
    assert sc.downloads() == []  # centralized starts no subtask-data download
    old = _request(sc, 0, 2, 3, start=0)
    new = _request(sc, 1, 1, 3, start=1)
    sc.nodes[0].alloc[3] = sc.mem(sc.task_sub[3][0], 5) + sc.mem(sc.task_sub[3][1], 5) + 1.0
    batches = sc.place(t=1)
    assert {b.node for b in batches} == {0}
    assert all(s.node == 0 for s in old.slots)  # the oldest request is served first
    assert all(s.node < 0 for s in new.slots)  # then the memory estimate is full
    assert sc.free_memory(0) >= 0
    # same-type subtasks placed on a node in one step form one batch (paper 2.2)
    assert sorted(len(b.members) for b in batches) == [5, 5]


def test_uniform_places_only_on_online_holders_of_the_data_or_the_server():
    sc = _live("uniform", users=3, seed=1)
    j = sc.task_sub[0][0]
    sc.nodes[1].online, sc.nodes[1].ready = True, {j}
    sc.nodes[2].online, sc.nodes[2].ready = False, {j}  # offline: not a candidate
    sc.nodes[3].online = True  # online without the data: not a candidate
    seen = set()
    for rid in range(40):
        r = _request(sc, rid, 1 + rid % 3, 0, start=rid)
        sc.place(t=rid)
        seen |= {s.node for s in r.slots if s.j == j}
        sc.cancel(r)
    assert seen == {0, 1}
    assert sc.nodes[1].committed == pytest.approx(0.0) and sc.nodes[0].committed == pytest.approx(0.0)


def test_uniform_downloads_one_missing_model_that_fits_and_resumes_a_paused_one():
    sc = _live("uniform", users=2, seed=2)
    sc.nodes[1].online = True
    sc.nodes[1].alloc[4] = 50.0  # storage for the small models only
    started = sc.downloads()
    assert len(started) == 1 and started[0][0] == 1
    j = started[0][1]
    assert sc.data_mb[j] <= 50.0 and j in sc.requested
    assert sc.downloads() == []  # one download at a time per node
    sc.reset_node(1)  # offline mid-download: it pauses
    assert j in sc.nodes[1].paused and sc.nodes[1].committed == pytest.approx(0.0)
    sc.nodes[1].online = True
    assert sc.downloads() == [(1, j)]  # and resumes first
    sc.end_download(1, j, ok=True)
    assert j in sc.nodes[1].ready


def test_a_node_going_offline_returns_its_unfinished_subtasks_to_the_queue():
    sc = _live("uniform", users=1, seed=3)
    sc.nodes[1].online = True
    sc.nodes[1].ready = set(range(len(sc.names)))
    sc.nodes[0].alloc[3] = 0.0  # the server has no room: everything goes to the volunteer
    r = _request(sc, 0, 1, 1, start=0)
    sc.place(t=0)
    assert all(s.node == 1 for s in r.slots)
    r.slots[0].done = True
    sc.release(r.slots[0])
    reset = sc.reset_node(1)
    assert len(reset) == len(r.slots) - 1 and all(s.node == -1 for s in reset)
    assert r.slots[0].done and sc.nodes[1].committed == pytest.approx(0.0)


def test_help_and_a_machine_that_cannot_host_it(tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit) as info:
        main(["testbed", "--help"])
    assert info.value.code == 0 and "cgroup" in capsys.readouterr().out
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # not root: nothing is made, exit 1
    assert main(["testbed", str(_small(tmp_path)), "-o", str(tmp_path / "x.zarr")]) == 1
    assert "needs root" in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()


@pytest.mark.parametrize("sets, expected", [
    ([], ("serial", 1)),  # the discipline not stated: testbed.execution, serial by default
    (["testbed.execution=shared"], ("shared", 0)),
    (["execution.discipline=fifo"], ("serial", 1)),
    (["execution.discipline=fifo", "execution.concurrency=3"], ("serial", 3)),
    (["execution.discipline=shared"], ("shared", 0)),
    (["execution.discipline=fifo", "testbed.execution=serial"], ("serial", 1)),
])
def test_the_testbed_runs_the_discipline_the_simulator_models(tmp_path, sets, expected):
    from gmm_volunteer.testbed.config import load_testbed, node_execution
    from gmm_volunteer.testbed.device import MAX_SHARED, node_slots
    from gmm_volunteer.testbed.run import _spec

    cfg, tb = load_testbed(_small(tmp_path, execution={}), sets)  # the discipline not stated unless set
    assert node_execution(cfg, tb) == expected
    spec = _spec(cfg, tb, 0, np.full(5, 200.0), np.full(5, 100.0))
    assert (spec["execution"], spec["concurrency"]) == expected
    assert node_slots(spec) == (MAX_SHARED if expected[0] == "shared" else expected[1])


@pytest.mark.parametrize("sets", [["execution.discipline=fifo", "testbed.execution=shared"],
                                  ["execution.discipline=shared", "testbed.execution=serial"]])
def test_a_testbed_execution_contradicting_the_discipline_exits_2(tmp_path, capsys, sets):
    args = ["testbed", str(_small(tmp_path)), "-o", str(tmp_path / "x.zarr")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "testbed.execution:" in err and "contradicts execution.discipline" in err, err
    assert not (tmp_path / "x.zarr").exists()


def test_the_live_system_refuses_several_servers(tmp_path, capsys):
    """The testbed runs one dedicated server (docs/model.md D35): a config of two is exit 2
    naming `servers`, before anything is created."""
    server = yaml.safe_load(EXAMPLE.read_text())["server"]
    path = _small(tmp_path, servers=[{**server, "name": "a"}, {**server, "name": "b"}])
    text = yaml.safe_load(path.read_text())
    del text["server"]  # the example's one server, now listed twice
    path.write_text(yaml.safe_dump(text))
    assert main(["testbed", str(path), "-o", str(tmp_path / "x.zarr")]) == 2
    assert "servers: the testbed runs one dedicated server" in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()
