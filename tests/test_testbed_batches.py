"""`python -m gmm_volunteer.testbed.batches`: a testbed store's batches beside the bundle's
work per batch size (docs/testbed.md). Pure table logic and its bad-input exits."""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.params import work_table
from gmm_volunteer.testbed.batches import main, rows, totals


def test_rows_group_by_node_kind_type_and_size_against_the_models_work():
    work = {"a": work_table([1, 4], [0.1, 0.4])}  # the model reads size 2 as 0.2
    batches = {"server": [["a", 1, 0.1, 0.1, 0.2], ["a", 1, 0.3, 0.15, 0.4]],
               "devices": [[["a", 2, 0.4, 0.4, 2.0]], [["b", 1, 0.01, 0.01, 0.1]]]}
    out = rows(batches, work)
    assert [r[:4] for r in out] == [["server", "a", "1", "2"], ["volunteers", "a", "2", "1"],
                                    ["volunteers", "b", "1", "1"]]
    server = out[0]
    assert server[4:8] == ["0.2000", "0.2000", "0.1000", "2.00"]  # mean, median, bundle, ratio
    assert server[8] == "0.62" and server[9] == "0.300"  # thread / counted CPU, mean wall
    assert out[1][6:8] == ["0.2000", "2.00"]  # interpolated as the simulator does
    assert out[2][6:8] == ["-", "-"]  # a type the bundle does not have
    assert out[2][4:6] == ["0.0100", "0.0100"]
    t = totals(batches, work)
    assert t["server"] == (2, 0.4, 0.2) and t["volunteers"][0] == 1  # b is not in the bundle
    assert np.isclose(t["volunteers"][1], 0.4) and np.isclose(t["volunteers"][2], 0.2)


def test_a_missing_store_exits_2_naming_it(tmp_path, capsys):
    assert main([str(tmp_path / "none.zarr")]) == 2
    assert "none.zarr" in capsys.readouterr().err


def test_cpu_ids_read_the_first_processors_numbers(tmp_path):
    from gmm_volunteer.fitting.collect.procstat import cpu_ids

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nstepping\t: 1\n\n"
                    "processor\t: 1\ncpu family\t: 25\n")
    assert cpu_ids(str(info)) == {"family": "26", "model": "2", "stepping": "1"}
    assert cpu_ids(str(tmp_path / "none")) == {}
