"""`gmmv results join`: result tables side by side, as one result file whose header says
what made each (docs/results/README.md)."""

from __future__ import annotations

from gmm_volunteer.cli.commands import main
from gmm_volunteer.io import resultfile


def _file(path, rows, version="0.6.0", bundle=("b", "d1"), stale=None, gmmv="0.7.0"):
    table = "| finding | paper | verdict |\n|---|---|---|\n" + "\n".join(f"| {k} | {p} | {v} |" for k, p, v in rows)
    return resultfile.write(path, table, command=f"make {path.name}", bundles={bundle[0]: bundle[1]},
                            gmmv_version=gmmv, trajectory_version=version, stale=stale)


def test_join_puts_columns_side_by_side(tmp_path):
    a = _file(tmp_path / "a.md", [("x", "says x", "holds"), ("y", "says y \\| more", "fails")])
    b = _file(tmp_path / "b.md", [("y", "other", "holds"), ("x", "other", "fails")], bundle=("c", "d2"))
    out = tmp_path / "j.md"
    assert main(["results", "join", str(a), str(b), "--on", "finding", "--keep", "paper", "--column", "verdict",
                 "--label", "A", "--label", "B", "-o", str(out)]) == 0
    r = resultfile.read(out)
    names, rows = resultfile.table_rows(r)
    assert names == ["finding", "paper", "A: verdict", "B: verdict"]
    assert rows == [["x", "says x", "holds", "fails"], ["y", "says y \\| more", "fails", "holds"]]
    assert r.header["bundles"] == {"b": "d1", "c": "d2"} and "make a.md" in r.header["command"]
    assert r.stale is None


def test_join_refuses_what_does_not_match(tmp_path):
    a = _file(tmp_path / "a.md", [("x", "p", "holds")])
    other_keys = _file(tmp_path / "b.md", [("z", "p", "holds")])
    other_model = _file(tmp_path / "c.md", [("x", "p", "holds")], version="0.5.0")
    clash = _file(tmp_path / "d.md", [("x", "p", "holds")], bundle=("b", "other"))
    out = tmp_path / "j.md"
    base = ["--on", "finding", "--column", "verdict", "--label", "A", "--label", "B", "-o", str(out)]
    for f in (other_keys, other_model, clash):
        assert main(["results", "join", str(a), str(f), *base]) == 2
    assert main(["results", "join", str(a), *base]) == 2  # two labels, one file
    assert main(["results", "join", str(a), str(a), "--on", "finding", "--column", "nope", "--label", "A",
                 "--label", "B", "-o", str(out)]) == 2
    assert not out.exists()


def test_join_takes_a_hazard_only_refit_for_the_bundle_of_now(tmp_path):
    # a work-law table of paper-scale made before its hazard block was refitted (0.8.8's
    # digest, resultfile.HAZARD_REFITS) joins one made on the bundle of now, which the
    # joined header names; two unrelated digests of one name are still refused
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
    from gmm_volunteer.model.bundle import bundle_digest

    now = bundle_digest(load_bundle(packaged_bundle("paper-scale")))
    old = "b92c8f3c9da11ff3b35783d924c5084026a3744e34fa4911ca706630a1ecca56"
    a = _file(tmp_path / "a.md", [("x", "p", "holds")], bundle=("paper-scale", now), gmmv="0.10.0")
    b = _file(tmp_path / "b.md", [("x", "p", "fails")], bundle=("paper-scale", old), gmmv="0.6.0")
    out = tmp_path / "j.md"
    base = ["--on", "finding", "--column", "verdict", "--label", "A", "--label", "B", "-o", str(out)]
    assert main(["results", "join", str(b), str(a), *base]) == 0
    assert resultfile.read(out).header["bundles"] == {"paper-scale": now}
    assert resultfile.read(out).header["gmmv_version"] == "0.10.0"  # the newer, by number
    c = _file(tmp_path / "c.md", [("x", "p", "fails")], bundle=("paper-scale", "not-a-refit"))
    assert main(["results", "join", str(a), str(c), *base[:-1], str(tmp_path / "k.md")]) == 2
