"""Result tables in the docs come from committed result files (docs/results/README.md).

A doc includes a result file by a marker line, then the file's table; a stale file's
table is preceded by a visible note saying so:

    <!-- result: docs/results/NAME.md -->
    > **Stale:** REASON

    | the file's table |

`check(root)` is what `make test` runs: every result file's header is current or marked
stale (`resultfile.header_problems`); every marker is followed by its file's table (and
note), character for character; every table of `RESULT_DOCS` is either included so or
listed in `ALLOW_LIST` as a table that is not a measured result; every allow-list entry
still names a table; every result file is included somewhere. `sync(root)` rewrites the
included blocks from the files, so an edit is made in one place, the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from gmm_volunteer.io import resultfile

RESULTS_DIR = "docs/results"
ALLOW_LIST = "docs/results/not-results.yaml"
# The docs whose every table must be a result or allow-listed (issue 21 item 5).
RESULT_DOCS = ("docs/validation.md", "docs/experiments.md")
MARKER = re.compile(r"^(\s*)<!-- result: (\S+) -->\s*$")
SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


@dataclass(frozen=True)
class Table:
    doc: str
    line: int  # 0-based index of the header row
    header: str  # the header row, stripped


def result_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / RESULTS_DIR).glob("*.md") if p.name != "README.md")


def include_block(rel: str, result: resultfile.Result, indent: str = "") -> list[str]:
    """The lines a doc shows for a result file: the marker, a stale note, the table."""
    lines = [f"<!-- result: {rel} -->"]
    if result.stale:
        lines += [f"> **Stale:** {' '.join(result.stale.split())}", ""]
    lines += result.table.splitlines()
    return [indent + ln if ln else ln for ln in lines]


def _outside_fences(lines: list[str]):
    fenced = False
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield i, ln


def tables(doc: str, lines: list[str]) -> list[Table]:
    """Markdown tables (a `|` row followed by a separator row) outside code fences."""
    found, prev = [], None
    body = dict(_outside_fences(lines))
    for i in sorted(body):
        s = body[i].strip()
        nxt = body.get(i + 1, "").strip()
        if s.startswith("|") and SEPARATOR.match(nxt) and not (prev is not None and prev == i - 1):
            found.append(Table(doc, i, s))
        prev = i if s.startswith("|") else None
    return found


def _blocks(root: Path, lines: list[str], problems: list[str], cache: dict):
    """(marker line, rel path, expected block or None) for every marker in a doc."""
    for i, ln in _outside_fences(lines):
        m = MARKER.match(ln)
        if not m:
            continue
        indent, rel = m.groups()
        path = root / rel
        if rel not in cache:
            try:
                cache[rel] = resultfile.read(path)
            except resultfile.ResultFileError as exc:
                cache[rel] = None
                problems.append(str(exc))
        result = cache[rel]
        yield i, rel, None if result is None else include_block(rel, result, indent)


def _span(lines: list[str], i: int) -> tuple[int, int]:
    """Where the table a marker at line `i` introduces starts, and where its block ends:
    after the marker only a stale note and blank lines may come before the table."""
    start = i + 1
    while start < len(lines) and (not lines[start].strip() or lines[start].lstrip().startswith("> **Stale")):
        start += 1
    end = start
    while end < len(lines) and lines[end].lstrip().startswith("|"):
        end += 1
    return start, end


def check_root(root: Path) -> None:
    """Refuse (`ResultFileError`) a root that is not a repository with result files: a
    check or sync there would find nothing and report the docs current."""
    if not root.is_dir():
        raise resultfile.ResultFileError(f"--root {root}: no such directory")
    if not (root / RESULTS_DIR).is_dir():
        raise resultfile.ResultFileError(f"--root {root}: has no {RESULTS_DIR} folder (not the repository root)")


def _doc_lines(root: Path, doc: str) -> list[str]:
    try:
        return (root / doc).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise resultfile.ResultFileError(f"{doc}: cannot be read as UTF-8 text ({exc})") from None


def _docs(root: Path) -> list[str]:
    return sorted({*RESULT_DOCS, "README.md", *(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))})


def load_allow_list(root: Path) -> list[dict]:
    path = root / ALLOW_LIST
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else []
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise resultfile.ResultFileError(f"{path}: cannot be read ({exc})") from None
    for e in entries or []:
        if not (isinstance(e, dict) and {"doc", "header", "why"} <= set(e)):
            raise resultfile.ResultFileError(f"{path}: every entry needs doc, header and why")
    return entries or []


def check(root: str | Path) -> list[str]:
    """Every problem with the committed results and the docs that include them."""
    root = Path(root)
    check_root(root)
    problems: list[str] = []
    cache: dict = {}
    digests: dict = {}
    for path in result_files(root):
        rel = str(path.relative_to(root))
        try:
            cache[rel] = resultfile.read(path)
        except resultfile.ResultFileError as exc:
            cache[rel] = None
            problems.append(str(exc))
            continue
        problems += resultfile.header_problems(cache[rel], root, digests)
    included: set[str] = set()
    allowed = {(e["doc"], e["header"].strip()): e for e in load_allow_list(root)}
    used_allowed: set = set()
    for doc in _docs(root):
        if not (root / doc).is_file():
            if doc in RESULT_DOCS:  # renamed or gone: the check must not pass by finding nothing
                problems.append(f"{doc}: not found; the check reads its tables")
            continue
        try:
            lines = _doc_lines(root, doc)
        except resultfile.ResultFileError as exc:
            problems.append(str(exc))
            continue
        covered = set()
        for i, rel, block in _blocks(root, lines, problems, cache):
            included.add(rel)
            if block is None:
                continue
            start, end = _span(lines, i)
            covered.add(start)
            if lines[i:end] != block:
                problems.append(f"{doc}:{i + 1}: what follows <!-- result: {rel} --> is not that file's "
                                f"{'stale note and ' if cache[rel].stale else ''}table: run `gmmv results sync`")
        if doc not in RESULT_DOCS:
            continue
        for t in tables(doc, lines):
            if t.line in covered:
                continue
            if (doc, t.header) in allowed:
                used_allowed.add((doc, t.header))
                continue
            problems.append(f"{doc}:{t.line + 1}: a table that is neither a committed result (a "
                            f"<!-- result: ... --> marker before it) nor in {ALLOW_LIST}: {t.header}")
    for key in allowed.keys() - used_allowed:
        problems.append(f"{ALLOW_LIST}: no table of {key[0]} has the header row {key[1]}")
    for rel in sorted(set(cache) - included):
        problems.append(f"{rel}: no doc includes it (<!-- result: {rel} -->)")
    return problems


def sync(root: str | Path) -> list[str]:
    """Rewrite every included block from its result file (the marker's table, and the
    stale note when the file is stale); returns the docs changed."""
    root = Path(root)
    check_root(root)
    new_texts, problems, cache = {}, [], {}
    for doc in _docs(root):
        if not (root / doc).is_file():
            continue
        try:
            lines = _doc_lines(root, doc)
        except resultfile.ResultFileError as exc:
            problems.append(str(exc))
            continue
        out, pos = [], 0
        for i, rel, block in _blocks(root, lines, problems, cache):
            if block is None:
                continue
            out += lines[pos:i] + block
            end = _span(lines, i)[1]
            pos = end
        new = out + lines[pos:]
        if new != lines:
            new_texts[doc] = "\n".join(new) + "\n"
    if problems:  # before any doc is written: all or nothing
        raise resultfile.ResultFileError("\n".join(problems))
    for doc, text in new_texts.items():
        (root / doc).write_text(text, encoding="utf-8")
    return list(new_texts)
