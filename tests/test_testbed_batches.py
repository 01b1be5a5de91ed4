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


def test_cpu_label_names_the_numbers_where_known():
    from gmm_volunteer.fitting.collect.procstat import cpu_label

    assert cpu_label("AMD EPYC", {"family": "23", "model": "49", "stepping": "0"}) == "AMD EPYC (family 23, model 49)"
    assert cpu_label("AMD EPYC", {}) == "AMD EPYC"
    assert cpu_label("Intel Xeon", None) == "Intel Xeon"


def test_volunteer_factors_are_ratio_estimates_with_their_delta_method_interval():
    from gmm_volunteer.testbed.batches import volunteer_factors

    work = {"a": work_table([1, 4], [0.1, 0.4]), "b": work_table([1], [0.05])}
    # a: y = 0.3, 0.5, 0.4 against x = 0.1, 0.2, 0.2 (sizes 1, 2, 2); b once; c not in the bundle
    listed = [["a", 1, 0.3, 0.3, 1.0], ["a", 2, 0.5, 0.5, 1.0], ["a", 2, 0.4, 0.4, 1.0],
              ["b", 1, 0.2, 0.2, 1.0], ["c", 1, 9.0, 9.0, 1.0]]
    f = volunteer_factors(listed, work)
    assert set(f) == {"a", "b"}
    y, x = np.array([0.3, 0.5, 0.4]), np.array([0.1, 0.2, 0.2])
    r = y.sum() / x.sum()
    half = 1.96 * np.sqrt(((y - r * x) ** 2).sum() / 6) / x.mean()
    assert f["a"][0] == 3 and np.isclose(f["a"][1], 2.4) and np.isclose(f["a"][2], half)
    assert f["b"][0] == 1 and np.isclose(f["b"][1], 4.0) and np.isnan(f["b"][2])  # no spread from one batch


def test_fit_volunteer_writes_the_factors_and_keeps_an_unexecuted_types(tmp_path):
    from gmm_volunteer.io.bundlefiles import load_bundle, write_bundle
    from gmm_volunteer.testbed.batches import fit_volunteer
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    data = synthetic_bundle()
    write_bundle(data, tmp_path / "b")
    first, second = (s["name"] for s in data["subtask_types"][:2])
    w1 = data["subtask_types"][0]["work"]
    base = work_table(w1["batch_sizes"], w1["mean_cpu_s"])[1]
    # two stores; the server's batches do not count
    stores = [{"server": [[first, 1, 99.0, 99.0, 1.0]], "devices": [[[first, 1, 2 * base, 0.0, 1.0]]]},
              {"server": [], "devices": [[], [[first, 1, 3 * base, 0.0, 1.0]]]}]
    path, factors, missing = fit_volunteer(stores, tmp_path / "b", tmp_path / "out")
    assert np.isclose(factors[first][1], 2.5) and factors[first][0] == 2
    assert second in missing and first not in missing
    fitted = {s.name: s.work.volunteer_factor for s in load_bundle(path).subtask_types}
    assert fitted[first] == 2.5 and fitted[second] == 1.0
    assert "Volunteer factors" in load_bundle(path).provenance


def test_fit_volunteer_without_a_bundle_exits_2(tmp_path, capsys):
    assert main([str(tmp_path / "none.zarr"), "--fit-volunteer", str(tmp_path / "out")]) == 2
    assert "--model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_by_idle_bins_each_batch_by_its_nodes_idle_time_before_it():
    from gmm_volunteer.testbed.batches import IDLE_EDGES, by_idle

    work = {"a": work_table([1], [0.1])}
    # one volunteer: starts 0 (first: left out), 1.05 after a batch ending at 1.0 (idle
    # 0.05), 5.0 after one ending at 1.25 (idle 3.75); the server: idle 20 s; "b" not in the bundle
    dev = [["a", 1, 0.1, 0.1, 1.0, 0.0], ["a", 1, 0.3, 0.3, 0.2, 1.05], ["a", 2, 0.8, 0.8, 1.0, 5.0],
           ["b", 1, 0.1, 0.1, 0.1, 7.0]]
    server = [["a", 1, 0.1, 0.1, 0.5, 0.0], ["a", 1, 0.15, 0.1, 0.5, 20.5]]
    out = by_idle([("case", {"server": server, "devices": [dev]})], work)
    assert len(IDLE_EDGES) == 4
    assert out == [["server", "case", "a", "-", "-", "-", "-", "1.50 (1)"],
                   ["volunteers", "case", "a", "3.00 (1)", "-", "-", "4.00 (1)", "-"]]


def test_by_idle_without_a_bundle_exits_2(tmp_path, capsys):
    assert main([str(tmp_path / "none.zarr"), "--by-idle"]) == 2
    assert "--model" in capsys.readouterr().err


def test_a_volunteers_batches_are_set_beside_the_table_times_its_factor():
    """As the simulator reads a bundle with volunteer factors (D29): the server's batches
    against the table, a volunteer's against the table times its type's factor."""
    from gmm_volunteer.testbed.batches import by_idle

    work = {"a": work_table([1], [0.1])}
    batches = {"server": [["a", 1, 0.2, 0.2, 1.0, 0.0], ["a", 1, 0.2, 0.2, 1.0, 1.0]],
               "devices": [[["a", 1, 0.2, 0.2, 1.0, 0.0], ["a", 1, 0.2, 0.2, 1.0, 1.0]]]}
    out = rows(batches, work, {"a": 2.0})
    assert [r[6:8] for r in out] == [["0.1000", "2.00"], ["0.2000", "1.00"]]
    t = totals(batches, work, {"a": 2.0})
    assert np.isclose(t["server"][2], 0.2) and np.isclose(t["volunteers"][2], 0.4)
    assert [r[3] for r in by_idle([("c", batches)], work, {"a": 2.0})] == ["2.00 (1)", "1.00 (1)"]


def test_a_factor_table_is_read_at_the_stores_users_cpu(tmp_path):
    """A bundle whose factor is a table per CPU share (D29) is set beside a store's
    batches at that store's users' CPU maximum (base_profile.cpu x users.capacity)."""
    import yaml

    from gmm_volunteer.io.bundlefiles import bundle_file, write_bundle
    from gmm_volunteer.testbed.batches import bundle_factors, users_cpu
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    data = synthetic_bundle()
    data["subtask_types"][0]["work"]["volunteer_factor"] = {5.0: 2.0, 15.0: 1.5}
    path = write_bundle(data, tmp_path / "b")
    name = yaml.safe_load(bundle_file(path).read_text())["subtask_types"][0]["name"]
    attrs = {"config": yaml.safe_dump({"base_profile": {"cpu": 5.0}, "users": {"capacity": 3.0}})}
    assert users_cpu(attrs) == 15.0
    assert bundle_factors(path, users_cpu(attrs))[name] == 1.5
    assert bundle_factors(path, 5.0)[name] == 2.0


def test_fit_server_scales_the_table_and_keeps_the_volunteers_work(tmp_path):
    """`--fit-server`: the table times the ratio of the server's batches (the volunteers'
    do not count), every size; each volunteer factor, a number or a table per share,
    divided by it, so that a volunteer's work is unchanged; a type the server did not run
    keeps its work."""
    from gmm_volunteer.io.bundlefiles import load_bundle, write_bundle
    from gmm_volunteer.testbed.batches import fit_server
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    data = synthetic_bundle()
    first, second = (s["name"] for s in data["subtask_types"][:2])
    data["subtask_types"][0]["work"]["volunteer_factor"] = {5.0: 2.0, 15.0: 1.6}
    data["subtask_types"][1]["work"]["volunteer_factor"] = 1.5
    write_bundle(data, tmp_path / "b")
    w1 = data["subtask_types"][0]["work"]
    base = work_table(w1["batch_sizes"], w1["mean_cpu_s"])[1]
    stores = [{"server": [[first, 1, 0.7 * base, 0.0, 1.0]], "devices": [[[first, 1, 99.0, 0.0, 1.0]]]},
              {"server": [[first, 1, 0.9 * base, 0.0, 1.0]], "devices": []}]
    path, ratios, missing = fit_server(stores, tmp_path / "b", tmp_path / "out")
    assert np.isclose(ratios[first][1], 0.8) and ratios[first][0] == 2 and missing == [second]
    after = {s.name: s.work for s in load_bundle(path).subtask_types}
    assert np.allclose(after[first].mean_cpu_s, [round(0.8 * x, 6) for x in w1["mean_cpu_s"]])
    assert after[first].volunteer_factor == {5.0: 2.5, 15.0: 2.0}
    assert after[second].volunteer_factor == 1.5
    assert after[second].mean_cpu_s == data["subtask_types"][1]["work"]["mean_cpu_s"]


def test_fit_server_and_fit_volunteer_at_once_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "none.zarr"), "--model", str(tmp_path / "b"), "--fit-server", str(tmp_path / "o1"),
                 "--fit-volunteer", str(tmp_path / "o2")]) == 2
    assert "one after the other" in capsys.readouterr().err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_at_reference_speed_divides_each_batchs_cpu_by_its_stores_speed(tmp_path):
    """`--speed-reference` (docs/model.md D30): a batch that cost 0.8 CPU-s at speed 0.8
    would have cost 1.0 at the reference's; wall times stay as measured. A fit over a
    store at speed 0.5 and one at 1 reads both at the reference's."""
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.testbed.batches import at_reference_speed, fit_server
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    b = {"server": [["a", 1, 0.8, 0.4, 2.0]], "devices": [[["a", 2, 0.08, 0.08, 3.0]]]}
    got = at_reference_speed(b, 0.8)
    assert np.allclose(got["server"][0][2:], [1.0, 0.5, 2.0])
    assert np.allclose(got["devices"][0][0][2:], [0.1, 0.1, 3.0])
    data = synthetic_bundle()
    first = data["subtask_types"][0]["name"]
    write_bundle(data, tmp_path / "b")
    w = data["subtask_types"][0]["work"]
    base = work_table(w["batch_sizes"], w["mean_cpu_s"])[1]
    slow = {"server": [[first, 1, 0.5 * base, 0.0, 1.0]], "devices": []}  # at speed 0.5: as the table
    _, ratios, _ = fit_server([at_reference_speed(slow, 0.5), {"server": [[first, 1, base, 0.0, 1.0]]}],
                              tmp_path / "b", tmp_path / "out")
    assert np.isclose(ratios[first][1], 1.0)

