"""The fenced code blocks of README.md and docs/*.md, as tests/test_docs.py runs them.

Every block carries a language tag:

* ``python``: run, the blocks of one page in order in one namespace;
* ``sh``: shell commands (bash), run in order in the same folder, each `gmmv` command at
  reduced size (`shell_script`);
* ``text`` (output, listings, usage synopses), ``yaml``, ``toml``: not code, not run.

A ``python`` or ``sh`` block whose first line is ``# not run by the docs test: REASON``
is not run; the reason is part of the page, for its reader too.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("python", "sh")
NOT_CODE = ("text", "yaml", "toml")
SKIP = re.compile(r"#\s*not run by the docs test:\s*(?P<reason>\S.*)")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[^\s`]*)\s*$")

# Reduced size: a `gmmv` command gets these arguments appended (later options and later
# `--set`s of a key win), so that every documented command runs in seconds.
SMALL = ["--set", "steps=120", "--set", "users.count=40"]
REDUCE = {
    "run": SMALL,
    "compile": [],
    "schema": [],
    "fit": ["--arma", "1,0", "--no-report"],  # one ARMA order: seconds, not minutes
    "summarize": [],
    "report": [],
    "validate": SMALL,
    "sweep": ["--set", "steps=120", "--workers", "1"],  # a grid's own users.count may not be --set
    "capacity": SMALL + ["--seeds", "1", "--max-evaluations", "3"],
    "tune": ["--set", "steps=120", "--set", "users.count=40", "--trials", "2", "--method", "random",
             "--train-seeds", "0", "--test-seeds", "100", "--baselines", "weighted", "--warmup", "30"],
}


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        first = self.text.lstrip().splitlines()[0] if self.text.strip() else ""
        m = SKIP.fullmatch(first.strip())
        return m.group("reason") if m else None


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            indent = len(m.group("indent"))
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = "\n".join(line[indent:] for line in lines[i + 1:j])
            found.append(Block(page, i + 1, m.group("lang"), body))
            i = j
        i += 1
    return found


def shell_script(text: str) -> str:
    """A bash script running an ``sh`` block: stops at the first failing command, with
    ``.venv/bin/`` dropped (the test's environment is on PATH) and `gmmv` a function
    that appends its subcommand's REDUCE arguments."""
    cases = "".join(f"    {sub}) extra=({' '.join(shlex.quote(a) for a in args)});;\n"
                    for sub, args in REDUCE.items())
    prelude = ("set -euo pipefail\n"
               "gmmv() {\n  local extra=()\n  case \"${1:-}\" in\n" + cases +
               "    *) echo \"docs test: gmmv ${1:-}: no reduced size known (tests/docs_blocks.py REDUCE)\" >&2;"
               " return 99;;\n  esac\n  local code=0\n  command gmmv \"$@\" \"${extra[@]}\" || code=$?\n"
               # capacity: exit 3 is an answer (targets not met at --hi), which the
               # reduced size may well give; only errors (2) and failures (1) count
               "  if [ \"${1:-}\" = capacity ] && [ $code -eq 3 ]; then code=0; fi\n  return $code\n}\n")
    return prelude + text.replace(".venv/bin/", "")
