"""The trajectory version: which simulator made a trajectory (docs/results/README.md).

The package version changes with every release, most of which leave every run's numbers
as they were (new commands, docs, speed). `TRAJECTORY_VERSION` changes only when a change
alters trajectories: the same config, seed and bundle give another result store (the
engine, a policy, a sampler, a default of the config). It is the package version of the
release that made that change, so it reads as "trajectories as of version X".

Result stores record it (`trajectory_version` in their attributes), and so do the
committed result tables under docs/results/; `make test` fails when a committed table
claims to describe the current model but was made by another trajectory version.

Bump it in the same commit as the change that alters trajectories, set to the new
package version (pyproject.toml and `gmm_volunteer.__version__`).

A change that alters only the runs of some policies (a router's decisions, what it
records) sets those policies' entries of `POLICY_TRAJECTORY_VERSIONS` instead, so that
only the result tables that ran them become stale: a policy's trajectory version is its
entry, else `TRAJECTORY_VERSION`. Stores record the versions of the policies they ran
(`policy_trajectory_versions`), result files list them (`policies:`), and the check
compares each with the policy's version now (docs/results/README.md).
"""

TRAJECTORY_VERSION = "0.6.0"

# Policy kind -> policy name -> the package version since which its runs are as now, for
# the policies changed after TRAJECTORY_VERSION (by kind: `la_imr` names a scheduler and an
# autoscaler). Issue 34: asrb (seed 000's tie, label, fallback and
# decision-round rules), jsq_s ((queue + 1) / capacity with transfers and random ties),
# oracle (the server's batches in its true delay), queue_aware and model_only (C_s^2 of the
# mix a tier serves); the other tier routers decide as before but log the changed
# estimates and the delay they decide by (jsq, random, edge_first, queue_only, la_imr).
# Issue 51: jsq (the new subtask and the transfers counted, in seconds; random ties);
# random and la_imr log each decision's subtask type and tier rate (la_imr decides as
# before without `tier_laws`); the capacity_rule and la_imr autoscalers count the load
# routed to the server (D41; the same units as before when every subtask runs there,
# as under centralized).
POLICY_TRAJECTORY_VERSIONS = {
    "scheduler": {
        "asrb": "0.8.0", "jsq_s": "0.8.0", "oracle": "0.8.0", "queue_aware": "0.8.0", "model_only": "0.8.0",
        "jsq": "0.10.0", "edge_first": "0.8.0", "queue_only": "0.8.0",
        "random": "0.11.0", "la_imr": "0.11.0",
    },
    "autoscaler": {"capacity_rule": "0.11.0", "la_imr": "0.11.0"},
}
# the run attributes that name a policy (a config's policy keys)
POLICY_KINDS = ("scheduler", "executor", "autoscaler")


def policy_key(kind: str, name: str) -> str:
    """How stores and result files name a policy: "kind:name", e.g. "scheduler:asrb"."""
    return f"{kind}:{name}"


def policy_trajectory_version(key: str) -> str:
    """The trajectory version of the policy `key` ("kind:name", `policy_key`)."""
    kind, _, name = key.partition(":")
    return POLICY_TRAJECTORY_VERSIONS.get(kind, {}).get(name, TRAJECTORY_VERSION)


def run_policy_versions(attrs) -> dict[str, str]:
    """"kind:name" -> trajectory version of the policies of a run store's attributes: what
    it recorded, or, for a store made before policies had versions of their own, the
    store's `trajectory_version` for each policy it names."""
    recorded = attrs.get("policy_trajectory_versions")
    if isinstance(recorded, str):  # stores keep mappings as JSON text (io.results._plain)
        import json

        try:
            recorded = json.loads(recorded)
        except ValueError:
            recorded = None
    if isinstance(recorded, dict) and recorded:
        out = {}
        for k, v in recorded.items():
            if ":" not in str(k):  # a bare name, as stores of the change's first commits wrote
                k = next((policy_key(kind, str(k)) for kind in POLICY_KINDS if attrs.get(kind) == k), k)
            out[str(k)] = str(v)
        return out
    version = str(attrs.get("trajectory_version") or "unknown")
    return {policy_key(k, str(attrs[k])): version for k in POLICY_KINDS if attrs.get(k)}


def merge_policy_versions(runs) -> dict[str, str]:
    """One mapping for several runs' `run_policy_versions`; a policy the runs recorded
    with different versions gets "mixed (a, b)", which is no policy's version."""
    seen: dict[str, set] = {}
    for versions in runs:
        for name, v in versions.items():
            seen.setdefault(name, set()).add(v)
    return {name: (next(iter(vs)) if len(vs) == 1 else f"mixed ({', '.join(sorted(vs))})")
            for name, vs in sorted(seen.items())}
