"""Class 9 of issue "Hardening II" and class 7 of "Hardening III": `gmmv fit` gives the
same bundle run to run, whatever the BLAS thread count or the load.

Two fits in separate processes (as a user runs them) must give bundles with the same
digest, whenever they run: the digest leaves out the `created` stamp and the
`provenance` (`bundle.DESCRIPTIVE_KEYS`), so each fit below gets a stamp of its own.
0.7.0 asked for one BLAS thread only through environment variables set after numpy had
loaded (too late) and through threadpoolctl when installed (it was not), so a fit took
as many threads as the environment gave it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gmm_volunteer.fitting.fit import fit_bundle
from gmm_volunteer.fitting.synthetic import SyntheticSpec, write_synthetic_traces
from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.model.bundle import bundle_digest, legacy_bundle_digest

REPO = Path(__file__).resolve().parent.parent


def _fits_at_once(traces: Path, tmp_path: Path, threads: tuple[str, ...], *extra: str) -> list[str]:
    """One fit per entry of `threads` (its OMP/OPENBLAS_NUM_THREADS), all started at
    once, so that each runs under the others' CPU load."""
    procs, outs = [], []
    for k, n in enumerate(threads):
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(1767225600 + k), OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n,
                   MKL_NUM_THREADS=n)
        out = tmp_path / f"bundle-{k}-threads{n}"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "gmm_volunteer.cli", "fit", str(traces), "-o", str(out),
                                       "--no-report", "-q", *extra], env=env, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=3600)
        assert proc.returncode == 0, err
    return _digests(outs)


def _digests(outs: list[Path]) -> list[str]:
    """The bundles' digests, after checking that their stamps differ (so the digests'
    agreement does not come from equal stamps)."""
    bundles = [load_bundle(out) for out in outs]
    assert len({b.created for b in bundles}) == len(bundles)
    return [bundle_digest(b) for b in bundles]


def test_two_fits_at_two_times_from_two_spellings_of_the_path_have_one_digest(tmp_path):
    """The stamp and the traces path as typed change `bundle.yaml` but not the model, nor
    its digest; the legacy digest (the whole bundle) did change."""
    traces = tmp_path / "traces"
    write_synthetic_traces(traces, SyntheticSpec(duration_s=600, n_types=2, batch_sizes=(1, 5), reps=2,
                                                 download_reps=1))
    outs = [fit_bundle(path, tmp_path / f"b{k}", candidates=[(1, 0)], degrees=(1,), report=False, created=when)
            for k, (path, when) in enumerate([(str(traces), "2026-01-01T00:00:00Z"),
                                              (f"{traces}/", "2026-01-01T00:00:01Z")])]
    first, second = (load_bundle(out) for out in outs)
    assert first.provenance != second.provenance and first.created != second.created
    assert first.model_dump(exclude={"created", "provenance"}) == second.model_dump(exclude={"created", "provenance"})
    assert bundle_digest(first) == bundle_digest(second)
    assert legacy_bundle_digest(first) != legacy_bundle_digest(second)
    # any number of the model does enter the digest
    other = first.model_copy(update={"derived_base_profile": {**first.derived_base_profile, "cpu_pct": 1.0}})
    assert bundle_digest(other) != bundle_digest(first)


def test_fits_use_one_blas_thread_whatever_the_environment_asks():
    """Inside `single_threaded` every BLAS the fits call (numpy's and scipy's own) runs
    one thread, in a process whose environment asked for two and that loaded numpy
    first, as `gmmv` does."""
    code = ("import gmm_volunteer.cli.commands as c; c.build_parser()\n"
            "import sys; assert 'numpy' in sys.modules\n"
            "from threadpoolctl import threadpool_info\n"
            "from gmm_volunteer.fitting.determinism import single_threaded\n"
            "with single_threaded():\n"
            "    import statsmodels.api\n"
            "    info = [(i['filepath'], i['num_threads']) for i in threadpool_info() if i['user_api'] == 'blas']\n"
            "print(info)\n"
            "assert len(info) >= 2 and all(n == 1 for _, n in info), info\n")
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout


@pytest.mark.slow  # two quick fits at once: about 1 CPU-minute
def test_class7_fits_under_different_thread_counts_and_load_have_one_digest(tmp_path):
    one, two = _fits_at_once(REPO / "traces", tmp_path, ("1", "2"), "--quick")
    assert one == two


def _fit_twice(traces: Path, tmp_path: Path, *extra: str) -> list[str]:
    outs = []
    for k in range(2):
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(1767225600 + k))
        out = tmp_path / f"bundle{k}"
        outs.append(out)
        proc = subprocess.run([sys.executable, "-m", "gmm_volunteer.cli", "fit", str(traces), "-o", str(out),
                               "--no-report", "-q", *extra], env=env, capture_output=True, text=True,
                              timeout=3600)
        assert proc.returncode == 0, proc.stderr
    return _digests(outs)


@pytest.mark.slow  # two fits: about 6 CPU-minutes
def test_class9_two_fits_of_the_same_traces_have_one_digest(tmp_path):
    traces = tmp_path / "traces"
    write_synthetic_traces(traces, SyntheticSpec(duration_s=900, n_types=3, batch_sizes=(1, 5), reps=3,
                                                 download_reps=1))
    first, second = _fit_twice(traces, tmp_path, "--quick")
    assert first == second


@pytest.mark.slow
def test_class9_two_quick_fits_of_the_shipped_traces_have_one_digest(tmp_path):
    first, second = _fit_twice(REPO / "traces", tmp_path, "--quick")
    assert first == second
