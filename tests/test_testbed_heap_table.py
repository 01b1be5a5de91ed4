"""`testbed.heap`: its table sets each batch's peaks under the two settings beside what
`sessions: fit` assumes (the bundle's estimate plus the sessions held), and its bad
arguments exit 2 before anything runs. The measurement itself needs the ONNX models and
minutes; docs/results/testbed-heap.md is its committed output."""

from __future__ import annotations

from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
from gmm_volunteer.model.params import memory_table
from gmm_volunteer.testbed import heap


def test_the_table_spans_the_processes_and_adds_the_held_sessions():
    bundle = load_bundle(packaged_bundle("default"))
    det = next(s for s in bundle.subtask_types if s.name == "ppocr_det")
    est5 = float(memory_table(det.memory.batch_sizes, det.memory.execution_mb)[5])
    runs = {0: [{"held": 190.0, "rows": [["ppocr_det", 5, 700.0, 1.0], ["ppocr_det", 5, 900.0, 1.2]]},
                {"held": 189.0, "rows": [["ppocr_det", 5, 800.0, 1.1]]}],
            4096: [{"held": 190.0, "rows": [["ppocr_det", 5, 600.0, 1.1], ["ppocr_det", 5, 620.0, 1.3]]}]}
    lines = heap.table(bundle, runs, 4096).splitlines()
    assert "fixed at 4,096 KB" in lines[0]
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["ppocr_det", "5", f"{190.0 + est5:,.0f}", "700-900", "600-620", "1.1000", "1.2000", "1.09"]


def test_bad_arguments_exit_2_before_anything_runs(tmp_path, capsys):
    assert heap.main(["--bundle", str(tmp_path / "nowhere")]) == 2
    assert "--bundle" in capsys.readouterr().err
    assert heap.main(["--repetitions", "0"]) == 2
    assert "--repetitions 0" in capsys.readouterr().err
    (tmp_path / "notes.md").write_text("mine\n")
    assert heap.main(["-o", str(tmp_path / "notes.md")]) == 2
    assert "not a result file" in capsys.readouterr().err
    assert (tmp_path / "notes.md").read_text() == "mine\n"
