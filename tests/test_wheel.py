"""The wheel is self-contained: built from the package's files only (never generated
runner modules under __pycache__, never the repository's top-level `fitting` alias),
with the starter files (`gmm_volunteer.starter`) byte for byte the repository's,
installed into a fresh virtual environment, it writes the starter files (`gmmv init`) and
runs the written quickstart, runs `gmmv tune` on its shipped default config and makes
the Gymnasium environment by its plain id without an import, from a folder outside the
repository. Built as `make wheel` builds it, the wheel carries numba's kernel cache of
the quickstart (setup.py), which the installation loads instead of compiling.

Unmarked, so that `make test` (CI) runs it: the build compiles the quickstart's kernels
once, and the fresh installation those of one more policy pair (`weighted` with the
default executor), used by the run, `tune` and the environment. The
fresh environment gets the wheel itself with pip (no dependencies) and finds the
dependencies, already installed for the tests, through a .pth line naming this
environment's site-packages: a path on sys.path, not a site folder, so an editable
install of the repository there is not activated (the test checks where
`gmm_volunteer` is imported from).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = ROOT / "gmm_volunteer" / "policies" / "__pycache__" / "runners"


def sh(args, cwd, env=None, timeout=900):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the sdist, then the wheel from it (`python -m build`, with this interpreter
    compiling the shipped kernel cache, as `make wheel` has it), with a stray generated
    runner module planted in the work tree."""
    out = tmp_path_factory.mktemp("dist")
    RUNNERS.mkdir(parents=True, exist_ok=True)
    stray = RUNNERS / "gmmv_runner_wheel_probe.py"
    stray.write_text("raise ImportError('a generated module that must not ship')\n")
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "GMMV_RUNNER_DIR")}
        sh([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out,
           env={**env, "GMMV_KERNEL_CACHE_PYTHON": sys.executable})
    finally:
        stray.unlink()
    wheels = list(out.glob("gmm_volunteer-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def fresh(wheel, tmp_path_factory) -> Path:
    """A new virtual environment outside the repository with the wheel installed."""
    env_dir = tmp_path_factory.mktemp("fresh") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(sh([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=env_dir).stdout.strip())
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sh([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], cwd=env_dir)
    return env_dir


def test_the_wheel_holds_the_package_its_data_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    # besides the package: the Gymnasium hook and the .pth line that imports it (setup.py)
    assert tops == {"gmm_volunteer", wheel.name.split("-py3")[0] + ".dist-info",
                    "_gmm_volunteer_gymnasium.py", "gmm_volunteer-gymnasium.pth"}, tops
    pth = zipfile.ZipFile(wheel).read("gmm_volunteer-gymnasium.pth").decode()
    assert pth == "import _gmm_volunteer_gymnasium; _gmm_volunteer_gymnasium.install_gymnasium()\n"
    assert zipfile.ZipFile(wheel).read("_gmm_volunteer_gymnasium.py") == \
        (ROOT / "gmm_volunteer" / "_hooks.py").read_bytes()
    # In __pycache__ folders only the shipped kernel cache: numba's index and data files
    # and the generated runner of the quickstart's policies (not the stray one planted)
    cached = [n for n in names if "__pycache__" in n]
    runners = [n for n in cached if n.endswith(".py")]
    assert [n for n in cached if not n.endswith((".nbi", ".nbc", ".py"))] == []
    assert len(runners) == 1 and runners[0].startswith("gmm_volunteer/policies/__pycache__/runners/gmmv_runner_")
    assert not [n for n in names if "wheel_probe" in n]
    assert [n for n in cached if n.startswith("gmm_volunteer/model/kernels/__pycache__/step.dynamics_step-")
            and n.endswith(".nbi")], "the step kernel's cache index is not in the wheel"
    for data in ("gmm_volunteer/configs/scheduling_env.yaml", "gmm_volunteer/bundles/default/bundle.yaml",
                 "gmm_volunteer/py.typed"):
        assert data in names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[gymnasium.envs]" in meta and "gmm_volunteer = gmm_volunteer.optimisation:register_envs" in meta


def test_the_wheels_starter_files_are_the_repositorys(wheel):
    from gmm_volunteer.starter import PACKAGE_DIR, starter_files

    prefix = f"gmm_volunteer/{PACKAGE_DIR}/"
    archive = zipfile.ZipFile(wheel)
    shipped = sorted(n[len(prefix):] for n in archive.namelist() if n.startswith(prefix))
    expected = starter_files(ROOT)
    assert "configs/quickstart.yaml" in expected and "traces/subtasks/runs.csv.gz" in expected
    assert shipped == expected
    for rel in expected:
        assert archive.read(prefix + rel) == (ROOT / rel).read_bytes(), rel


def test_the_installed_wheel_runs_tunes_and_makes_the_environment_outside_the_repository(fresh, tmp_path):
    py, gmmv = fresh / "bin" / "python", fresh / "bin" / "gmmv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GMMV_RUNNER_DIR", "NUMBA_CACHE_DIR")}
    # nothing named `fitting` on the import path (the old alias is served by the package's
    # import hook only once gmm_volunteer is imported); the package is the wheel's
    where = sh([str(py), "-c", "import importlib.util as u; print(u.find_spec('fitting')); "
                "import gmm_volunteer; print(gmm_volunteer.__file__)"], cwd=tmp_path, env=env).stdout
    assert where.splitlines() == ["None", str(fresh / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
                                              / "site-packages" / "gmm_volunteer" / "__init__.py")]

    # The starter files, and the written quickstart run (shrunk, with the policy pair this
    # test compiles anyway) from the folder init wrote, as README's quickstart says.
    sh([str(gmmv), "init", "work", "-q"], cwd=tmp_path, env=env)
    # the quickstart's kernels come with the wheel: the installation compiles none of them
    compiled = sh([str(gmmv), "compile", "configs/quickstart.yaml"], cwd=tmp_path / "work", env=env).stdout
    assert "no kernel compiled (all loaded from numba's cache)" in compiled, compiled
    sh([str(gmmv), "run", "configs/quickstart.yaml", "--set", "steps=60", "--set", "users.count=20",
        "--set", "scheduler=weighted", "-q"], cwd=tmp_path / "work", env=env)
    assert (tmp_path / "work" / "results" / "quickstart.zarr").is_dir()
    assert (tmp_path / "work" / "docs" / "usage.md").is_file()

    (tmp_path / "tiny.yaml").write_text(
        "seed: 3\nsteps: 60\nusers: {count: 20, capacity: 1}\nserver: {capacity: 5}\n"
        "scheduler: weighted\noutput: {path: tiny.zarr}\n")
    sh([str(gmmv), "run", "tiny.yaml", "-q"], cwd=tmp_path, env=env)
    assert (tmp_path / "tiny.zarr").is_dir()

    # No CONFIG: the default config shipped in the package, shrunk by overrides.
    tuned = sh([str(gmmv), "tune", "--trials", "2", "--method", "random", "--train-seeds", "0",
                "--test-seeds", "100", "--baselines", "weighted", "--warmup", "30",
                "--set", "steps=90", "--set", "users.count=50", "-q"], cwd=tmp_path, env=env)
    assert "tuned weights:" in tuned.stdout

    made = sh([str(py), "-c",
               "import sys\n"
               "assert 'gmm_volunteer' not in sys.modules\n"  # the .pth hook imports nothing of ours
               "import gymnasium as gym\n"
               "assert 'gmm_volunteer/Scheduling-v0' in gym.registry\n"  # registered on import gymnasium
               "env = gym.make('gmm_volunteer/Scheduling-v0', k=10, warmup=20)\n"
               "obs, info = env.reset(seed=1)\n"
               "from gmm_volunteer.optimisation.problem import DEFAULT_CONFIG\n"
               "print(env.observation_space.contains(obs), DEFAULT_CONFIG)\n"], cwd=tmp_path, env=env).stdout
    ok, path = made.split()
    assert ok == "True" and Path(path).is_relative_to(fresh), made
