"""Committed result files: one table of measured results with what made it
(docs/results/README.md).

A result file is markdown: a YAML header between two ``---`` lines, then one table.
The header says how to make the table again and which model it describes:

    command             the shell command(s), from the repository root, that made it
    gmmv_version        the package version that ran them
    trajectory_version  `gmm_volunteer.trajectory.TRAJECTORY_VERSION` of that package
    bundles             {bundle name: sha256 of its content (`bundle_digest`) or "unknown"}
    date                when it was made (YYYY-MM-DD)
    stale               (optional) why the table no longer describes the current model
    policies            (optional) {policy name: its trajectory version} for the policies
                        the runs used, as their stores recorded them (issue 34)

`header_problems` is the cheap check `make test` runs: it compares headers, never
numbers. A result that is not marked stale must have been made by the current trajectory
version on bundles whose digest is still the digest of the bundle it names.
"""

from __future__ import annotations

import datetime
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

REQUIRED = ("command", "gmmv_version", "trajectory_version", "bundles", "date")
OPTIONAL = ("title", "stale", "note", "policies")
UNKNOWN = "unknown"
FENCE = "---"


class ResultFileError(ValueError):
    """A result file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Result:
    path: Path
    header: dict
    table: str  # the markdown table, its lines joined by "\n", no trailing newline

    @property
    def stale(self) -> str | None:
        return self.header.get("stale") or None


class _Dumper(yaml.SafeDumper):
    pass


# Commands and notes of several lines read as they are typed (a YAML block scalar).
_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def render(header: dict, table: str) -> str:
    """The text of a result file (the inverse of `parse`)."""
    head = {k: header[k] for k in ("title", *REQUIRED, "policies", "stale", "note") if header.get(k) is not None}
    text = yaml.dump(head, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return f"{FENCE}\n{text}{FENCE}\n\n{table.strip()}\n"


def parse(text: str, source: str | Path = "<result>") -> Result:
    lines = text.splitlines()
    try:
        end = lines.index(FENCE, 1) if lines and lines[0] == FENCE else -1
    except ValueError:
        end = -1
    if end < 0:
        raise ResultFileError(f"{source}: no header (a YAML block between two '---' lines at the top)")
    try:
        header = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        raise ResultFileError(f"{source}: header is not YAML: {exc}") from None
    if not isinstance(header, dict):
        raise ResultFileError(f"{source}: header is not a mapping")
    missing = [k for k in REQUIRED if k not in header]
    unknown = sorted(set(header) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise ResultFileError(f"{source}: header " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has unknown keys {', '.join(unknown)}"] if unknown else [])))
    if not isinstance(header["bundles"], dict):
        raise ResultFileError(f"{source}: bundles must map bundle names to sha256 digests (or 'unknown')")
    if "policies" in header and not (isinstance(header["policies"], dict)
                                     and all(isinstance(k, str) for k in header["policies"])):
        raise ResultFileError(f"{source}: policies must map policy names to trajectory versions")
    if "policies" in header:
        header["policies"] = {k: str(v) for k, v in header["policies"].items()}
    if "stale" in header and not (isinstance(header["stale"], str) and header["stale"].strip()):
        raise ResultFileError(f"{source}: stale must say why (a non-empty text)")
    for key in ("command", "gmmv_version", "trajectory_version", "date"):
        header[key] = str(header[key])  # YAML reads 2026-12-02 as a date and 1.0 as a number
    body = [ln for ln in lines[end + 1:] if ln.strip()]
    if not body or not all(ln.lstrip().startswith("|") for ln in body):
        raise ResultFileError(f"{source}: after the header, one markdown table and nothing else")
    return Result(Path(source), header, "\n".join(body))


def read(path: str | Path) -> Result:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"{path}: cannot read: {exc}") from None
    return parse(text, path)


def write(path: str | Path, table: str, *, command: str, bundles: dict[str, str], gmmv_version: str,
          trajectory_version: str, title: str | None = None, stale: str | None = None,
          note: str | None = None, date: str | None = None, policies: dict | None = None) -> Path:
    """Write a result file (replacing one that is there). The values describe the run
    that made the table: pass what its store recorded, not the current package's."""
    header = {"title": title, "command": command, "gmmv_version": gmmv_version,
              "trajectory_version": trajectory_version, "bundles": dict(bundles),
              "date": date or datetime.date.today().isoformat(), "stale": stale, "note": note,
              "policies": dict(policies) if policies else None}
    text = render(header, table)
    parse(text, path)  # what we write must read back
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _cell(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        v = f"{v:,.2f}"  # as `gmmv report` shows numbers
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(df) -> str:
    """A pandas DataFrame as a markdown table, its index as the leading columns."""
    import pandas as pd

    # the index carries the row labels (a finding's key, a grid point) unless it is 0..n-1
    flat = df if isinstance(df.index, pd.RangeIndex) else df.rename_axis(
        [n if n is not None else "" for n in df.index.names]).reset_index()
    cols = [" / ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in flat.columns]
    rows = [[_cell(v) for v in row] for row in flat.itertuples(index=False)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def bundle_name(model_path: str) -> str:
    """The name a result gives the bundle a store recorded (`model_bundle`): a shipped
    bundle by its name (also when the store was made from another checkout of the
    package, `.../gmm_volunteer/bundles/NAME`), any other by its path."""
    from gmm_volunteer.io.bundlefiles import PACKAGED

    p = Path(model_path)
    try:
        if p.resolve().parent == PACKAGED.resolve():
            return p.resolve().name
    except OSError:
        pass
    if p.parent.name == PACKAGED.name and p.parent.parent.name == PACKAGED.parent.name and (PACKAGED / p.name).is_dir():
        return p.name
    return str(model_path)


def current_bundle(name: str, root: Path):
    """The bundle `name` names now: a shipped bundle's name, a `module:function` returning
    bundle data (the synthetic bundles of the tests), or a bundle directory relative to
    the repository root. None when `name` is none of these."""
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
    from gmm_volunteer.model.bundle import validate_bundle

    if (shipped := packaged_bundle(name)) is not None:
        return load_bundle(shipped)
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            make = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return None
        data = make()
        return data if not isinstance(data, dict) else validate_bundle(data, name)
    if (root / name / "bundle.yaml").is_file():
        return load_bundle(root / name)
    return None


# Shipped bundles whose hazard block alone was refitted (0.9.0, issue 48; docs/model.md
# D32): digest recorded before -> that bundle's work-law digest (`bundle.work_law_digest`).
# A result made with such a digest describes the bundle shipped now if the two work-law
# digests agree, for runs under the default work law never read the hazards (D10, D27;
# stores of both compared equal, variable for variable). Results that ran
# `progress: paper` read them: those were marked stale when the hazards were refitted.
HAZARD_REFITS = {
    "default": {"cf6ced80d53b0854ed4e060dcc0d38db2b238b8be16566b7d73dd4f043d505bb":
                "f78dfc99da242130de5e39df97c8f4b4928aaeb488b05c5ebd9078544a8fc32f"},
    "paper-scale": {"b92c8f3c9da11ff3b35783d924c5084026a3744e34fa4911ca706630a1ecca56":
                    "d63239ad2ebad0241a353b51abf06be64359de839ded0ee1b070df783b7f1167",
                    # 0.10.0's, whose hazard block 0.11.0 refitted on the quota runs too (D38)
                    "8d03d58b2631558c29de7dfb0589335178cfffcaab90cd55f7e719ae69e60ec2":
                    "d63239ad2ebad0241a353b51abf06be64359de839ded0ee1b070df783b7f1167"},
}


def hazards_alone_differ(name: str, recorded: str, root: Path) -> bool:
    """Whether bundle `name` now differs from the one of digest `recorded` in its hazard
    block alone (`HAZARD_REFITS`)."""
    from gmm_volunteer.model.bundle import work_law_digest

    work = HAZARD_REFITS.get(str(name), {}).get(str(recorded))
    bundle = current_bundle(str(name), root) if work is not None else None
    return bundle is not None and work_law_digest(bundle) == work


def current_digest(name: str, root: Path) -> str | None:
    """The digest `name` has now (`current_bundle`), computed as stores compute it
    (`bundle_digest`); None when `name` names no bundle."""
    from gmm_volunteer.model.bundle import bundle_digest

    bundle = current_bundle(name, root)
    return None if bundle is None else bundle_digest(bundle)


def recorded_digest(name: str, recorded: str, root: Path) -> str:
    """The digest a result header gives bundle `name` whose runs recorded `recorded`
    (`model_sha256`): `recorded`, except that the legacy digest of the bundle `name` names
    now (stores of 0.8.0 and before, `bundle.legacy_bundle_digest`) becomes its digest,
    for it is the same model."""
    from gmm_volunteer.model.bundle import bundle_digest, legacy_bundle_digest

    if recorded == UNKNOWN or name == UNKNOWN:
        return recorded
    try:
        bundle = current_bundle(name, root)
    except (ValueError, OSError):  # a bundle that cannot be read now: keep what was recorded
        return recorded
    if bundle is not None and recorded == legacy_bundle_digest(bundle):
        return bundle_digest(bundle)
    return recorded


def header_problems(result: Result, root: Path, digests: dict | None = None) -> list[str]:
    """Why `result` does not describe the current model though it claims to (it is not
    marked stale): another trajectory version, a policy it lists (`policies`) whose
    trajectory version is another now, or a bundle whose digest is unknown or not the
    digest of the bundle it names (but for a hazard-only refit, `HAZARD_REFITS`). Each
    problem names the file."""
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION, policy_trajectory_version

    if result.stale:
        return []
    where = result.path
    fix = "rerun its command, or mark it stale (docs/results/README.md)"
    problems = []
    if result.header["trajectory_version"] != TRAJECTORY_VERSION:
        problems.append(f"{where}: made by trajectory version {result.header['trajectory_version']}, "
                        f"the package's is {TRAJECTORY_VERSION}: {fix}")
    for name, version in (result.header.get("policies") or {}).items():
        if version != policy_trajectory_version(name):
            problems.append(f"{where}: ran policy {name!r} of trajectory version {version}, whose runs are "
                            f"those of version {policy_trajectory_version(name)} now: {fix}")
    digests = {} if digests is None else digests
    for name, digest in result.header["bundles"].items():
        if name not in digests:
            digests[name] = current_digest(str(name), root)
        now = digests[name]
        if now is None:
            problems.append(f"{where}: bundle {name!r} is neither shipped, nor a module:function, "
                            f"nor a bundle directory under {root}")
        elif str(digest) == UNKNOWN:
            problems.append(f"{where}: the digest of bundle {name!r} it was made with is unknown: {fix}")
        elif str(digest) != now and not hazards_alone_differ(str(name), str(digest), root):
            problems.append(f"{where}: made with bundle {name!r} of digest {str(digest)[:12]}..., "
                            f"whose digest is now {now[:12]}...: {fix}")
    return problems


def table_rows(result: Result) -> tuple[list[str], list[list[str]]]:
    """The column names and the rows of a result's markdown table, cells as written
    (an escaped ``\\|`` inside a cell stays one cell)."""
    import re

    def cells(line: str) -> list[str]:
        parts = re.split(r"(?<!\\)\|", line.strip())
        return [c.strip() for c in parts[1:-1]]

    lines = result.table.splitlines()
    return cells(lines[0]), [cells(ln) for ln in lines[2:]]


def join(results: list[Result], on: str, keep: list[str], columns: list[str], labels: list[str]) -> str:
    """One markdown table of several result tables side by side: the rows of the first
    keyed by column `on`, its columns `keep`, then `columns` of each result under its
    label ("label: column"). Every result must have the same keys in its `on` column.
    Raises ResultFileError naming the file of a problem."""
    if len(labels) != len(results):
        raise ResultFileError(f"{len(results)} result files but {len(labels)} labels")
    tables = []
    for r in results:
        names, rows = table_rows(r)
        for col in [on, *columns, *(keep if r is results[0] else [])]:
            if col not in names:
                raise ResultFileError(f"{r.path}: its table has no column {col!r} (columns: {', '.join(names)})")
        keyed = {}
        for row in rows:
            if len(row) != len(names):
                raise ResultFileError(f"{r.path}: a row of its table has {len(row)} cells for {len(names)} columns")
            key = row[names.index(on)]
            if key in keyed:  # which of the two rows is meant cannot be told: refused, not guessed
                raise ResultFileError(f"{r.path}: its {on!r} column holds {key!r} twice; a key column "
                                      "names each row once")
            keyed[key] = dict(zip(names, row))
        tables.append(keyed)
    keys = list(tables[0])
    for r, t in zip(results[1:], tables[1:]):
        if sorted(t) != sorted(keys):
            raise ResultFileError(f"{r.path}: its {on!r} column differs from {results[0].path}'s")
    head = [on, *keep, *(f"{lab}: {c}" for lab in labels for c in columns)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in keys:
        row = [k, *(tables[0][k][c] for c in keep), *(t[k][c] for t in tables for c in columns)]
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)
