"""Build steps the declarative configuration (pyproject.toml) cannot say:

* copy the starter files (`gmm_volunteer/starter.py`: example configs, a traces sample,
  the docs) from the source tree into the wheel's ``gmm_volunteer/starter/``, which
  `gmmv init` writes out (an editable install reads them from the source tree);
* put `gmm_volunteer/_hooks.py` at the wheel's top level as ``_gmm_volunteer_gymnasium``
  with a .pth file that imports it and calls its `install_gymnasium`, so that
  ``gymnasium.make("gmm_volunteer/Scheduling-v0")`` works without an import under
  Gymnasium 1.x, which reads no plugin entry points (an editable install does not get
  them: there, import gmm_volunteer.optimisation first);
* fill numba's kernel cache for the quickstart's policies in the built package and ship
  it (`_ship_kernel_cache`), so that the first `gmmv run` after `pip install` on a machine
  like the build machine loads its kernels instead of compiling them for a minute or
  more (issue 36). numba keys a cache on a content hash of the kernel's source file (not
  its mtime, which pip does not keep), on the numba and Python versions and on the CPU
  (target triple, CPU name and features): on another CPU, or with another numba, a run
  compiles and caches its kernels as it would without the shipped cache.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
GYM_MODULE = "_gmm_volunteer_gymnasium"
# The interpreter that compiles the shipped kernel cache: one with the package's
# dependencies (numba, numpy, ...) and the Python version of the installs it serves.
# `make wheel` names the project's .venv; unset, the build's own interpreter is used if it
# has numba (`python -m build --no-isolation`), else the wheel ships no cache. "0" never.
CACHE_PYTHON_ENV = "GMMV_KERNEL_CACHE_PYTHON"
# Run in the compiling interpreter: the package must be the one being built (the build
# folder comes first on PYTHONPATH; an editable install's finder comes after it).
_COMPILE = (
    "import sys\n"
    "from pathlib import Path\n"
    "import gmm_volunteer\n"
    "where = Path(gmm_volunteer.__file__).resolve()\n"
    "if not where.is_relative_to(Path(sys.argv[1]).resolve()):\n"
    "    sys.exit(f'setup.py: compiling the kernel cache imported {where}, not the build')\n"
    "from gmm_volunteer.cli.commands import main\n"
    "sys.exit(main(['compile', sys.argv[2]]))\n"
)


def _starter():
    spec = importlib.util.spec_from_file_location("_gmmv_starter", ROOT / "gmm_volunteer" / "starter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithStarter(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        starter = _starter()
        files = starter.starter_files(ROOT)
        if "configs/quickstart.yaml" not in files:
            raise SystemExit(f"setup.py: the starter files are missing from {ROOT} (MANIFEST.in)")
        target = Path(self.build_lib) / "gmm_volunteer" / starter.PACKAGE_DIR
        for rel in files:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, target / rel)
        lib = Path(self.build_lib)
        shutil.copyfile(ROOT / "gmm_volunteer" / "_hooks.py", lib / f"{GYM_MODULE}.py")
        (lib / "gmm_volunteer-gymnasium.pth").write_text(f"import {GYM_MODULE}; {GYM_MODULE}.install_gymnasium()\n")
        _ship_kernel_cache(lib, target / "configs" / "quickstart.yaml")


def _cache_python() -> str | None:
    chosen = os.environ.get(CACHE_PYTHON_ENV)
    if chosen == "0":
        return None
    python = chosen or sys.executable
    has_numba = subprocess.run([python, "-c", "import numba"], capture_output=True).returncode == 0
    if not has_numba:
        if chosen:
            raise SystemExit(f"setup.py: {CACHE_PYTHON_ENV}={chosen} cannot import numba")
        return None
    return python


def _shipped_cache_file(path: Path) -> bool:
    """A file of the shipped kernel cache: numba's index and data files, and the
    generated runner modules they belong to (`gmm_volunteer.policies.runner`)."""
    return path.suffix in (".nbi", ".nbc") or (path.parent.name == "runners" and path.suffix == ".py"
                                               and path.name.startswith("gmmv_runner_"))


def _ship_kernel_cache(lib: Path, quickstart: Path) -> None:
    """Compile the quickstart's kernels (`gmmv compile`) inside the built package, so
    that numba writes its cache next to the built modules (``__pycache__/*.nbi, *.nbc``)
    and the wheel carries it,
    with its runner module, which a run finds instead of writing it)."""
    lib, quickstart = lib.resolve(), quickstart.resolve()  # the compile runs in a scratch folder
    python = _cache_python()
    if python is None:
        print(f"setup.py: no interpreter with numba ({CACHE_PYTHON_ENV}); the wheel ships no "
              "kernel cache, and the first run compiles its kernels", file=sys.stderr)
        return
    package = lib / "gmm_volunteer"
    for stale in [p for p in package.rglob("*") if "__pycache__" in p.parts and p.is_file()]:
        stale.unlink()  # an earlier build's files in a reused build folder
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "GMMV_RUNNER_DIR", "PYTHONPATH", "NUMBA_DISABLE_JIT")}
    env.update(PYTHONPATH=str(lib), PYTHONDONTWRITEBYTECODE="1")
    print("setup.py: compiling the quickstart's kernels into the built package (a minute or more; "
          "`make wheel` does it once: its install step compiles nothing)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        # its progress lines (stderr) go to the build's output: minutes without a line
        # read as a hung build
        proc = subprocess.run([python, "-c", _COMPILE, str(lib), str(quickstart)], cwd=scratch, env=env,
                              stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"setup.py: compiling the kernel cache failed (exit {proc.returncode}; "
                         f"its messages above):\n{proc.stdout[-3000:]}")
    for path in sorted(package.rglob("*")):
        # only numba's files and the quickstart's generated runner (so that a run sees its
        # kernels cached before it generates the runner) may sit in a __pycache__ of the wheel
        if path.is_file() and "__pycache__" in path.parts and not _shipped_cache_file(path):
            path.unlink()
    shipped = [p for p in package.rglob("*") if p.suffix in (".nbi", ".nbc")]
    size = sum(p.stat().st_size for p in shipped)
    print(f"setup.py: shipping numba's kernel cache of the quickstart: {len(shipped)} files, "
          f"{size / 1e6:.1f} MB, {proc.stdout.strip()}", file=sys.stderr)


setup(cmdclass={"build_py": BuildWithStarter})
