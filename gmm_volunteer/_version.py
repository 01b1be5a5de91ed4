"""The package version, in a module that imports nothing, so that every layer may read
it without importing the package's `__init__` (which installs the import hooks)."""

__version__ = "0.11.0"
