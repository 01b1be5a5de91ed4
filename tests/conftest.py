"""Fixtures shared by the test files, and what running them in parallel needs.

`make test` runs the suite in worker processes (pytest-xdist, ``-n auto --dist
loadgroup``). Two things keep that safe:

* each test file is one group, run whole by one worker, so that a module's fixtures are
  made once; the files that drive the live testbed (cgroups, network namespaces, the
  first free subnet, CPU shares measured while they run) form one group, so that two of
  them never run at once;
* the files marked serial here run after the parallel part, in one process: the docs
  pages share one scratch folder and read what earlier pages wrote, and the wheel's test
  builds from the work tree (it plants a generated module there and removes it); run
  among the workers, both failed in a clean clone (a page's store missing, the planted
  module gone before the build ended), and single-process they pass;
* `make test-fast` leaves out the tests marked heavy here, those listed in
  heavy_tests.txt (measured, with the run that measured them);
* before the workers start, the controller fills numba's cache with the quickstart's
  kernels (the step kernels every run calls), so that the workers load them instead of
  compiling the same functions at once. numba writes each cache file atomically, but
  its index is read, extended and written back without a lock: two processes compiling
  one function at once both spend the CPU, and an entry can be lost.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_support import bundle_dir

ROOT = Path(__file__).resolve().parents[1]
# Files whose tests start live testbeds or limited workers (docs/testbed.md).
LIVE_TESTBED_FILES = {"test_testbed.py", "test_testbed_collect.py"}
LIVE_TESTBED_GROUP = "live-testbed"
# Files `make test` runs after the workers, in one process (see the module's docstring).
SERIAL_FILES = {"test_docs.py", "test_wheel.py"}


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory):
    """Directory of the synthetic model bundle (gmm_volunteer.testing.synthetic)."""
    return bundle_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture
def run_yaml(tmp_path, monkeypatch):
    """A small valid run config, run.yaml, beside the synthetic bundle, in the current
    folder (the errors and hints tests provoke messages from it)."""
    import yaml

    bundle_dir(tmp_path)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"seed": 3, "steps": 40, "users": {"count": 20},
                                    "server": {"capacity": 10}, "model": "bundle"}))
    monkeypatch.chdir(tmp_path)
    return path


def _parallel_controller(config) -> bool:
    """Whether this process hands the tests to xdist workers (and runs none itself)."""
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) and not hasattr(config, "workerinput")


def _heavy() -> set[str]:
    """``file.py::test_function`` of the tests `make test-fast` leaves out, or ``file.py``
    for every test of a file whose module fixtures are the heavy part (heavy_tests.txt)."""
    lines = (Path(__file__).parent / "heavy_tests.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # tryfirst: xdist's own hook reads the groups to name the items of --dist loadgroup
    heavy = _heavy()
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group(LIVE_TESTBED_GROUP if name in LIVE_TESTBED_FILES else name))
        if name in heavy or f"{name}::{item.originalname}" in heavy:
            item.add_marker(pytest.mark.heavy)
        if name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)


def pytest_sessionstart(session):
    """In the controller of a parallel run, before xdist starts its workers (its own
    hook runs last): compile the quickstart's kernels once, if numba's cache lacks them."""
    if not _parallel_controller(session.config):
        return
    proc = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "compile", "configs/quickstart.yaml"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.exit(f"compiling the quickstart's kernels before the workers start failed:\n{proc.stderr}",
                    returncode=proc.returncode)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and proc.stdout.strip():
        reporter.write_line(f"before the workers: {proc.stdout.strip().splitlines()[-1]}")
