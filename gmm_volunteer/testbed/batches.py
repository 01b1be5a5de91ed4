"""What each batch cost on a testbed node, beside the bundle's work (paper 2.2, docs/testbed.md).

From 0.8.3 a testbed store lists every batch the server and each device executed
(`batches` in its `testbed` attribute: type, batch size, CPU-s counted, the executing
thread's CPU-s, wall seconds). This groups them by node kind, type and batch size and
sets each group's CPU beside the bundle's mean work at that batch size (as the simulator
reads it: interpolated between the bundle's sizes, on a volunteer times the type's
volunteer factor, docs/model.md D29), so a run shows
whether the model's work per batch is what the nodes paid (docs/validation.md section 6,
"What a volunteer's batch costs").

    python -m gmm_volunteer.testbed.batches STORE [STORE ...] [--model BUNDLE_DIR]
    python -m gmm_volunteer.testbed.batches STORE [STORE ...] --model BUNDLE_DIR --fit-volunteer OUT_DIR
    python -m gmm_volunteer.testbed.batches STORE [STORE ...] --model BUNDLE_DIR --fit-server OUT_DIR
    python -m gmm_volunteer.testbed.batches STORE [STORE ...] --model BUNDLE_DIR --by-idle [--result-file PATH]

Without `--model` the bundle the run was made with (its `model_bundle`) is used. With
`--fit-volunteer` the stores' volunteer batches measure each type's volunteer factor
(docs/model.md D29): their CPU-s counted over the bundle's table for the same batches
(the factors the bundle may already carry are replaced, not compounded),
pooled over the stores, with its 95 % interval; a copy of the bundle with those factors is
written to OUT_DIR. Types no volunteer executed keep the bundle's factor and are named.
With `--fit-server` the stores' server batches scale the work table itself (it is the
server's work), and the volunteer factors are divided by the same ratios, so that a
volunteer's work stays as it was.
With `--speed-reference BUNDLE_DIR` every batch's CPU-s is divided by its store's machine
speed against BUNDLE_DIR (docs/model.md D30), so that stores made at different speeds fit
one table at the reference's.
With `--by-idle` (stores from 0.8.4, whose batches have their start) one table sets
every store's batches beside the bundle's work by how long their node was idle before
them, per node kind, case (the store's name before `-seed`) and type.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

import numpy as np

COLUMNS = ["node", "type", "batch size", "batches", "CPU-s mean", "CPU-s median", "bundle's CPU-s",
           "mean / bundle", "thread CPU-s / counted", "wall s mean"]


def _by_kind(batches: dict) -> list[tuple[str, list]]:
    """The listed batches of the server and of all volunteers together."""
    return [("server", batches.get("server", [])),
            ("volunteers", [r for d in batches.get("devices", []) for r in d])]


def at_reference_speed(batches: dict, speed: float) -> dict:
    """A store's batch lists with each batch's CPU-s (counted and the thread's) divided by
    its machine's speed (docs/model.md D30): what the batch would have cost on the machine
    the reference bundle was measured on. Wall times are left as measured."""
    def each(listed):
        return [[r[0], r[1], r[2] / speed, r[3] / speed, *r[4:]] for r in listed]

    return {**batches, "server": each(batches.get("server", [])),
            "devices": [each(d) for d in batches.get("devices", [])]}


def _base(work: dict[str, np.ndarray], name: str, size: int) -> float | None:
    """The bundle's mean work of a batch of `size` of `name`, None where its table ends."""
    table = work.get(name)
    return float(table[size]) if table is not None and size < len(table) else None


def _for_kind(work: dict[str, np.ndarray], factors: dict[str, float] | None, kind: str) -> dict[str, np.ndarray]:
    """The work a batch needs on a node of `kind` as the simulator reads it: the table on
    the server, the table times the type's volunteer factor on a volunteer (D29)."""
    if kind == "server" or not factors:
        return work
    return {name: table * factors.get(name, 1.0) for name, table in work.items()}


def rows(batches: dict, work: dict[str, np.ndarray], factors: dict[str, float] | None = None) -> list[list[str]]:
    """The table of `batches` ({"server": [...], "devices": [[...], ...]}) against `work`
    ({type: mean CPU-s indexed by batch size}, the bundle's table as the model reads it)
    and, on volunteers, the bundle's volunteer `factors`; one row per node kind, type and
    size."""
    out = []
    for kind, listed in _by_kind(batches):
        kind_work = _for_kind(work, factors, kind)
        groups = defaultdict(list)
        for r in listed:
            groups[(r[0], int(r[1]))].append(r)
        for (name, size), rs in sorted(groups.items()):
            cpu = np.array([r[2] for r in rs], float)
            thread = np.array([r[3] for r in rs], float)
            wall = np.array([r[4] for r in rs], float)
            base = _base(kind_work, name, size)
            out.append([kind, name, str(size), str(len(rs)), f"{cpu.mean():.4f}", f"{np.median(cpu):.4f}",
                        "-" if base is None else f"{base:.4f}",
                        "-" if not base else f"{cpu.mean() / base:.2f}",
                        f"{thread.sum() / cpu.sum():.2f}" if cpu.sum() > 0 else "-", f"{wall.mean():.3f}"])
    return out


def totals(batches: dict, work: dict[str, np.ndarray],
           factors: dict[str, float] | None = None) -> dict[str, tuple[int, float, float]]:
    """Per node kind: (batches, CPU-s counted, the bundle's work for the same batches, on
    volunteers with their `factors`), over the batches whose type and size the bundle's
    table covers."""
    out = {}
    for kind, listed in _by_kind(batches):
        kind_work = _for_kind(work, factors, kind)
        covered = [(r[2], b) for r in listed if (b := _base(kind_work, r[0], int(r[1]))) is not None]
        out[kind] = (len(covered), sum(c for c, _ in covered), sum(b for _, b in covered))
    return out


IDLE_EDGES = (0.2, 1.0, 3.0, 10.0)  # s: bins of the idle time before a batch (docs/validation.md 6)


def _idle_label(k: int) -> str:
    lo = ([0.0] + list(IDLE_EDGES))[k]
    return f"idle > {lo:g} s" if k == len(IDLE_EDGES) else f"idle {lo:g}-{IDLE_EDGES[k]:g} s"


def by_idle(stores: list[tuple[str, dict]], work: dict[str, np.ndarray],
            factors: dict[str, float] | None = None) -> list[list[str]]:
    """Per node kind, case and type: the batches' CPU-s over the bundle's work for the same
    batches, by the time the node was idle before each (from its previous batch's end to
    its start; 0.8.4 stores list each batch's start). `stores` is [(case, batches)]. A
    node's first batch has no idle time and is left out. Cells: ratio (batches)."""
    acc = defaultdict(lambda: np.zeros((len(IDLE_EDGES) + 1, 3)))
    for case, batches in stores:
        nodes = [("server", batches.get("server", []))] + [("volunteers", d) for d in batches.get("devices", [])]
        for kind, listed in nodes:
            kind_work = _for_kind(work, factors, kind)
            for prev, r in zip(listed, listed[1:]):
                if (base := _base(kind_work, r[0], int(r[1]))) is None:
                    continue
                k = int(np.searchsorted(IDLE_EDGES, r[5] - (prev[5] + prev[4]), side="right"))
                acc[(kind, case, r[0])][k] += (r[2], base, 1)
    out = []
    for (kind, case, name), a in sorted(acc.items()):
        out.append([kind, case, name] + [f"{y / x:.2f} ({int(n)})" if n else "-" for y, x, n in a])
    return out


def volunteer_factors(listed: list, work: dict[str, np.ndarray]) -> dict[str, tuple[int, float, float]]:
    """Per type: (volunteer batches the bundle's table covers, their CPU-s counted over the
    bundle's work for the same batches, the 95 % half-width of that ratio). The ratio
    estimator sum(y) / sum(x) with its delta-method standard error
    sqrt(sum((y - R x)^2) / (n (n - 1))) / mean(x) and a normal quantile; nan below two
    batches, where no spread is measured."""
    groups = defaultdict(list)
    for r in listed:
        if (base := _base(work, r[0], int(r[1]))) is not None and base > 0:
            groups[r[0]].append((float(r[2]), base))
    out = {}
    for name, pairs in sorted(groups.items()):
        y, x = np.array(pairs).T
        ratio = y.sum() / x.sum()
        n = len(y)
        half = (1.96 * np.sqrt(((y - ratio * x) ** 2).sum() / (n * (n - 1))) / x.mean()) if n > 1 else float("nan")
        out[name] = (n, float(ratio), float(half))
    return out


def _ratios(stores_batches: list[dict], bundle_dir, kind: str) -> tuple[list, dict, dict]:
    """The batches `kind` ("server" or "volunteers") listed in `stores_batches`, their ratio
    estimates per type over the bundle's table (`volunteer_factors`), and the bundle's data
    to write a fitted copy from."""
    import yaml

    from gmm_volunteer.io.bundlefiles import bundle_file

    listed = [r for b in stores_batches for r in dict(_by_kind(b))[kind]]
    data = yaml.safe_load(bundle_file(bundle_dir).read_text())
    return listed, volunteer_factors(listed, bundle_work(bundle_dir)), data


def fit_volunteer(stores_batches: list[dict], bundle_dir, out_dir):
    """Write a copy of the bundle at `bundle_dir` to `out_dir` with each type's
    `work.volunteer_factor` measured from the volunteer batches of `stores_batches` (the
    stores' `batches` lists); returns (the path, {type: (batches, factor, half-width)},
    the types no volunteer executed)."""
    from gmm_volunteer.io.bundlefiles import write_bundle

    listed, factors, data = _ratios(stores_batches, bundle_dir, "volunteers")
    missing = []
    for s in data["subtask_types"]:
        if s["name"] in factors:
            s["work"]["volunteer_factor"] = round(factors[s["name"]][1], 4)
        else:
            missing.append(s["name"])
    measured = ", ".join(f"{k} {f:.3g} ({n} batches)" for k, (n, f, _) in factors.items())
    data["provenance"] = (f"{data.get('provenance', '')} Volunteer factors (docs/model.md D29) measured by "
                          f"gmm_volunteer.testbed.batches from {len(listed)} volunteer batches of "
                          f"{len(stores_batches)} testbed store(s): {measured}"
                          + (f"; no volunteer batch of {', '.join(missing)} (factor as in {bundle_dir})" if missing else "")
                          + f"; everything else as {bundle_dir}.").strip()
    return write_bundle(data, out_dir), factors, missing


def fit_server(stores_batches: list[dict], bundle_dir, out_dir):
    """Write a copy of the bundle at `bundle_dir` to `out_dir` whose work table is what the
    server's batches in `stores_batches` cost: per type, the table times the ratio
    estimate (`volunteer_factors`' estimator, over the server's batches) of their CPU-s
    over the table's work for the same batches. The table is the server's work (D29), so
    this calibrates it; each volunteer factor (a number or a table per CPU share) is divided
    by the same ratio, so that a volunteer's work stays as the bundle had it. Returns (the
    path, {type: (batches, ratio, half-width)}, the types the server did not execute)."""
    from gmm_volunteer.io.bundlefiles import write_bundle

    listed, ratios, data = _ratios(stores_batches, bundle_dir, "server")
    missing = []
    for s in data["subtask_types"]:
        if s["name"] not in ratios:
            missing.append(s["name"])
            continue
        r = ratios[s["name"]][1]
        w = s["work"]
        w["mean_cpu_s"] = [round(x * r, 6) for x in w["mean_cpu_s"]]
        g = w.get("volunteer_factor", 1.0)
        w["volunteer_factor"] = ({c: round(f / r, 4) for c, f in g.items()} if isinstance(g, dict)
                                 else round(g / r, 4))
    measured = ", ".join(f"{k} {f:.3g} ({n} batches)" for k, (n, f, _) in ratios.items())
    data["provenance"] = (f"{data.get('provenance', '')} Work table scaled to the server's batches by "
                          f"gmm_volunteer.testbed.batches --fit-server from {len(listed)} server batches of "
                          f"{len(stores_batches)} testbed store(s): {measured}, the volunteer factors divided "
                          f"by the same ratios"
                          + (f"; no server batch of {', '.join(missing)} (as in {bundle_dir})" if missing else "")
                          + f"; everything else as {bundle_dir}.").strip()
    return write_bundle(data, out_dir), ratios, missing


def bundle_work(bundle_dir) -> dict[str, np.ndarray]:
    """Each type's mean work by batch size as the simulator reads it (`model.params.work_table`:
    the bundle's sizes, interpolated between them)."""
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.params import work_table

    b = load_bundle(bundle_dir)
    return {s.name: work_table(s.work.batch_sizes, s.work.mean_cpu_s) for s in b.subtask_types}


def bundle_factors(bundle_dir, cpu_pct: float) -> dict[str, float]:
    """Each type's volunteer factor on users whose CPU maximum is `cpu_pct` % of a core
    (docs/model.md D29; 1 where the bundle gives none)."""
    from gmm_volunteer.io.bundlefiles import load_bundle

    return {s.name: s.work.volunteer_factor_at(cpu_pct) for s in load_bundle(bundle_dir).subtask_types}


def users_cpu(attrs: dict) -> float:
    """The users' CPU maximum of the run a store holds, % of a core (base_profile.cpu x
    users.capacity of its resolved config): where a bundle's factor is read per CPU share."""
    import yaml

    cfg = yaml.safe_load(attrs["config"])
    return float(cfg["base_profile"]["cpu"]) * float(cfg["users"]["capacity"])


def _store_batches(store: str) -> tuple[dict, dict]:
    """The store's attributes and its batch lists; SystemExit(2) naming what is wrong."""
    from gmm_volunteer.io.results import IncompleteResultError, open_result

    try:
        attrs = open_result(store).attrs
    except (FileNotFoundError, IncompleteResultError, ValueError, OSError) as err:
        print(f"batches: {store}: {err}", file=sys.stderr)
        raise SystemExit(2)
    account = json.loads(attrs.get("testbed", "{}"))
    if "batches" not in account:
        print(f"batches: {store}: no batch list in its `testbed` attribute (not a testbed store, or one "
              f"made before 0.8.3)", file=sys.stderr)
        raise SystemExit(2)
    return attrs, account["batches"]


def _fit(args, listed: list[dict]) -> int:
    from gmm_volunteer.model.bundle import BundleError

    server = args.fit_server is not None
    try:
        path, factors, missing = (fit_server(listed, args.model, args.fit_server) if server
                                  else fit_volunteer(listed, args.model, args.fit_volunteer))
    except (BundleError, FileNotFoundError, OSError) as err:
        print(f"batches: {err}", file=sys.stderr)
        return 2
    print("| type | server batches | work over the table | 95 % half-width |" if server
          else "| type | volunteer batches | volunteer factor | 95 % half-width |")
    print("|---|---|---|---|")
    for name, (n, f, half) in factors.items():
        print(f"| {name} | {n} | {f:.3f} | {'-' if np.isnan(half) else f'{half:.3f}'} |")
    for name in missing:
        print(f"batches: no server batch of {name}: its work is the bundle's" if server
              else f"batches: no volunteer batch of {name}: its factor is the bundle's", file=sys.stderr)
    print(path)
    return 0


def _idle_table(args, read: list, argv) -> int:
    import shlex
    from pathlib import Path

    from gmm_volunteer.io import resultfile
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import BundleError, bundle_digest

    for store, _, batches in read:
        listed = [r for _, part in _by_kind(batches) for r in part]
        if any(len(r) < 6 for r in listed):
            print(f"batches: {store}: its batches have no start time (a store made before 0.8.4)", file=sys.stderr)
            return 2
    try:
        work, digest = bundle_work(args.model), bundle_digest(load_bundle(args.model))
        # the stores grouped by the factors their users' CPU share reads (one group unless
        # the bundle gives its factors per share and the stores' shares differ)
        groups = defaultdict(list)
        for store, attrs, b in read:
            factors = bundle_factors(args.model, users_cpu(attrs))
            groups[tuple(sorted(factors.items()))].append((Path(store).name.rsplit("-seed", 1)[0], b))
    except (BundleError, FileNotFoundError, OSError) as err:
        print(f"batches: {args.model}: {err}", file=sys.stderr)
        return 2
    head = ["node", "case", "type"] + [_idle_label(k) for k in range(len(IDLE_EDGES) + 1)]
    table = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                      + ["| " + " | ".join(r) + " |" for factors, cases in groups.items()
                         for r in by_idle(cases, work, dict(factors))])
    print(table)
    if args.result_file:
        attrs = read[0][1]
        resultfile.write(
            args.result_file, table + "\n",
            command="python -m gmm_volunteer.testbed.batches " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
            bundles={resultfile.bundle_name(args.model): digest}, gmmv_version=attrs.get("gmmv_version", "?"),
            trajectory_version=attrs.get("trajectory_version", "?"),
            title="What a batch costs on a testbed node by the idle time before it (docs/validation.md section 6)",
            note=f"testbed stores: {', '.join(Path(s).name for s, _, _ in read)}. Cells: the batches' CPU-s counted "
                 f"over the bundle's work for the same batches (batches); idle time from the node's previous batch's "
                 f"end to the batch's start; a node's first batch is left out.")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.batches", description=__doc__.split("\n\n")[0])
    p.add_argument("stores", nargs="+")
    p.add_argument("--model", default=None, metavar="BUNDLE_DIR", help="the bundle to set the batches beside")
    p.add_argument("--fit-volunteer", default=None, metavar="OUT_DIR",
                   help="write a copy of --model with each type's volunteer factor measured from the stores")
    p.add_argument("--fit-server", default=None, metavar="OUT_DIR",
                   help="write a copy of --model with its work table scaled to the stores' server batches "
                        "(and its volunteer factors divided by the same ratios)")
    p.add_argument("--by-idle", action="store_true",
                   help="one table of every store's batches against --model by the idle time before them (0.8.4 on)")
    p.add_argument("--result-file", default=None, metavar="PATH", help="with --by-idle: also write it as a result file")
    p.add_argument("--speed-reference", default=None, metavar="BUNDLE_DIR",
                   help="read each store's batches at the speed of the machine BUNDLE_DIR was measured on: their "
                        "CPU-s over the store's speed (its <store>.speed.txt over BUNDLE_DIR's work; docs/model.md D30)")
    args = p.parse_args(argv)
    from gmm_volunteer.model.bundle import BundleError

    if (args.fit_volunteer is not None or args.fit_server is not None or args.by_idle) and args.model is None:
        print("batches: --fit-volunteer, --fit-server and --by-idle need --model BUNDLE_DIR (the bundle whose "
              "work they read)", file=sys.stderr)
        return 2
    if args.fit_volunteer is not None and args.fit_server is not None:
        print("batches: --fit-volunteer and --fit-server write one bundle each; run them one after the other",
              file=sys.stderr)
        return 2
    try:
        read = [(store, *_store_batches(store)) for store in args.stores]
    except SystemExit as stop:
        return int(stop.code)
    if args.speed_reference is not None:
        from pathlib import Path

        from gmm_volunteer.testbed import speed

        try:
            speeds = speed.store_speeds([Path(store) for store in args.stores], bundle_work(args.speed_reference))
        except (speed.SpeedError, BundleError, OSError) as err:
            print(f"batches: --speed-reference: {err}", file=sys.stderr)
            return 2
        read = [(store, attrs, at_reference_speed(b, r)) for (store, attrs, b), r in zip(read, speeds)]
    if args.fit_volunteer is not None or args.fit_server is not None:
        return _fit(args, [b for _, _, b in read])
    if args.by_idle:
        return _idle_table(args, read, argv)
    for store, attrs, batches in read:
        model = args.model or attrs.get("model_bundle")
        try:
            work, factors = bundle_work(model), bundle_factors(model, users_cpu(attrs))
        except (BundleError, FileNotFoundError, OSError) as err:
            print(f"batches: {model}: {err}", file=sys.stderr)
            return 2
        print(f"{store} (gmmv {attrs.get('gmmv_version', '?')}) against {model}\n")
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for r in rows(batches, work, factors):
            print("| " + " | ".join(r) + " |")
        print()
        for kind, (n, cpu, base) in totals(batches, work, factors).items():
            if n:
                print(f"{kind}: {n} batches, {cpu:.2f} CPU-s counted against the bundle's {base:.2f} "
                      f"for the same batches ({cpu / base:.2f} times)")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
