"""`gmmv init DIR` (gmm_volunteer/cli/init.py): writes the starter files
(`gmm_volunteer.starter`) byte for byte, keeps identical files, and refuses with exit 2,
writing nothing, when a file there differs. Here from the source tree (an editable
install); tests/test_wheel.py checks the wheel's copy and init from it."""

from __future__ import annotations

from pathlib import Path

from gmm_volunteer.cli.commands import main
from gmm_volunteer.cli.init import starter_root
from gmm_volunteer.starter import starter_files

ROOT = Path(__file__).resolve().parents[1]


def test_the_starter_names_the_quickstart_the_paper_configs_traces_and_docs():
    files = starter_files(ROOT)
    for rel in ("configs/quickstart.yaml", "configs/grid_small.yaml", "configs/paper/base.yaml",
                "configs/paper/grid.yaml", "traces/FORMAT.md", "traces/subtasks/runs.csv.gz",
                "traces/resources/resources.csv.gz", "traces/downloads/downloads.csv.gz",
                "README.md", "docs/usage.md"):
        assert rel in files
    assert not [f for f in files if "__pycache__" in f or ".partial" in f]


def test_init_writes_every_starter_file_and_the_configs_run_from_there(tmp_path, capsys):
    assert starter_root() == ROOT  # an editable install reads its source tree
    assert main(["init", str(tmp_path / "work")]) == 0
    written = sorted(p.relative_to(tmp_path / "work").as_posix() for p in (tmp_path / "work").rglob("*") if p.is_file())
    assert written == starter_files(ROOT)
    for rel in written:
        assert (tmp_path / "work" / rel).read_bytes() == (ROOT / rel).read_bytes(), rel
    out = capsys.readouterr()
    assert f"wrote {len(written)} files" in out.out and "gmmv run configs/quickstart.yaml" in out.err
    # the grid's relative base resolves inside the written folder
    from gmm_volunteer.experiments.sweep import load_grid

    grid = load_grid(tmp_path / "work" / "configs" / "grid_small.yaml")
    assert grid.shape == (3, 2, 2, 3, 2) and grid.base == tmp_path / "work" / "configs" / "paper" / "base.yaml"


def test_init_keeps_identical_files_and_refuses_a_differing_one_writing_nothing(tmp_path, capsys):
    work = tmp_path / "work"
    assert main(["init", str(work), "-q"]) == 0
    assert main(["init", str(work), "-q"]) == 0  # all there and the same: nothing to do
    assert "0 files" in capsys.readouterr().out
    mine = work / "configs" / "quickstart.yaml"
    mine.write_text("seed: 7\n")
    (work / "docs" / "usage.md").unlink()
    assert main(["init", str(work)]) == 2
    err = capsys.readouterr().err
    assert "configs/quickstart.yaml" in err and "nothing written" in err
    assert mine.read_text() == "seed: 7\n"  # the user's file is untouched
    assert not (work / "docs" / "usage.md").exists()  # and the missing one was not written either


def test_init_into_a_file_is_an_input_error(tmp_path, capsys):
    target = tmp_path / "afile"
    target.write_text("x")
    assert main(["init", str(target)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert target.read_text() == "x"


def test_every_page_of_the_docs_is_a_starter_file():
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert pages <= set(starter_files(ROOT)), sorted(pages - set(starter_files(ROOT)))
