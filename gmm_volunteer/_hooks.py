"""Import hooks, standard library only: what ``import gmm_volunteer`` sets up, and what an
installed wheel sets up at interpreter start (docs/optimisation.md, "The environment").

`install()`, called by ``import gmm_volunteer``: the ``ds.gmmv`` accessor on every
`xarray.Dataset`, registered as soon as xarray is imported (at once when it already is),
without importing xarray here: ``gmmv --help`` stays fast.

`install_gymnasium()`: Gymnasium 1.x reads no plugin entry points, so an installed wheel
carries this file as the top-level module ``_gmm_volunteer_gymnasium`` and a
``gmm_volunteer-gymnasium.pth`` whose line imports it and calls `install_gymnasium` at
interpreter start (setup.py). When a program imports gymnasium, gymnasium's own module
runs and then ``gmm_volunteer/Scheduling-v0`` is registered
(`gmm_volunteer.optimisation.register_envs`). Nothing of gmm_volunteer is imported by a
program that never imports gymnasium.
"""

from __future__ import annotations

import sys


class _AfterImport:
    """Finds nothing itself: asks the other finders for module `name` and wraps its loader,
    so that `then()` runs right after that module's own code. A plain class (a meta path
    finder needs only `find_spec`): importlib.abc would cost every interpreter start some
    30 ms."""

    def __init__(self, name: str, then):
        self.name = name
        self.then = then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the other finders find the module itself
        import importlib.util

        spec = importlib.util.find_spec(self.name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        then = self.then

        def exec_then(module):
            exec_module(module)
            then()

        loader.exec_module = exec_then
        return spec


def after_import(name: str, then) -> None:
    """Call `then()` once module `name` is imported: at once when it is already."""
    if name in sys.modules:
        then()
    # by the class's name: the wheel's top-level copy of this module has its own class
    elif not any(type(f).__name__ == "_AfterImport" and getattr(f, "name", None) == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))


def _register_accessor() -> None:
    from gmm_volunteer.experiments.accessor import register

    register()


def _register_envs() -> None:
    try:
        from gmm_volunteer.optimisation import register_envs
    except ImportError:  # the package was uninstalled and the .pth left behind
        return
    register_envs()


def install() -> None:
    after_import("xarray", _register_accessor)


def install_gymnasium() -> None:
    after_import("gymnasium", _register_envs)
