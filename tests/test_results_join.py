"""`gmmv results join`: result tables side by side, as one result file whose header says
what made each (docs/results/README.md)."""

from __future__ import annotations

from gmm_volunteer.cli.commands import main
from gmm_volunteer.io import resultfile


def _file(path, rows, version="0.6.0", bundle=("b", "d1"), stale=None):
    table = "| finding | paper | verdict |\n|---|---|---|\n" + "\n".join(f"| {k} | {p} | {v} |" for k, p, v in rows)
    return resultfile.write(path, table, command=f"make {path.name}", bundles={bundle[0]: bundle[1]},
                            gmmv_version="0.7.0", trajectory_version=version, stale=stale)


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
