"""Deprecated: the fitting code is `gmm_volunteer.fitting` since 0.4. This top-level name
(and every ``fitting.*`` module path, through `gmm_volunteer._moved`) still imports it
for one release, then goes away."""

import importlib
import sys
import warnings

warnings.warn("module fitting is deprecated and goes away in the next release; "
              "import gmm_volunteer.fitting", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("gmm_volunteer.fitting")
