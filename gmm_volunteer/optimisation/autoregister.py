"""Registration of ``gmm_volunteer/Scheduling-v0`` on ``import gymnasium``, without an
import of ours (docs/optimisation.md, "The environment").

Gymnasium 1.x reads no plugin entry points, so an installed wheel carries this file as
the top-level module ``_gmm_volunteer_gymnasium`` and a ``gmm_volunteer-gymnasium.pth``
that imports it at interpreter start (setup.py puts both there). What it does at start is
small: it puts a finder on ``sys.meta_path`` that finds nothing itself; when a program
imports gymnasium, it lets gymnasium's own module run and then registers the
environment (`gmm_volunteer.optimisation.register_envs`). Nothing of gmm_volunteer is
imported by a program that never imports gymnasium. Standard library only.
"""

from __future__ import annotations

import sys


def _register() -> None:
    try:
        from gmm_volunteer.optimisation import register_envs
    except ImportError:  # the package was uninstalled and the .pth left behind
        return
    register_envs()


class _AfterGymnasium:
    """Asks the other finders for gymnasium and wraps its loader, so that the environment
    is registered right after gymnasium's module has run (as `gmm_volunteer._hooks` does
    for xarray). A plain class (a meta path finder needs only `find_spec`): importlib.abc
    would cost every interpreter start some 30 ms."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "gymnasium":
            return None
        sys.meta_path.remove(self)  # once: the other finders find gymnasium itself
        import importlib.util

        spec = importlib.util.find_spec("gymnasium")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register()

        loader.exec_module = exec_then_register
        return spec


def install() -> None:
    if "gymnasium" in sys.modules:
        _register()
    elif not any(type(f).__name__ == "_AfterGymnasium" for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterGymnasium())


install()
