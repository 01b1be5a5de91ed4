"""Fuzzing the argument handling of issue "Hardening IV": `gmmv init`, `gmmv results join`
and `python -m gmm_volunteer.testbed.compare`, with paths drawn from the kinds that broke
them (links out of the target, inputs as outputs, foreign files, /proc, the root, empty
and over-long names) and values a table or a setting cannot hold. Every generated case is
either refused with exit 2 and one message, no traceback and no file created, changed or
removed anywhere, or accepted and then does what the command says (init: the starter
files in DIR, nothing outside; join: a result file at -o, the inputs unchanged; compare:
it reaches the simulation having written nothing). Seeds are fixed (derandomized), so a
failure reproduces.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gmm_volunteer.cli.commands import main  # noqa: E402
from gmm_volunteer.cli.init import starter_root  # noqa: E402
from gmm_volunteer.cli.outputs import is_result_file  # noqa: E402
from gmm_volunteer.starter import starter_files  # noqa: E402
from gmm_volunteer.testbed import compare  # noqa: E402
from test_hardening4_inputs import CASE, RESULT, TESTBED_STORE  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=30,
                suppress_health_check=list(HealthCheck))


def _tree(folder: Path) -> dict:
    """Every entry under `folder`: a file's bytes, a link's target, a folder."""
    out = {}
    for p in sorted(folder.rglob("*")):
        out[p] = ("link", str(p.readlink())) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


def _one_message(err: str) -> bool:
    """One message: a line of our own (``compare: ...``, ``gmmv ...: error: ...``), or
    argparse's usage followed by its one error line."""
    lines = err.strip().splitlines()
    if lines and lines[0].startswith("usage:"):
        return lines[-1].split(": error: ", 1)[0].endswith(("compare", "join")) and \
            sum(": error: " in ln for ln in lines) == 1
    return len(lines) == 1


def _call(fn, argv, capsys) -> tuple[int, str]:
    try:
        code = fn([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def _place(root: Path, kind: str) -> Path | str:
    """A path of `kind` under (or outside) `root`, made as it says."""
    if kind == "new":
        return root / "new"
    if kind == "nested new":
        return root / "a" / "b" / "new"
    if kind == "empty folder":
        (root / "empty").mkdir()
        return root / "empty"
    if kind == "a file":
        (root / "file.txt").write_text("mine\n")
        return root / "file.txt"
    if kind == "dangling link":
        (root / "dangling").symlink_to(root / "nowhere")
        return root / "dangling"
    if kind == "link to a folder":
        (root / "target").mkdir()
        (root / "linked").symlink_to(root / "target")
        return root / "linked"
    if kind == "long name":
        return root / ("x" * 300)
    return kind  # an absolute path of the system, or "" (no Path: Path("") is ".")


SYSTEM = ["/", "/proc", "/proc/x", "/sys/fs", ""]
KINDS = ["new", "nested new", "empty folder", "a file", "dangling link", "link to a folder", "long name", *SYSTEM]


# -- gmmv init ---------------------------------------------------------------------------------

@FUZZ
@given(data=st.data())
def test_fuzz_init(tmp_path_factory, capsys, monkeypatch, data):
    root = tmp_path_factory.mktemp("init")
    monkeypatch.chdir(root)
    kind = data.draw(st.sampled_from(KINDS), label="DIR")
    given = _place(root, kind)
    out = Path(given)
    files = starter_files(starter_root())
    inside = kind == "empty folder"
    if inside:  # what DIR already holds: some starter files as they are, differing, or links out
        for rel in data.draw(st.lists(st.sampled_from(sorted(files)), max_size=3, unique=True), label="present"):
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            how = data.draw(st.sampled_from(["same", "differs", "link out", "folder"]), label=f"{rel}")
            if how == "same":
                shutil.copy(starter_root() / rel, target)
            elif how == "differs":
                target.write_text("mine\n")
            elif how == "link out":
                target.symlink_to(root / "outside" / Path(rel).name)
            else:
                target.mkdir()
    before = _tree(root)
    code, err = _call(main, ["init", given, "-q"], capsys)
    event(f"exit {code}")
    assert not (root / "outside").exists() and not (root / "nowhere").exists()  # nothing written through a link
    if code == 2:
        assert err.startswith("gmmv init: error: DIR") and err.count("\n") == 1, err
        assert _tree(root) == before
    else:
        assert code == 0, err
        assert kind in ("new", "nested new", "empty folder")
        for rel in files:
            assert (out / rel).read_bytes() == (starter_root() / rel).read_bytes(), rel
        assert all(before[p] == v for p, v in _tree(root).items() if p in before)  # nothing changed


# -- gmmv results join -------------------------------------------------------------------------

def _tables(root: Path) -> None:
    for name in ("a.md", "b.md"):
        shutil.copy(RESULT, root / name)
    lines = RESULT.read_text().splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("| ") and lines[i - 1].startswith("|---"))
    (root / "dup.md").write_text("\n".join([*lines[:row + 1], lines[row], *lines[row + 1:]]) + "\n")
    (root / "foreign.md").write_text("mine\n")
    (root / "folder").mkdir()
    (root / "link.md").symlink_to(root / "outside.md")


CELLS = st.one_of(st.sampled_from(["x", "progress: work", "x|y", "x\ny", "", " ", "a\rb", "é"]),
                  st.text(max_size=8))


@FUZZ
@given(data=st.data())
def test_fuzz_results_join(tmp_path_factory, capsys, monkeypatch, data):
    root = tmp_path_factory.mktemp("join")
    monkeypatch.chdir(root)
    _tables(root)
    pool = ["a.md", "b.md", "dup.md", "foreign.md", "missing.md", "folder"]
    files = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3), label="files")
    labels = data.draw(st.lists(CELLS, min_size=len(files), max_size=len(files)), label="labels")
    on = data.draw(st.sampled_from(["finding", "verdict", "", "nope"]), label="--on")
    column = data.draw(st.sampled_from(["verdict", "ours", "finding", "x|y"]), label="--column")
    out = data.draw(st.sampled_from(["j.md", "a.md", "b.md", "foreign.md", "link.md", "folder", "/proc/x.md",
                                     "sub/j.md", ""]), label="-o")
    argv = ["results", "join", *files, "--on", on, "--column", column,
            *(x for lab in labels for x in ("--label", lab)), "-o", out]
    before = _tree(root)
    code, err = _call(main, argv, capsys)
    event(f"exit {code}")
    assert not (root / "outside.md").exists()
    if code == 2:
        assert _tree(root) == before
        assert _one_message(err), err
    else:
        assert code == 0, err
        assert out not in files and is_result_file(root / out)
        assert {p: v for p, v in _tree(root).items() if p != root / out and p in before} == \
            {p: v for p, v in before.items() if p != root / out}  # the inputs as they were


# -- testbed.compare ---------------------------------------------------------------------------

class _Reached(Exception):
    """The comparison got past every check to its first simulation."""


@FUZZ
@given(data=st.data())
def test_fuzz_testbed_compare(tmp_path_factory, capsys, monkeypatch, data):
    root = tmp_path_factory.mktemp("compare")
    runs = root / "runs"
    runs.mkdir()
    shutil.copytree(TESTBED_STORE, runs / TESTBED_STORE.name)
    (root / "foreign.md").write_text("mine\n")
    (root / "link.md").symlink_to(root / "outside.md")
    (root / "empty").mkdir()

    def reached(*args, **kwargs):
        raise _Reached

    monkeypatch.setattr(compare, "_simulate", reached)
    results = data.draw(st.sampled_from([runs, root / "missing", root / "foreign.md", root / "empty"]), label="RESULTS")
    config = data.draw(st.sampled_from([CASE, root / "missing.yaml", root / "foreign.md"]), label="CONFIG")
    argv = [results, config, "--sim-seeds", str(data.draw(st.integers(-2, 3), label="--sim-seeds"))]
    if data.draw(st.booleans(), label="candidates"):
        argv += ["--calibration", CASE.stem]
        for cand in data.draw(st.lists(st.sampled_from(["", "garbage", "steps=x", "users.count=3",
                                                        "execution.work_scale=2;steps=30", "nokey=1"]),
                                       min_size=1, max_size=2), label="--candidate"):
            argv += ["--candidate", cand]
    output = data.draw(st.sampled_from([None, "--headline-file", "--result-files", "--figure"]), label="output")
    if output:
        target = data.draw(st.sampled_from(["new.md", "foreign.md", "link.md", "/proc/x.md", "runs/x.md", "empty",
                                            str(CASE)]), label="target")
        argv += [output, target if target.startswith("/") else root / target]
    before = _tree(root)
    try:
        code, err = _call(compare.main, argv, capsys)
    except _Reached:
        code, err = None, ""
    event("reached the simulation" if code is None else f"exit {code}")
    assert _tree(root) == before and not (root / "outside.md").exists()
    if code is not None:
        assert code == 2 and _one_message(err), err
