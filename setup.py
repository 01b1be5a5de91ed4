"""Build steps the declarative configuration (pyproject.toml) cannot say:

* copy the starter files (`gmm_volunteer/starter.py`: example configs, a traces sample,
  the docs) from the source tree into the wheel's ``gmm_volunteer/starter/``, which
  `gmmv init` writes out (an editable install reads them from the source tree);
* put `gmm_volunteer/optimisation/autoregister.py` at the wheel's top level as
  ``_gmm_volunteer_gymnasium`` with a .pth file that imports it, so that
  ``gymnasium.make("gmm_volunteer/Scheduling-v0")`` works without an import under
  Gymnasium 1.x, which reads no plugin entry points (an editable install does not get
  them: there, import gmm_volunteer.optimisation first).
"""

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
GYM_MODULE = "_gmm_volunteer_gymnasium"


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
        shutil.copyfile(ROOT / "gmm_volunteer" / "optimisation" / "autoregister.py", lib / f"{GYM_MODULE}.py")
        (lib / "gmm_volunteer-gymnasium.pth").write_text(f"import {GYM_MODULE}\n")


setup(cmdclass={"build_py": BuildWithStarter})
