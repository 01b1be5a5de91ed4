"""Result tables in the docs come from committed result files whose headers say what
made them, and none claims a model it was not made by (docs/results/README.md). The
check compares headers, never numbers, so it is cheap enough for every `make test`."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gmm_volunteer.cli.commands import main
from gmm_volunteer.io import resultdocs, resultfile
from gmm_volunteer.io.bundlefiles import PACKAGED, load_bundle
from gmm_volunteer.model.bundle import bundle_digest
from gmm_volunteer.trajectory import TRAJECTORY_VERSION

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIGEST = bundle_digest(load_bundle(PACKAGED / "default"))
TABLE = "| users | completed |\n|---|---|\n| 100 | 12,022 |"


def test_the_repository_docs_pass_the_check():
    problems = resultdocs.check(REPO)
    assert not problems, "\n".join(problems)


def test_the_shipped_docs_have_result_files():
    # the check is not vacuous: the docs include result files, and the allow-list is used
    assert len(resultdocs.result_files(REPO)) >= 10
    assert resultdocs.load_allow_list(REPO)


def _header(**over):
    h = dict(command="gmmv sweep configs/paper/grid_one_seed.yaml", gmmv_version="0.5.0",
             trajectory_version=TRAJECTORY_VERSION, bundles={"default": DEFAULT_DIGEST}, date="2026-12-02")
    h.update(over)
    return h


def _repo(tmp_path, header=None, doc_table=TABLE, stale_note=None, name="x.md", allow=None, extra_doc=""):
    """A minimal repository: one result file and docs/validation.md including it."""
    (tmp_path / "docs" / "results").mkdir(parents=True)
    result = resultfile.write(tmp_path / "docs" / "results" / name, TABLE, **(header or _header()))
    lines = [f"<!-- result: docs/results/{name} -->"]
    if stale_note:
        lines += [stale_note, ""]
    (tmp_path / "docs" / "validation.md").write_text(
        "# Validation\n\n" + "\n".join(lines + [doc_table]) + "\n\nText.\n" + extra_doc)
    (tmp_path / "docs" / "experiments.md").write_text("# Experiments\n")
    if allow is not None:
        (tmp_path / resultdocs.ALLOW_LIST).write_text(allow)
    return result


def test_a_current_result_passes(tmp_path):
    _repo(tmp_path)
    assert resultdocs.check(tmp_path) == []


def test_a_wrong_digest_fails_naming_the_file(tmp_path):
    _repo(tmp_path, _header(bundles={"default": "0" * 64}))
    (problem,) = resultdocs.check(tmp_path)
    assert "docs/results/x.md" in problem and "bundle 'default'" in problem


def test_an_unknown_digest_fails(tmp_path):
    _repo(tmp_path, _header(bundles={"default": "unknown"}))
    (problem,) = resultdocs.check(tmp_path)
    assert "x.md" in problem and "unknown" in problem


def test_a_bundle_the_check_cannot_find_fails(tmp_path):
    _repo(tmp_path, _header(bundles={"no-such-bundle": DEFAULT_DIGEST}))
    (problem,) = resultdocs.check(tmp_path)
    assert "'no-such-bundle'" in problem


def test_a_synthetic_bundle_is_named_by_its_function(tmp_path):
    from gmm_volunteer.model.bundle import validate_bundle
    from gmm_volunteer.testing.synthetic import queueing_bundle

    name = "gmm_volunteer.testing.synthetic:queueing_bundle"
    _repo(tmp_path, _header(bundles={name: bundle_digest(validate_bundle(queueing_bundle()))}))
    assert resultdocs.check(tmp_path) == []


def test_an_older_trajectory_version_fails(tmp_path):
    _repo(tmp_path, _header(trajectory_version="0.4.0"))
    (problem,) = resultdocs.check(tmp_path)
    assert "x.md" in problem and "trajectory version 0.4.0" in problem


def test_a_table_that_ran_a_changed_policy_fails_and_only_that_one(tmp_path):
    """Policy-scoped trajectory versions (issue 34): a table lists the policies its runs
    used; it is stale when one of them has another trajectory version now, whatever the
    others and the global version say."""
    from gmm_volunteer.trajectory import POLICY_TRAJECTORY_VERSIONS, policy_trajectory_version

    changed = "scheduler:asrb"
    assert POLICY_TRAJECTORY_VERSIONS["scheduler"]["asrb"] != TRAJECTORY_VERSION
    _repo(tmp_path, _header(policies={changed: TRAJECTORY_VERSION, "scheduler:centralized": TRAJECTORY_VERSION}))
    (problem,) = resultdocs.check(tmp_path)
    assert "x.md" in problem and repr(changed) in problem
    shutil.rmtree(tmp_path / "docs")
    _repo(tmp_path, _header(policies={changed: policy_trajectory_version(changed),
                                      "scheduler:centralized": TRAJECTORY_VERSION}))
    assert resultdocs.check(tmp_path) == []


def test_stores_record_the_versions_of_the_policies_they_ran():
    from gmm_volunteer.trajectory import merge_policy_versions, policy_trajectory_version, run_policy_versions

    recorded = {"scheduler:asrb": "0.8.0"}
    assert run_policy_versions({"policy_trajectory_versions": recorded}) == recorded
    # a store made before policies had versions: each named policy at the store's version
    old = {"trajectory_version": "0.6.0", "scheduler": "asrb", "executor": "default", "autoscaler": "la_imr"}
    assert run_policy_versions(old) == {"scheduler:asrb": "0.6.0", "executor:default": "0.6.0",
                                        "autoscaler:la_imr": "0.6.0"}
    assert merge_policy_versions([{"scheduler:asrb": "0.6.0"}, {"scheduler:asrb": "0.8.0", "scheduler:jsq": "0.8.0"}]) == {
        "scheduler:asrb": "mixed (0.6.0, 0.8.0)", "scheduler:jsq": "0.8.0"}
    assert policy_trajectory_version("scheduler:centralized") == TRAJECTORY_VERSION
    # a version is per kind: capacity_rule names an autoscaler that changed (issue 51) and
    # no scheduler, which therefore has the engine's version
    assert policy_trajectory_version("autoscaler:capacity_rule") != policy_trajectory_version("scheduler:capacity_rule")
    assert policy_trajectory_version("scheduler:capacity_rule") == TRAJECTORY_VERSION


def test_a_stale_result_passes_when_the_doc_says_so(tmp_path):
    result = _repo(tmp_path, _header(trajectory_version="0.4.0", bundles={"default": "unknown"},
                                     stale="made by trajectory version 0.4.0"),
                   stale_note="> **Stale:** made by trajectory version 0.4.0")
    assert resultfile.read(result).stale
    assert resultdocs.check(tmp_path) == []


def test_a_stale_result_without_the_note_in_the_doc_fails(tmp_path):
    _repo(tmp_path, _header(trajectory_version="0.4.0", stale="made by trajectory version 0.4.0"))
    (problem,) = resultdocs.check(tmp_path)
    assert "docs/validation.md:3" in problem and "stale note" in problem


def test_an_empty_stale_reason_is_refused(tmp_path):
    (tmp_path / "x.md").write_text(resultfile.render(_header(), TABLE).replace("---\n\n", "stale: ''\n---\n\n"))
    with pytest.raises(resultfile.ResultFileError, match="stale must say why"):
        resultfile.read(tmp_path / "x.md")


def test_a_doc_table_that_differs_from_its_file_fails(tmp_path):
    _repo(tmp_path, doc_table=TABLE.replace("12,022", "12,023"))
    (problem,) = resultdocs.check(tmp_path)
    assert "docs/validation.md:3" in problem and "docs/results/x.md" in problem


def test_a_table_neither_included_nor_allowed_fails(tmp_path):
    _repo(tmp_path, extra_doc="\n| what | means |\n|---|---|\n| a | b |\n")
    (problem,) = resultdocs.check(tmp_path)
    assert "docs/validation.md:10" in problem and "| what | means |" in problem


def test_an_allowed_table_passes_and_a_dead_entry_fails(tmp_path):
    entry = "- doc: docs/validation.md\n  header: '| what | means |'\n  why: definitions\n"
    _repo(tmp_path, extra_doc="\n| what | means |\n|---|---|\n| a | b |\n", allow=entry)
    assert resultdocs.check(tmp_path) == []
    shutil.rmtree(tmp_path / "docs")
    _repo(tmp_path, allow=entry)
    (problem,) = resultdocs.check(tmp_path)
    assert resultdocs.ALLOW_LIST in problem and "| what | means |" in problem


def test_a_missing_result_doc_fails(tmp_path):
    _repo(tmp_path)
    (tmp_path / "docs" / "experiments.md").unlink()
    (problem,) = resultdocs.check(tmp_path)
    assert problem.startswith("docs/experiments.md: not found")


def test_tables_in_code_fences_are_not_tables(tmp_path):
    _repo(tmp_path, extra_doc="\n```\n| what | means |\n|---|---|\n```\n")
    assert resultdocs.check(tmp_path) == []


def test_a_marker_to_a_missing_file_and_an_orphan_file_fail(tmp_path):
    _repo(tmp_path)
    resultfile.write(tmp_path / "docs" / "results" / "orphan.md", TABLE, **_header())
    doc = tmp_path / "docs" / "validation.md"
    doc.write_text(doc.read_text() + "\n<!-- result: docs/results/gone.md -->\n")
    problems = resultdocs.check(tmp_path)
    assert any("gone.md" in p and "cannot read" in p for p in problems)
    assert any(p.startswith("docs/results/orphan.md") and "no doc includes it" in p for p in problems)


def test_sync_rewrites_the_block_from_the_file(tmp_path):
    _repo(tmp_path, _header(stale="made by trajectory version 0.4.0"), doc_table=TABLE.replace("100", "99"),
          extra_doc="\n- a list item\n\n  <!-- result: docs/results/x.md -->\n  | old |\n  |---|\n")
    assert len(resultdocs.check(tmp_path)) == 2
    assert resultdocs.sync(tmp_path) == ["docs/validation.md"]
    assert resultdocs.check(tmp_path) == []
    text = (tmp_path / "docs" / "validation.md").read_text()
    assert "> **Stale:** made by trajectory version 0.4.0\n\n| users" in text
    assert "\n  > **Stale:** made by trajectory version 0.4.0\n\n  | users | completed |" in text
    assert text.endswith("Text.\n\n- a list item\n\n  <!-- result: docs/results/x.md -->\n"
                         "  > **Stale:** made by trajectory version 0.4.0\n\n  | users | completed |\n"
                         "  |---|---|\n  | 100 | 12,022 |\n")
    assert resultdocs.sync(tmp_path) == []


def test_a_result_file_round_trips():
    header = _header(command="gmmv sweep a.yaml\ngmmv results table results/a findings -o x.md",
                     stale="made by trajectory version 0.5.0", title="T", note="N")
    r = resultfile.parse(resultfile.render(header, TABLE))
    assert r.header == header and r.table == TABLE and r.stale


@pytest.mark.parametrize("text, match", [
    ("| a |\n", "no header"),
    ("---\ncommand: x\n---\n| a |\n", "lacks gmmv_version"),
    ("---\n" + "".join(f"{k}: x\n" for k in resultfile.REQUIRED) + "---\n| a |\n", "bundles must map"),
    ("---\n" + "".join(f"{k}: x\n" for k in resultfile.REQUIRED) + "colour: red\n---\n| a |\n", "unknown keys colour"),
    (resultfile.render(_header(), TABLE) + "\nA paragraph.\n", "one markdown table and nothing else"),
])
def test_bad_result_files_are_refused(text, match):
    with pytest.raises(resultfile.ResultFileError, match=match):
        resultfile.parse(text, "f.md")


def test_markdown_table_of_a_frame():
    df = pd.DataFrame({"completed": [12022.0, float("nan")], "note": ["a|b", "c"]},
                      index=pd.Index(["uniform", "affinity"], name="scheduler"))
    assert resultfile.markdown_table(df) == (
        "| scheduler | completed | note |\n|---|---|---|\n"
        "| uniform | 12,022.00 | a\\|b |\n| affinity | - | c |")


def test_bundle_name_of_a_shipped_bundle_is_its_name(tmp_path):
    assert resultfile.bundle_name(str(PACKAGED / "default")) == "default"
    assert resultfile.bundle_name(str(tmp_path / "mine")) == str(tmp_path / "mine")
    # a store made by another checkout records that checkout's path of the shipped bundle
    assert resultfile.bundle_name("/elsewhere/gmm_volunteer/bundles/default") == "default"
    assert resultfile.bundle_name("/elsewhere/gmm_volunteer/bundles/nosuch") == "/elsewhere/gmm_volunteer/bundles/nosuch"
    assert resultfile.bundle_name("/elsewhere/other/bundles/default") == "/elsewhere/other/bundles/default"


def test_the_check_command_exits_1_naming_the_problem(tmp_path, capsys):
    _repo(tmp_path, _header(trajectory_version="0.0.1"))
    assert main(["results", "check", "--root", str(tmp_path)]) == 1
    assert "x.md: made by trajectory version 0.0.1" in capsys.readouterr().out
    _repo(tmp_path / "ok")
    assert main(["results", "check", "--root", str(tmp_path / "ok")]) == 0


def _fake_sweep(tmp_path, digest=None):
    from gmm_volunteer.experiments.sweep import load_grid, run_sweep

    from helpers import fake_simulate, write_tiny_grid

    grid = load_grid(write_tiny_grid(tmp_path, grid={
        "users.count": [100, 1000], "users.capacity": [1], "server.capacity": [10, 30],
        "scheduler": ["centralized", "uniform"]}, seeds=1, steps=60))

    def simulate(cfg, progress=False):  # a store names its bundle as the engine's do
        rec = fake_simulate(cfg, progress)
        recorded = {} if digest is None else {"model_sha256": digest(load_bundle(cfg.model))}
        return dataclasses.replace(rec, attrs={**rec.attrs, "model_bundle": str(cfg.model), **recorded})

    run_sweep(grid, serial=True, run_fn=simulate, progress=False)
    return grid.output


def test_results_table_records_what_the_stores_recorded(tmp_path, monkeypatch, capsys):
    import gmm_volunteer.trajectory

    output = _fake_sweep(tmp_path)
    out = tmp_path / "docs" / "results" / "findings.md"
    argv = ["results", "table", str(output), "findings", "-o", str(out), "--made-by", "gmmv sweep grid.yaml"]
    assert main(argv) == 0
    r = resultfile.read(out)
    assert r.header["command"].splitlines() == ["gmmv sweep grid.yaml",
                                                f"gmmv results table {output} findings -o {out}"]
    assert r.header["trajectory_version"] == TRAJECTORY_VERSION and not r.stale
    assert r.header["bundles"] == {str(tmp_path / "bundle"): bundle_digest(load_bundle(tmp_path / "bundle"))}
    assert r.table.splitlines()[0].startswith("| finding | paper (section 3.2) |")
    assert "| central_user_capacity |" in r.table
    # included in a doc, it passes the check: until the trajectory version is bumped
    (tmp_path / "docs" / "validation.md").write_text(
        "\n".join(resultdocs.include_block("docs/results/findings.md", r)) + "\n")
    (tmp_path / "docs" / "experiments.md").write_text("# Experiments\n")
    assert resultdocs.check(tmp_path) == []
    monkeypatch.setattr(gmm_volunteer.trajectory, "TRAJECTORY_VERSION", "9.9.9")
    # (its policies, without versions of their own, follow TRAJECTORY_VERSION too)
    problems = resultdocs.check(tmp_path)
    assert any("findings.md: made by trajectory version" in p and "9.9.9" in p for p in problems)
    monkeypatch.setattr(gmm_volunteer.trajectory, "TRAJECTORY_VERSION", TRAJECTORY_VERSION)
    # the policies the runs used, with their versions; a change of one of them only
    assert {"scheduler:centralized", "scheduler:uniform"} <= set(r.header["policies"])
    assert set(r.header["policies"].values()) == {TRAJECTORY_VERSION}
    monkeypatch.setitem(gmm_volunteer.trajectory.POLICY_TRAJECTORY_VERSIONS, "scheduler", {"uniform": "9.9.9"})
    (problem,) = resultdocs.check(tmp_path)
    assert "'scheduler:uniform'" in problem and "9.9.9" in problem
    # a file that is not a result file is never replaced
    other = tmp_path / "notes.md"
    other.write_text("my notes\n")
    assert main(["results", "table", str(output), "findings", "-o", str(other)]) == 2
    assert other.read_text() == "my notes\n" and "not a result file" in capsys.readouterr().err


def test_results_table_gives_a_legacy_digest_of_the_bundle_its_current_digest(tmp_path):
    # Stores of 0.8.0 and before recorded the digest of the whole bundle (stamp and
    # provenance included); the header gives the bundle's digest when the recorded one is
    # the legacy digest of the bundle named now, and keeps any other as recorded.
    from gmm_volunteer.model.bundle import legacy_bundle_digest

    output = _fake_sweep(tmp_path, digest=legacy_bundle_digest)
    bundle = load_bundle(tmp_path / "bundle")
    out = tmp_path / "legacy.md"
    assert main(["results", "table", str(output), "findings", "-o", str(out)]) == 0
    assert resultfile.read(out).header["bundles"] == {str(tmp_path / "bundle"): bundle_digest(bundle)}
    assert resultfile.recorded_digest(str(tmp_path / "bundle"), "0" * 64, tmp_path) == "0" * 64
