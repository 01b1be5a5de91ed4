"""The input contract under generated inputs, with real runs (docs/usage.md, "Errors"):
for configs, bundle fields, policy options and CLI arguments, `gmmv` either exits 0 with
finite results, or exits 2 with a message, no traceback and nothing written.

tests/test_fuzz_inputs.py stops every run before it simulates; here the small runs go to
the end, so that values which pass validation are seen to give finite results. Examples
are few and derandomized (a failure reproduces), each run is tiny: the whole file takes
well under a minute once the kernels are compiled.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gmm_volunteer.cli.commands import main  # noqa: E402
from gmm_volunteer.testing.synthetic import synthetic_bundle  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=25,
                suppress_health_check=list(HealthCheck))
FINITE_SERIES = ("server_allocation", "server_consumption", "user_consumption", "completed_work",
                 "online_users", "active_requests")
NUMBERS = st.one_of(
    st.sampled_from([0, 1, -1, 2, 10, 0.5, 1e-300, 1e6, 1e12, 1e13, 1e300, -1e300, 2**31, 2**53,
                     2**63, -(2**63) - 1, 10**30, math.nan, math.inf, -math.inf]),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
)
BASE = {"seed": 3, "steps": 30, "users": {"count": 12}, "server": {"capacity": 10},
        "requests": {"think_time": {"dist": "exponential", "mean": 4.0}}}


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    from gmm_volunteer.io.bundlefiles import write_bundle

    root = tmp_path_factory.mktemp("contract")
    write_bundle(synthetic_bundle(), root / "bundle")
    return root


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _cli(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    return code, err.getvalue()


def _holds(argv, root: Path, out: Path | None) -> int:
    """Run `argv` and check the contract; returns the exit code."""
    before = _files(root)
    code, err = _cli(argv)
    assert "Traceback" not in err, err
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert "error" in err and err.strip(), err
        assert _files(root) == before, "something was written"
    elif out is not None:
        from gmm_volunteer.io.results import open_result

        ds = open_result(out)
        for name in FINITE_SERIES:
            assert np.all(np.isfinite(ds[name].values)), (argv, name)
        if "dedicated_capacity" in ds:
            assert np.all(np.isfinite(ds["dedicated_capacity"].values)), argv
        import shutil

        shutil.rmtree(out)
    return code


def _config(root: Path, data: dict) -> Path:
    path = root / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@FUZZ
@given(key=st.sampled_from(["users.count", "users.capacity", "server.capacity", "steps",
                            "requests.think_time.mean", "availability.online.mean",
                            "base_profile.cpu", "base_profile.memory", "allocation.burn_in"]),
       value=NUMBERS)
def test_fuzz_contract_config_numbers(place, key, value):
    data = copy.deepcopy(BASE)
    data["model"] = str(place / "bundle")
    node = data
    *parents, last = key.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    if key == "steps" and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value > 2000:
        return  # valid but long: the contract for large steps is the memory preflight's
    if key == "users.count" and isinstance(value, (int, float)) and math.isfinite(value) and value > 2000:
        return
    cfg = _config(place, data)
    out = place / "out.zarr"
    _holds(["run", str(cfg), "-o", str(out), "-q"], place, out)
    cfg.unlink()


POLICY_OPTIONS = [
    ("scheduler", "uniform", ["rejection_tries", "max_downloads_per_node"]),
    ("scheduler", "queue_aware", ["window_s", "decision_log", "penalty", "utilization_threshold"]),
    ("scheduler", "weighted", ["server_weight", "wait_weight"]),
    ("autoscaler", "reactive", ["unit", "min_units", "max_units", "period", "cooldown",
                                "provisioning_delay"]),
    ("autoscaler", "la_imr", ["gamma", "alpha", "budget"]),
]


@FUZZ
@given(which=st.sampled_from([(k, n, o) for k, n, opts in POLICY_OPTIONS for o in opts]), value=NUMBERS)
def test_fuzz_contract_policy_options(place, which, value):
    kind, name, option = which
    data = copy.deepcopy(BASE)
    data.update({"model": str(place / "bundle"), kind: name, f"{kind}_options": {option: value}})
    cfg = _config(place, data)
    out = place / "out.zarr"
    _holds(["run", str(cfg), "-o", str(out), "-q"], place, out)
    cfg.unlink()


def _numeric_leaves(d, prefix=()):
    if isinstance(d, dict):
        for k, v in d.items():
            if k not in ("aic", "aic_grid", "format_version"):
                yield from _numeric_leaves(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _numeric_leaves(v, prefix + (i,))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix


LEAVES = list(_numeric_leaves(synthetic_bundle()))


@FUZZ
@given(leaf=st.sampled_from(LEAVES), value=NUMBERS)
def test_fuzz_contract_bundle_numbers(place, leaf, value):
    b = synthetic_bundle()
    node = b
    for k in leaf[:-1]:
        node = node[k]
    node[leaf[-1]] = value
    d = place / "fuzzed"
    d.mkdir(exist_ok=True)
    try:
        text = yaml.safe_dump(b)
    except (OverflowError, ValueError):
        return
    (d / "bundle.yaml").write_text(text)
    data = copy.deepcopy(BASE)
    data["model"] = str(d)
    cfg = _config(place, data)
    out = place / "out.zarr"
    _holds(["run", str(cfg), "-o", str(out), "-q"], place, out)
    cfg.unlink()


CLI_CASES = {
    "capacity": (["capacity", "{cfg}", "--p99", "10s"],
                 ["--tol", "--lo", "--hi", "--quantile", "--confidence", "--seeds", "--workers"]),
    "tune": (["tune", "{cfg}", "--method", "random"], ["--bound", "--trials", "--warmup", "--seed"]),
}


@FUZZ
@given(case=st.sampled_from([(c, o) for c, (_, opts) in CLI_CASES.items() for o in opts]),
       value=st.one_of(NUMBERS.map(repr), st.sampled_from(["nan", "-inf", "1e400", "", "x", "0x10"])))
def test_fuzz_contract_cli_numbers(place, monkeypatch, case, value):
    import gmm_volunteer.experiments.capacity as capacity
    import gmm_volunteer.optimisation.search as search

    def stop(*a, **k):  # the arguments passed every check: the work was about to start
        raise KeyboardInterrupt

    monkeypatch.setattr(capacity, "find_capacity", stop)
    monkeypatch.setattr(search, "tune", stop)
    command, option = case
    data = copy.deepcopy(BASE)
    data.update({"model": str(place / "bundle"), "steps": 600, "scheduler": "weighted"})
    cfg = _config(place, data)
    argv = [a.replace("{cfg}", str(cfg)) for a in CLI_CASES[command][0]] + [f"{option}={value}"]
    before = _files(place)
    code, err = _cli(argv)
    assert "Traceback" not in err, err
    assert code in (2, 130), (argv, code, err)  # 130: accepted, interrupted at the work
    if code == 2:
        assert err.strip(), argv
    assert _files(place) == before
    cfg.unlink()
