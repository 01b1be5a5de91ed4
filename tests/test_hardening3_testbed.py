"""The testbed checks before it starts, and undoes what it started (issue "Hardening
III"; docs/testbed.md). Bad input is exit 2 before any cgroup, namespace, link, process
or workdir exists, whether or not this machine could host a testbed; every resource is
registered for clean-up before it is created, so one that fails half-way is undone.
Nothing here needs root: the testbed is never started (`run_testbed` and `Resources`
fail the test if reached), and the clean-up is checked on a stand-in cgroup tree in a
temporary folder and on recorded `ip` commands."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gmm_volunteer.cli.commands import main
from gmm_volunteer.testbed import isolation

EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "testbed" / "light-uniform.yaml"


class Started(Exception):
    """Raised where the testbed would start: the checks let the config through."""


@pytest.fixture
def no_start(monkeypatch):
    def started(*args, **kwargs):
        raise Started()

    monkeypatch.setattr("gmm_volunteer.testbed.run.run_testbed", started)
    monkeypatch.setattr(isolation.Resources, "__init__", started)
    monkeypatch.setattr(isolation.Cgroup, "create", started)
    monkeypatch.setattr(isolation.Link, "create", started)


def _config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update(steps=20, seed=3)
    cfg["users"]["count"] = 3
    path = tmp_path / "tb.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("override, needle", [
    ("requests.type_probabilities=[1.0]", "requests.type_probabilities: has 1 entries"),
    ("base_profile.cpu=1e-300", "cpu 1e-300 %"),
    ("server.max_allocation.cpu=1e15", "cpu 1e+15 %"),
    ("server.max_allocation.memory=1e15", "memory 1e+15 MB"),
    ("base_profile.band_in=1e-6", "band_in 1e-06 Mbit/s"),
    ("testbed.workdir=/proc/x", "testbed.workdir /proc/x: cannot write in /proc"),
    ("scheduler=gmmv_no_such_module:P", "gmmv_no_such_module"),
])
def test_bad_input_is_refused_before_the_testbed_starts(tmp_path, capsys, no_start, override, needle):
    """0.7.0 started cgroups, namespaces, links and processes for the first two and the
    last (and never finished), and ended in a traceback for the rest."""
    out = tmp_path / "x.zarr"
    code = main(["testbed", str(_config(tmp_path)), "--set", override, "-o", str(out), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tb.yaml"]


def test_a_good_config_gets_past_the_checks(tmp_path, capsys, no_start):
    assert main(["testbed", str(_config(tmp_path)), "-o", str(tmp_path / "x.zarr"), "-q"]) == 1
    assert "unexpected failure: Started" in capsys.readouterr().err


@pytest.fixture
def cgroup_tree(tmp_path, monkeypatch):
    """A stand-in cgroup v2 root: a folder with the controller files a real one has."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "cgroup.subtree_control").write_text("cpu memory\n")
    monkeypatch.setattr(isolation, "CGROUP_ROOT", root)
    return root


def test_a_cgroup_that_fails_half_way_is_removed(cgroup_tree, monkeypatch):
    """0.7.0 registered a cgroup for removal only after its constructor succeeded: a
    kernel refusing its CPU quota left the ``gmmvtb<pid>s`` cgroup behind."""
    write = Path.write_text

    def refuse_quota(self, text, *args, **kwargs):
        if self.name == "cpu.max":
            raise OSError(22, "Invalid argument")
        return write(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse_quota)
    res = isolation.Resources("gmmvtbtest")
    with pytest.raises(OSError):
        res.cgroup("v2", "s", 1e15, 10**9)
    assert (cgroup_tree / "gmmvtbtests").is_dir()  # made before the write failed
    res.close()
    assert sorted(p.name for p in cgroup_tree.iterdir()) == ["cgroup.controllers", "cgroup.subtree_control"]


def test_a_cgroup_removes_only_what_it_made(cgroup_tree):
    theirs = cgroup_tree / "gmmvtbtests"
    theirs.mkdir()  # the name exists already: mkdir fails, and it is not ours to remove
    res = isolation.Resources("gmmvtbtest")
    with pytest.raises(FileExistsError):
        res.cgroup("v2", "s", 100, 10**9)
    res.close()
    assert theirs.is_dir()


def test_a_link_that_fails_half_way_is_removed(monkeypatch):
    made, undone = [], []

    def sh(*cmd):
        made.append(cmd)
        if cmd[:3] == ("ip", "addr", "add"):
            raise isolation.IsolationError("address refused")

    monkeypatch.setattr(isolation, "_sh", sh)
    monkeypatch.setattr(isolation.subprocess, "run", lambda cmd, **kw: undone.append(tuple(cmd))
                        or subprocess.CompletedProcess(cmd, 0))
    res = isolation.Resources("gmmvtb77")
    with pytest.raises(isolation.IsolationError):
        res.link(1, "10.231", 10.0, 10.0, 0.0)
    res.close()
    assert ("ip", "netns", "add", "gmmvtb77n1") in made
    assert ("ip", "link", "del", "gt77h1") in undone and ("ip", "netns", "del", "gmmvtb77n1") in undone
