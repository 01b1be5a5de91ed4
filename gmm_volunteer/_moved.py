"""Old module paths of 0.3, kept for one release (deprecated; gone in the next).

0.4 laid the package out by layer (docs/api.md, "Module map"). Importing a module by
its old path gives the very module object of its new path, so module-level state,
`isinstance` checks and monkeypatching all act on one module. The old paths are served
by this import hook rather than by files left at the old paths, so that changes to a
moved file made elsewhere follow it to its new path when branches are merged (git
pairs a deleted path with an added one as a rename; a path that still exists is not).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module (or package, with everything under it) -> new one
MOVED: dict[str, str] = {
    "gmm_volunteer.actions": "gmm_volunteer.model.actions",
    "gmm_volunteer.config": "gmm_volunteer.run.config",
    "gmm_volunteer.demand": "gmm_volunteer.model.demand",
    "gmm_volunteer.engine": "gmm_volunteer.run.engine",
    "gmm_volunteer.kernels": "gmm_volunteer.model.kernels",
    "gmm_volunteer.params": "gmm_volunteer.model.params",
    "gmm_volunteer.preflight": "gmm_volunteer.run.preflight",
    "gmm_volunteer.rng": "gmm_volunteer.model.rng",
    "gmm_volunteer.state": "gmm_volunteer.model.state",
    "gmm_volunteer.structs": "gmm_volunteer.model.structs",
    "gmm_volunteer.theory": "gmm_volunteer.model.theory",
    "gmm_volunteer.synthetic": "gmm_volunteer.testing.synthetic",
    "gmm_volunteer.bundle": "gmm_volunteer.model.bundle",
    "gmm_volunteer.results": "gmm_volunteer.io.results",
    "gmm_volunteer.runrecord": "gmm_volunteer.io.runrecord",
    "gmm_volunteer.yamlio": "gmm_volunteer.io.yamlio",
    "gmm_volunteer.analysis": "gmm_volunteer.experiments.analysis",
    "gmm_volunteer.capacity": "gmm_volunteer.experiments.capacity",
    "gmm_volunteer.combine": "gmm_volunteer.experiments.combine",
    "gmm_volunteer.figures": "gmm_volunteer.experiments.figures",
    "gmm_volunteer.findings": "gmm_volunteer.experiments.findings",
    "gmm_volunteer.report": "gmm_volunteer.experiments.report",
    "gmm_volunteer.summary": "gmm_volunteer.experiments.summary",
    "gmm_volunteer.sweep": "gmm_volunteer.experiments.sweep",
    "gmm_volunteer.experiments_cli": "gmm_volunteer.cli.experiments",
    "gmm_volunteer.feedback": "gmm_volunteer.cli.feedback",
    "fitting": "gmm_volunteer.fitting",
}
# Old top-level names: served only when nothing on the import path has a module of that
# name (the wheel ships no `fitting`), so that the package never hides a user's own.
TOP_LEVEL = frozenset({"fitting"})


_TOPS = frozenset(old.partition(".")[0] for old in MOVED)


def new_name(old: str) -> str | None:
    """The new path of module `old`, or None when it did not move."""
    if old.partition(".")[0] not in _TOPS:  # every import asks: answer most at once
        return None
    for prefix, target in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix):]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`last`: the instance after every other finder, which alone serves a top-level
    name of TOP_LEVEL; the first one serves everything else (a module below such a name
    only when that name is our alias, not a user's module of the same name)."""

    def __init__(self, last: bool = False):
        self.last = last

    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        top, _, rest = fullname.partition(".")
        if top in TOP_LEVEL:
            if not rest and not self.last:
                return None
            if rest and sys.modules.get(top) is not sys.modules.get(MOVED[top], object()):
                return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module):
        old = module.__name__
        new = new_name(old)
        warnings.warn(f"module {old} is deprecated and goes away in the next release; "
                      f"import {new}", DeprecationWarning, stacklevel=2)
        # The import system returns what sys.modules holds under the name once the
        # module is executed: the new module itself, not a copy.
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        # First, so that an old package's __path__ never loads a second copy of a module.
        sys.meta_path.insert(0, _Alias())
        sys.meta_path.append(_Alias(last=True))
