"""The installed distribution's version, from its metadata (pyproject.toml is the one source)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tensor-ops-client")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
