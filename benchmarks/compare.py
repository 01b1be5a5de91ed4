"""Compare two benchmark result files: `python -m benchmarks.compare A.json B.json`.

Prints, for every row present in both files, the value in A, the value in B and the
ratio B / A. For times and memory a ratio below 1 means B is faster / smaller; for
steps/s a ratio above 1 means B is faster. Rows present in only one file are listed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.run import FORMAT, _fmt, kb_per_user, table

# section -> (row key fields, [(metric, label, format)])
METRICS = {
    "compile": (("scheduler", "users", "steps"), [
        ("compile_s_median", "compile s", ".1f"),
        ("cold_startup_s_median", "cold start s", ".2f"),
        ("warm_startup_s_median", "warm start s", ".2f"),
    ]),
    "main": (("users", "scheduler", "steps"), [
        ("run_s_median", "run s", ".2f"),
        ("steps_per_s_median", "steps/s", ",.0f"),
        ("construct_s_median", "build s", ".2f"),
        ("first_step_s_median", "1st step s", ".2f"),
        ("peak_rss_mb_median", "peak MB", ",.0f"),
    ]),
    "scaling": (("users", "scheduler", "steps"), [
        ("per_step_us_median", "us/step", ".1f"),
        ("us_per_online_user", "us/online", ".3f"),
        ("us_per_active_subtask", "us/subtask", ".3f"),
        ("us_per_sample", "us/sample", ".3f"),
        ("cpu_us_per_sample", "cpu us/sample", ".3f"),
        ("peak_rss_mb_median", "peak MB", ",.0f"),
        ("kb_per_user", "KB/user", ".2f"),
    ]),
}
MACHINE_KEYS = ("host", "cpu_model", "cpus_usable", "python", "numpy", "numba", "git_commit",
                "git_dirty")


def load(path: str) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT:
        raise SystemExit(f"{path}: not a benchmark result file (format {doc.get('format')!r})")
    return doc


# Work of the trajectory; files written before the consumption samples existed lack the
# last two, and a missing value is left out of the check (and shows as "-").
WORK_KEYS = ("mean_online_users", "mean_active_requests", "mean_active_subtasks",
             "mean_active_batches", "mean_running_downloads")


def _work_differs(ra: dict, rb: dict, rel: float = 0.005) -> bool:
    for k in WORK_KEYS:
        x, y = ra.get(k), rb.get(k)
        if x is None or y is None:
            continue
        if abs(x - y) > rel * max(abs(x), abs(y), 1e-12):
            return True
    return False


def _ratio(a, b):
    if a is None or b is None or a == 0:
        return None
    return b / a


# Metrics that older result files lack but whose inputs they hold.
DERIVED = {"kb_per_user": kb_per_user}


def _value(row: dict, metric: str):
    v = row.get(metric)
    return DERIVED[metric](row) if v is None and metric in DERIVED else v


def _rows(doc: dict, sec: str) -> list[dict]:
    return doc.get("sections", {}).get(sec, {}).get("rows", [])


def compare(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> str:
    out = [f"A = {name_a}  ({a['created']}, load at start {a.get('load_start')})",
           f"B = {name_b}  ({b['created']}, load at start {b.get('load_start')})"]
    ma, mb = a["machine"], b["machine"]
    diff = [k for k in MACHINE_KEYS if ma.get(k) != mb.get(k)]
    for k in diff:
        out.append(f"  differs: {k}: {ma.get(k)} -> {mb.get(k)}")
    if any(k in diff for k in ("host", "cpu_model", "cpus_usable")):
        out.append("  (different machines: ratios mix code and hardware differences)")
    out.append("Ratios are B / A: below 1 = B smaller (faster for times, leaner for memory); "
               "for steps/s above 1 = B faster.")
    for sec, (keys, metrics) in METRICS.items():
        ra = {tuple(r.get(k) for k in keys): r for r in _rows(a, sec)}
        rb = {tuple(r.get(k) for k in keys): r for r in _rows(b, sec)}
        if not ra and not rb:
            continue
        common = [k for k in ra if k in rb]
        rows, changed = [], False
        for key in common:
            cells = [_fmt(v) if isinstance(v, int) else str(v) for v in key]
            if _work_differs(ra[key], rb[key]):
                cells[0] = "*" + cells[0]
                changed = True
            for m, _, spec in metrics:
                x, y = _value(ra[key], m), _value(rb[key], m)
                r = _ratio(x, y)
                cells += [_fmt(x, spec), _fmt(y, spec), _fmt(r, ".3f")]
            rows.append(cells)
        headers = list(keys)
        for _, label, _ in metrics:
            headers += [f"{label} A", "B", "B/A"]
        out += ["", f"{sec}:"]
        out.append(table(headers, rows) if rows else "  (no rows in common)")
        if changed:
            out.append("  * the simulated trajectory differs (mean online users, active requests "
                       "or active subtasks), so the work per step differs too")
        only_a = [k for k in ra if k not in rb]
        only_b = [k for k in rb if k not in ra]
        if only_a:
            out.append(f"  only in A: {only_a}")
        if only_b:
            out.append(f"  only in B: {only_b}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare",
                                 description="Compare two benchmark result files (B / A).")
    ap.add_argument("a", help="baseline result JSON")
    ap.add_argument("b", help="new result JSON")
    args = ap.parse_args(argv)
    print(compare(load(args.a), load(args.b), args.a, args.b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
