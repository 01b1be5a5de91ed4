"""The volunteer factor as a function of the users' CPU share (docs/model.md D29).

A testbed measures each type's volunteer factor g from the batches its volunteers list
(`batches --fit-volunteer`), at the CPU quota of the case it ran: the calibration case's.
A case whose devices have a smaller quota pays more per batch, and most of that is the
quota itself (docs/validation.md section 6, "A batch's cost under a quota, measured
alone"). This measures it without a run: each batch timed cold, alone in a device's
limits (`calibrate --cold --testbed CONFIG --node user`), in the reference config's device
and in each other config's, and writes the bundle with each type's factor as a table over
the users' CPU maximum:

    factor(reference's CPU) = g,  factor(config's CPU) = g x cost there / cost at the reference,

where a type's cost is its CPU-seconds summed over the measured batch sizes. Only the
types a config's requests use are measured in its device (one process holds every
measured type's session, which a small device may not hold for all). The simulator reads
the table at its users' CPU maximum (`Work.volunteer_factor_at`).

    python -m gmm_volunteer.testbed.quota BUNDLE_DIR OUT_DIR --reference CONFIG --at CONFIG [--at CONFIG ...]
        [--max-batch 2] [--repetitions 3]

Needs root (cgroups, as the testbed). BUNDLE_DIR's factors are read at the reference's
CPU; a type not measured at the reference keeps them as they are, and one not measured at
a config has no entry at its CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


class QuotaError(ValueError):
    """A config or bundle this cannot measure with (checked before any measurement)."""


def used_types(bundle, cfg) -> list[str]:
    """The subtask types the requests of `cfg` (a RunConfig) can use in `bundle`, in the
    bundle's order."""
    probs = list(cfg.requests.type_probabilities)
    if len(probs) != len(bundle.task_types):
        raise QuotaError(f"requests.type_probabilities has {len(probs)} entries but the bundle defines "
                         f"{len(bundle.task_types)} task types")
    used = {s for t, p in zip(bundle.task_types, probs) if p > 0 for s in t.subtasks}
    return [s.name for s in bundle.subtask_types if s.name in used]


def cost_ratios(reference: dict, at: dict) -> dict[str, float]:
    """Per type measured in both: its CPU-s summed over the batch sizes measured in both,
    at a config over at the reference ({type: {batch size: CPU-s}} each)."""
    out = {}
    for name, per in at.items():
        ref = reference.get(name)
        sizes = sorted(set(per) & set(ref or {}))
        if sizes:
            out[name] = sum(per[n] for n in sizes) / sum(ref[n] for n in sizes)
    return out


def factor_tables(factors: dict[str, float], ref_cpu: float, ratios: dict[float, dict[str, float]]) -> dict:
    """{type: {CPU %: factor}}: g at the reference's CPU, g x ratio at each other CPU where
    the type was measured; a type no other CPU measured has no table."""
    out = {}
    for name, g in factors.items():
        table = {cpu: round(g * r[name], 4) for cpu, r in ratios.items() if name in r}
        if table:
            out[name] = {ref_cpu: round(g, 4), **table}
    return out


def _plan(bundle_dir, out_dir, reference: str, at: list[str]):
    """Each config's user-device limits and the types it uses: [(limits, types)], the
    reference first; QuotaError naming what is wrong before anything is measured."""
    from gmm_volunteer.io.bundlefiles import check_bundle_destination, load_bundle
    from gmm_volunteer.model.bundle import BundleError
    from gmm_volunteer.testbed.config import load_testbed
    from gmm_volunteer.testbed.limits import LimitsError, node_limits

    try:
        bundle = load_bundle(bundle_dir)
    except (BundleError, FileNotFoundError, OSError) as err:
        raise QuotaError(f"{bundle_dir}: {err}") from None
    try:
        check_bundle_destination(out_dir)
    except BundleError as err:
        raise QuotaError(str(err)) from None
    plan = []
    for config in [reference, *at]:
        try:
            limits = node_limits(config, "user")
            cfg, _ = load_testbed(config)
        except LimitsError as err:
            raise QuotaError(str(err)) from None
        if limits.cpu_pct in [lim.cpu_pct for lim, _ in plan]:
            raise QuotaError(f"--at {config}: its users' CPU maximum ({limits.cpu_pct:g} %) is that of "
                             f"another config given; each share once")
        try:
            plan.append((limits, used_types(bundle, cfg)))
        except QuotaError as err:
            raise QuotaError(f"{config}: {err}") from None
    return bundle, plan


def quota(bundle_dir, out_dir, reference: str, at: list[str], max_batch: int = 2, repetitions: int = 3):
    """Measure and write the bundle with per-share factor tables; returns (its path, the
    tables, {config: {type: why not measured}})."""
    from gmm_volunteer.io.bundlefiles import bundle_file, write_bundle
    from gmm_volunteer.testbed.calibrate import _measure_limited

    bundle, plan = _plan(bundle_dir, out_dir, reference, at)
    sizes = list(range(1, max_batch + 1))
    measured, skipped = [], {}
    for limits, types in plan:
        m, why = _measure_limited(limits, types, sizes, repetitions, cold=True)
        for name, per in m.items():
            for n, cpu in per.items():
                print(f"{Path(limits.config).name}\t{limits.cpu_pct:g} %\t{name}\t{n}\t{cpu:.4f}", file=sys.stderr)
        measured.append(m)
        skipped[limits.config] = why
    ref_cpu = plan[0][0].cpu_pct
    factors = {s.name: s.work.volunteer_factor_at(ref_cpu) for s in bundle.subtask_types if s.name in measured[0]}
    ratios = {lim.cpu_pct: cost_ratios(measured[0], m) for (lim, _), m in zip(plan[1:], measured[1:])}
    tables = factor_tables(factors, ref_cpu, ratios)
    data = yaml.safe_load(bundle_file(bundle_dir).read_text())
    for s in data["subtask_types"]:
        if s["name"] in tables:
            s["work"]["volunteer_factor"] = tables[s["name"]]
    shares = ", ".join(f"{Path(lim.config).name} {lim.cpu_pct:g} %" for lim, _ in plan[1:])
    data["provenance"] = (f"{data.get('provenance', '')} Volunteer factors per CPU share (docs/model.md D29) by "
                          f"gmm_volunteer.testbed.quota: each type's factor at {Path(reference).name}'s "
                          f"{ref_cpu:g} % times its cold cost alone in a device of {shares} over that in "
                          f"{Path(reference).name}'s (batch sizes 1-{max_batch}, {repetitions} repetitions)"
                          + "".join(f"; not measured in {Path(c).name}: {', '.join(w)}" for c, w in skipped.items() if w)
                          + f"; everything else as {bundle_dir}.").strip()
    return write_bundle(data, out_dir), tables, skipped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.quota", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--reference", metavar="CONFIG", required=True,
                   help="the testbed config whose runs measured the bundle's volunteer factors")
    p.add_argument("--at", metavar="CONFIG", action="append", required=True,
                   help="a testbed config whose users' CPU share gets its own factor (repeatable)")
    p.add_argument("--max-batch", type=int, default=2)
    p.add_argument("--repetitions", type=int, default=3)
    args = p.parse_args(argv)
    if args.max_batch < 1 or args.repetitions < 1:
        print("quota: --max-batch and --repetitions must be at least 1", file=sys.stderr)
        return 2
    from gmm_volunteer.testbed.isolation import IsolationError

    try:
        path, tables, _ = quota(args.bundle, args.out, args.reference, args.at, args.max_batch, args.repetitions)
    except QuotaError as err:
        print(f"quota: {err}", file=sys.stderr)
        return 2
    except IsolationError as err:
        print(f"quota: {err}", file=sys.stderr)
        return 1
    cpus = sorted({c for table in tables.values() for c in table}, reverse=True)
    print("| type | " + " | ".join(f"factor at {c:g} % CPU" for c in cpus) + " |")
    print("|" + "---|" * (len(cpus) + 1))
    for name, table in tables.items():
        print(f"| {name} | " + " | ".join(f"{table[c]:.3g}" if c in table else "-" for c in cpus) + " |")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
