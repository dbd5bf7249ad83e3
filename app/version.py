"""The service's version, read from its installed package's metadata (written in pyproject.toml)."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("tensor-ops")
except PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
