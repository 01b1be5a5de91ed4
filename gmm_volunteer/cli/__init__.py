"""The `gmmv` command line (docs/usage.md): core commands (`commands`: run, validate,
summarize; `main` is the console script), experiment commands (`experiments`: sweep,
combine, report, capacity) and what every command tells the user (`feedback`).
`gmmv fit` and `gmmv collect` come from `gmm_volunteer.fitting.cli`.

``gmm_volunteer.cli`` was one module before 0.4; its names are still found here for one
release (deprecated) and go away in the next: import them from
`gmm_volunteer.cli.commands`.
"""

import importlib
import warnings

_OLD_NAMES = frozenset({
    "main", "build_parser", "CommandError", "add_output_flags", "EXTENSIONS",
    "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_INTERRUPTED", "EXIT_BROKEN_PIPE",
})


def __getattr__(name: str):
    # Looked up lazily, so that importing the package imports none of its modules.
    if name in _OLD_NAMES:
        warnings.warn(f"gmm_volunteer.cli.{name} is deprecated and goes away in the next "
                      f"release; use gmm_volunteer.cli.commands.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("gmm_volunteer.cli.commands"), name)
    raise AttributeError(f"module 'gmm_volunteer.cli' has no attribute {name!r}")
