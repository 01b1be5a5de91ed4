"""Every Python and shell block of README.md and docs/*.md runs (tests/docs_blocks.py):
a page's blocks in order, in a scratch folder that links the repository's configs/ and
examples/, `gmmv` commands at reduced size. Docs cannot drift from the code unnoticed."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from docs_blocks import NOT_CODE, PAGES, ROOT, RUN, blocks, shell_script

ALL = [b for page in PAGES for b in blocks(page)]


def test_the_collector_finds_the_pages_and_their_blocks():
    assert {p.name for p in PAGES} >= {"README.md", "api.md", "usage.md", "policies.md"}
    assert sum(b.lang == "python" for b in ALL) >= 10 and sum(b.lang == "sh" for b in ALL) >= 10


def test_every_block_says_what_it_is():
    untagged = [f"{b.where} ({b.lang or 'no tag'})" for b in ALL if b.lang not in RUN + NOT_CODE]
    assert not untagged, "tag each block python, sh, text, yaml or toml: " + "; ".join(untagged)


def test_a_skipped_block_gives_its_reason_in_the_page():
    for b in ALL:
        if b.lang in RUN and "not run by the docs test" in b.text.splitlines()[0]:
            assert b.skip_reason, f"{b.where}: a skip marker needs a reason"


def scratch(tmp_path: Path) -> Path:
    for name in ("configs", "examples", "traces"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def run_sh(block, cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(["bash", "-c", shell_script(block.text)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (f"{block.where}: exited {proc.returncode}\n{block.text}\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def run_python(block, namespace: dict, cwd: Path) -> None:
    # From a file, so that numba can cache what a block defines (it needs a source file).
    source = cwd / f"docs_{block.page.stem}_{block.line}.py"
    source.write_text(block.text)
    code = compile(block.text, str(source), "exec")
    from gmm_volunteer.experiments.intervals import FewSeedsWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a documented snippet runs without warnings ...
        warnings.simplefilter("default", FewSeedsWarning)  # ... but the advice it is meant to give
        exec(code, namespace)


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """One scratch folder for every page, in the order of PAGES (README.md, then docs/
    alphabetically): a page may read what an earlier one wrote (docs/formats.md opens
    the runs of docs/experiments.md's sweep)."""
    return scratch(tmp_path_factory.mktemp("docs"))


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang in RUN and not b.skip_reason for b in blocks(p))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_blocks_of_a_page_run(page, shared, monkeypatch):
    cwd = shared
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["docs"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # a page's plugin folder stays its own
    saved = os.environ.get("PYTHONPATH")
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    try:
        for block in blocks(page):
            if block.lang not in RUN or block.skip_reason:
                continue
            if block.lang == "python":
                run_python(block, namespace, cwd)
            else:
                run_sh(block, cwd)
            ran += 1
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    assert ran
