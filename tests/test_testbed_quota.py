"""`python -m gmm_volunteer.testbed.quota` (docs/model.md D29, "as a function of the CPU
share"): the arithmetic of its tables, what it measures where, and bad input refused with
exit 2 before anything is measured. The measurement itself (inside a device's cgroup) is
replaced here; it needs root and is what `calibrate --testbed` runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "gmm_volunteer" / "bundles" / "default"
CASES = ROOT / "configs" / "testbed"


def test_cost_ratios_sum_over_the_sizes_measured_in_both():
    from gmm_volunteer.testbed.quota import cost_ratios, factor_tables

    ref = {"a": {1: 1.0, 2: 3.0}, "b": {1: 2.0}}
    at = {"a": {1: 1.5, 2: 4.5}, "b": {1: 2.0, 2: 9.0}, "c": {1: 1.0}}
    assert cost_ratios(ref, at) == {"a": 1.5, "b": 1.0}  # c: not measured at the reference
    tables = factor_tables({"a": 2.0, "b": 1.2, "d": 1.1}, 15.0, {5.0: {"a": 1.5, "b": 1.0}})
    assert tables == {"a": {15.0: 2.0, 5.0: 3.0}, "b": {15.0: 1.2, 5.0: 1.2}}  # d: no other share measured it


def _factored_bundle(tmp_path) -> Path:
    """The default bundle with a volunteer factor per type, as `batches --fit-volunteer`
    writes one."""
    from gmm_volunteer.io.bundlefiles import bundle_file, write_bundle

    data = yaml.safe_load(bundle_file(DEFAULT).read_text())
    for i, s in enumerate(data["subtask_types"]):
        s["work"]["volunteer_factor"] = 1.2 + 0.1 * i
    return write_bundle(data, tmp_path / "factored")


def test_quota_measures_each_configs_own_types_and_scales_the_factors(monkeypatch, tmp_path):
    """The reference (light-uniform, 15 %) measures every type its requests use, the 5 %
    population-uniform only its light catalogue; the written bundle's factor of a type is
    g at 15 % and g x its cost ratio at 5 %, and the simulator reads each at its users'
    CPU; a type only the reference measured keeps its number."""
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.testbed import calibrate as cal
    from gmm_volunteer.testbed.quota import main

    asked = []
    slower_at_5 = {"ppocr_cls": 1.25, "mobilenet_v2": 1.5, "ppocr_rec": 2.0}

    def fake(limits, names, sizes, repetitions, cold=False):
        asked.append((limits.cpu_pct, sorted(names), list(sizes), repetitions, cold))
        slow = slower_at_5 if limits.cpu_pct == 5.0 else {}
        return {n: {b: 0.1 * b * slow.get(n, 1.0) for b in sizes} for n in names}, {}

    monkeypatch.setattr(cal, "_measure_limited", fake)
    bundle = _factored_bundle(tmp_path)
    out = tmp_path / "quota"
    assert main([str(bundle), str(out), "--reference", str(CASES / "light-uniform.yaml"),
                 "--at", str(CASES / "population-uniform.yaml"), "--repetitions", "2"]) == 0
    everything = sorted(s.name for s in load_bundle(DEFAULT).subtask_types)
    assert asked == [(15.0, everything, [1, 2], 2, True),
                     (5.0, ["mobilenet_v2", "ppocr_cls", "ppocr_rec"], [1, 2], 2, True)]
    before = {s.name: s.work.volunteer_factor for s in load_bundle(bundle).subtask_types}
    after = {s.name: s.work for s in load_bundle(out).subtask_types}
    for name, ratio in slower_at_5.items():
        assert after[name].volunteer_factor == {15.0: round(before[name], 4), 5.0: round(before[name] * ratio, 4)}
        assert after[name].volunteer_factor_at(5.0) == pytest.approx(before[name] * ratio, abs=1e-4)
        assert after[name].volunteer_factor_at(15.0) == pytest.approx(before[name], abs=1e-4)
    for name in ("ppocr_det", "resnet50"):
        assert after[name].volunteer_factor == before[name]


@pytest.mark.parametrize("argv, names", [
    (["--reference", "light-uniform.yaml", "--at", "churn-uniform.yaml"], "its users' CPU maximum (15 %)"),
    (["--reference", "light-uniform.yaml", "--at", "no-such.yaml"], "no-such.yaml"),
    (["--reference", "light-uniform.yaml", "--at", "population-uniform.yaml", "--max-batch", "0"], "--max-batch"),
])
def test_quota_bad_input_exits_2_before_measuring(monkeypatch, capsys, tmp_path, argv, names):
    from gmm_volunteer.testbed import calibrate as cal
    from gmm_volunteer.testbed.quota import main

    def never(*a, **k):
        raise AssertionError("measured despite bad input")

    monkeypatch.setattr(cal, "_measure_limited", never)
    argv = [str(CASES / a) if a.endswith(".yaml") else a for a in argv]
    assert main([str(DEFAULT), str(tmp_path / "out"), *argv]) == 2
    assert names in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_quota_refuses_a_bundle_or_destination_it_cannot_use(monkeypatch, capsys, tmp_path):
    """A missing bundle, and an existing folder that is not a bundle as the destination:
    exit 2 naming it, the folder and what is in it left as they were."""
    from gmm_volunteer.testbed import calibrate as cal
    from gmm_volunteer.testbed.quota import main

    monkeypatch.setattr(cal, "_measure_limited", lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured")))
    cases = ["--reference", str(CASES / "light-uniform.yaml"), "--at", str(CASES / "population-uniform.yaml")]
    assert main([str(tmp_path / "nothing"), str(tmp_path / "out"), *cases]) == 2
    assert "nothing" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main([str(DEFAULT), str(mine), *cases]) == 2
    assert "refusing" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
