"""What ``import gmm_volunteer`` sets up: the
``ds.gmmv`` accessor on every `xarray.Dataset`, registered as soon as xarray is imported
(at once when it already is), without importing xarray here: ``gmmv --help`` stays fast.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


def _register_accessor() -> None:
    from gmm_volunteer.experiments.accessor import register

    register()


class _AfterXarray(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it asks the other finders for xarray and wraps the loader so
    that the accessor is registered right after xarray's own module has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "xarray":
            return None
        sys.meta_path.remove(self)  # once: the other finders find xarray itself
        spec = importlib.util.find_spec("xarray")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register_accessor()

        loader.exec_module = exec_then_register
        return spec


def install() -> None:
    if "xarray" in sys.modules:
        _register_accessor()
    elif not any(isinstance(f, _AfterXarray) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterXarray())
