"""Fuzzing the input contract (docs/usage.md, "Errors"): corrupted configs, overrides,
model bundles and traces either pass validation or are refused with exit 2 and a message
naming the file and the key; never a traceback, never anything written.

`gmmv run` is driven in-process with the engine replaced by one that stops at once
(KeyboardInterrupt, exit 130): exit 130 means "the input passed every check". Seeds are
fixed (derandomized), so a failure reproduces.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import sys
import types
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gmm_volunteer.cli.commands import main  # noqa: E402
from gmm_volunteer.run.config import schema_keys  # noqa: E402
from gmm_volunteer.testing.synthetic import synthetic_bundle  # noqa: E402

from engine_support import bundle_dir  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
PASSED = 130  # the stand-in engine interrupts the run: every check passed

BASE = {"seed": 3, "steps": 40, "users": {"count": 20}, "server": {"capacity": 10}}

# Values that are wrong for most keys, and a few that are right for some.
BAD_VALUES = st.one_of(
    st.sampled_from([None, True, "", "x", "1e3", [], {}, [1, 2], {"dist": "never"}, {"a": 1},
                     -1, 0, 0.0, 1e-320, 1e308, -1e308, 10**30, -(10**30), 2**63,
                     math.nan, math.inf, -math.inf, "nan", "\x00", "~nosuchuser/x", [[[[[]]]]]]),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    bundle = bundle_dir(root)
    return root, bundle


@contextlib.contextmanager
def stopping_engine():
    module = types.ModuleType("gmm_volunteer.run.engine")

    def simulate(cfg, progress=True, bundle=None):
        raise KeyboardInterrupt

    module.simulate = simulate
    saved = sys.modules.get("gmm_volunteer.run.engine")
    sys.modules["gmm_volunteer.run.engine"] = module
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop("gmm_volunteer.run.engine", None)
        else:
            sys.modules["gmm_volunteer.run.engine"] = saved


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def run_cli(argv, root: Path) -> tuple[int, str]:
    before = snapshot(root)
    err = io.StringIO()
    with stopping_engine(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    text = err.getvalue()
    assert code in (PASSED, 2), (argv, code, text)
    assert "Traceback" not in text, text
    assert snapshot(root) == before, "something was written"
    return code, text


def yaml_text(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


# -- configs -----------------------------------------------------------------------------

@FUZZ
@given(key=st.sampled_from(schema_keys()), value=BAD_VALUES)
def test_fuzz_config_file(place, key, value):
    root, bundle = place
    data = copy.deepcopy(BASE)
    data["model"] = str(bundle)
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    path = root / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = run_cli(["run", str(path), "-o", str(root / "out.zarr")], root)
    if code == 2:
        assert f"{path}:" in err and parts[0] in err, (key, value, err)
    path.unlink()


@FUZZ
@given(key=st.sampled_from(schema_keys() + ["users.cuont", "availability.online.scale",
                                            "scheduler_options.rejection_tries", "x.y", "a..b", ""]),
       value=st.one_of(BAD_VALUES.map(yaml_text), st.text(max_size=12)))
def test_fuzz_overrides(place, key, value):
    root, bundle = place
    path = root / "ok.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump({**BASE, "model": str(bundle)}))
    code, err = run_cli(["run", str(path), "-o", str(root / "out.zarr"), "--set", f"{key}={value}"], root)
    if code == 2:
        assert str(path) in err or "--set" in err, err
        if key and ".." not in key:
            assert key.split(".")[0] in err, (key, value, err)
        if key == "users.cuont":  # a mistyped key, whatever the value: the close name is offered
            assert "users.cuont: unknown config key; did you mean 'count'?" in err, err


@FUZZ
@given(data=st.binary(max_size=200))
def test_fuzz_config_bytes(place, data):
    root, _ = place
    path = root / "raw.yaml"
    path.write_bytes(data)
    code, err = run_cli(["run", str(path), "-o", str(root / "out.zarr")], root)
    assert code == 2 and f"{path}:" in err  # no random bytes make a valid config
    path.unlink()


# -- model bundles ---------------------------------------------------------------------------

def _leaves(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, prefix + (k,))
    elif isinstance(node, list) and node:
        for i, v in enumerate(node):
            yield from _leaves(v, prefix + (i,))
    else:
        yield prefix


SYNTHETIC = synthetic_bundle()
LEAVES = [p for p in _leaves(SYNTHETIC) if p]


@FUZZ
@given(where=st.sampled_from(LEAVES), value=BAD_VALUES, drop=st.booleans())
def test_fuzz_bundle(place, where, value, drop):
    root, _ = place
    model = root / "fuzzed_bundle"
    model.mkdir(exist_ok=True)
    data = copy.deepcopy(SYNTHETIC)
    node = data
    for p in where[:-1]:
        node = node[p]
    if drop and isinstance(node, dict):
        del node[where[-1]]
    else:
        node[where[-1]] = value
    (model / "bundle.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    path = root / "fb.yaml"
    path.write_text(yaml.safe_dump({**BASE, "model": str(model)}))
    code, err = run_cli(["run", str(path), "-o", str(root / "out.zarr")], root)
    if code == 2:
        assert f"{path}: model: {model / 'bundle.yaml'}:" in err, (where, value, err)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=4000), junk=st.binary(min_size=1, max_size=6))
def test_fuzz_bundle_bytes(place, cut, junk):
    root, _ = place
    model = root / "raw_bundle"
    model.mkdir(exist_ok=True)
    text = yaml.safe_dump(SYNTHETIC, sort_keys=False).encode()
    cut = cut % len(text)
    (model / "bundle.yaml").write_bytes(text[:cut] + junk + text[cut + len(junk):])
    path = root / "rb.yaml"
    path.write_text(yaml.safe_dump({**BASE, "model": str(model)}))
    code, err = run_cli(["run", str(path), "-o", str(root / "out.zarr")], root)
    if code == 2:
        assert "bundle.yaml" in err, err


# -- traces ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_traces(tmp_path_factory):
    from gmm_volunteer.fitting.synthetic import SyntheticSpec, write_synthetic_traces

    root = tmp_path_factory.mktemp("fuzz_traces") / "traces"
    write_synthetic_traces(root, SyntheticSpec(duration_s=600, n_types=2, batch_sizes=(1, 5), reps=2,
                                               download_reps=1))
    return root


TABLES = ["resources/resources.csv.gz", "subtasks/runs.csv.gz", "subtasks/consumption.csv.gz",
          "downloads/downloads.csv.gz"]
JSONS = ["resources/machine.json", "subtasks/catalog.json", "downloads/levels.json", "downloads/meta.json"]


@FUZZ
@given(table=st.sampled_from(TABLES), row=st.integers(0, 10**6), col=st.integers(0, 50),
       value=st.sampled_from(["", "x", "nan", "-1", "1e308", "0", "inf", "1", "-0.0"]),
       how=st.sampled_from(["set", "shuffle", "duplicate", "drop_column", "truncate", "constant"]))
def test_fuzz_trace_tables(good_traces, tmp_path_factory, table, row, col, value, how):
    import shutil

    import pandas as pd

    from gmm_volunteer.fitting.traces import TraceError, load_traces

    root = tmp_path_factory.mktemp("t") / "traces"
    shutil.copytree(good_traces, root)
    df = pd.read_csv(root / table)
    c = df.columns[col % len(df.columns)]
    r = row % len(df)
    if how == "set":
        df[c] = df[c].astype(object)
        df.loc[r, c] = value
    elif how == "shuffle":
        df = df.sample(frac=1.0, random_state=row % 1000)
    elif how == "duplicate":
        df = pd.concat([df, df.iloc[[r]]])
    elif how == "drop_column":
        df = df.drop(columns=[c])
    elif how == "truncate":
        df = df.iloc[: r % 3]
    else:
        df[c] = df[c].iloc[0]
    df.to_csv(root / table, index=False)
    try:
        load_traces(root)
    except TraceError as exc:
        msg = str(exc)
        assert any(name in msg for name in ("resources/", "subtasks/", "downloads/")), msg
    shutil.rmtree(root.parent)


@FUZZ
@given(which=st.sampled_from(JSONS),
       content=st.one_of(st.sampled_from(['[]', '{}', 'null', '"x"', '[1, 2]', '{"runs": 5}',
                                          '{"levels_mbps": []}', '{"capacity": {}}', '[{"name": 5}]']),
                         st.binary(max_size=20).map(lambda b: b.decode("latin-1"))))
def test_fuzz_trace_json(good_traces, tmp_path_factory, which, content):
    import shutil

    from gmm_volunteer.fitting.traces import TraceError, load_traces

    root = tmp_path_factory.mktemp("j") / "traces"
    shutil.copytree(good_traces, root)
    (root / which).write_text(content, encoding="latin-1")
    try:
        load_traces(root)
    except TraceError as exc:
        assert which.split("/")[0] in str(exc) or which.split("/")[1] in str(exc), str(exc)
    shutil.rmtree(root.parent)
