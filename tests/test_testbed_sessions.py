"""Which ONNX Runtime sessions a testbed volunteer keeps between batches (docs/testbed.md,
"Memory"): with `testbed.sessions: fit` idle sessions of other models are released only
when what the process holds plus the batch's memory estimate would exceed the node's
memory, a session in use never is, and the heap is trimmed after each batch; with
`kept` nothing is released. The runtime is replaced by a recorder, so this needs no
root and no model files."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("aiohttp", reason="the testbed extra (aiohttp) is not installed")

from gmm_volunteer.testbed import device as dev  # noqa: E402


def _device(tmp_path, monkeypatch, sessions: str, resident: list[float]):
    spec = {"entropy": 1, "users": 1, "laws": {k: [0, 1.0, 1.0] for k in ("online", "offline", "think_time", "patience")},
            "type_probabilities": [1.0], "volunteer_threads": 1, "user_max": [20, 20, 15, 900, 1000],
            "execution": "serial", "concurrency": 1, "sessions": sessions}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    d = dev.Device(tmp_path, 1, "http://127.0.0.1:1")
    log = SimpleNamespace(loaded=[], trims=0)

    def make_session(path, threads):
        log.loaded.append(path.stem)
        return path.stem

    def trim_heap():
        log.trims += 1

    d.models = SimpleNamespace(make_session=make_session, trim_heap=trim_heap,
                               run_batch=lambda name, session, blobs: [b"r"] * len(blobs))
    monkeypatch.setattr(dev, "resident_mb", lambda: resident[0])
    d.start_mb = 50.0
    return d, log


def test_fit_keeps_idle_sessions_while_the_batch_fits_and_releases_them_when_not(tmp_path, monkeypatch):
    resident = [150.0]
    d, log = _device(tmp_path, monkeypatch, "fit", resident)
    d.execute("a", 100.0, [b"x"])
    resident[0] = 400.0  # a's session and heap: 350 MB above the start
    d.execute("b", 550.0, [b"x"])  # 350 + 550 = 900: fits the node's 900 MB
    assert set(d.sessions) == {"a", "b"} and d.releases == 0
    d.execute("c", 551.0, [b"x"])  # 350 + 551 > 900: the idle a and b go first
    assert set(d.sessions) == {"c"} and d.releases == 2
    assert log.loaded == ["a", "b", "c"]
    assert log.trims == 3 + 1  # after each batch, and once on releasing
    d.execute("c", 900.0, [b"x"])  # its own session is never released, nor reloaded
    assert log.loaded == ["a", "b", "c"] and d.loads[0] == 3
    # each batch is listed with its type and size (docs/testbed.md, the store's `batches`)
    assert [r[:2] for r in d.batches] == [["a", 1], ["b", 1], ["c", 1], ["c", 1]]


def test_a_session_in_use_is_never_released(tmp_path, monkeypatch):
    d, log = _device(tmp_path, monkeypatch, "fit", [800.0])
    d.execute("a", 100.0, [b"x"])
    d.in_use["a"] = 1  # a batch of a runs on another thread (execution: shared)
    d.execute("b", 500.0, [b"x"])
    assert set(d.sessions) == {"a", "b"} and d.releases == 0


def test_kept_never_releases_nor_trims(tmp_path, monkeypatch):
    d, log = _device(tmp_path, monkeypatch, "kept", [5000.0])
    for name in ("a", "b", "c"):
        d.execute(name, 900.0, [b"x"])
    assert set(d.sessions) == {"a", "b", "c"} and d.releases == 0 and log.trims == 0


def test_the_section_knows_the_key():
    from pydantic import ValidationError

    from gmm_volunteer.run.config.testbed import Testbed

    assert Testbed().sessions == "fit"
    assert Testbed(sessions="kept").sessions == "kept"
    with pytest.raises(ValidationError):
        Testbed(sessions="all")
