"""numba's on-disk cache, where it is and read even where it cannot be written: the one use of
numba's internals (outside ``app/ops`` so that ``python -m app`` can ask whether the kernels are
cached without importing, and so compiling, them).

numba's public cache (``njit(cache=True)``) needs a directory it can write: under a read-only
root filesystem (the image's ``readOnlyRootFilesystem``) it gives up and every start compiles
the kernels again (seconds of CPU per worker). No setting or public API reads a cache without
writing it: ``NUMBA_CACHE_DIR`` only moves the directory, which must still be writable. So the
cache the image builds at build time is read here through numba's cache classes, which are not
documented API: ``NUMBA_MEMBERS`` lists what is used, and ``tests/test_numba_cache.py``
fails naming any member a numba upgrade removes (numba is bounded in pyproject.toml).
"""

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from numba.core import caching

#: What this module uses of numba, by class: checked by a test against the installed numba.
NUMBA_MEMBERS: dict[str, tuple[str, ...]] = {
    "UserProvidedCacheLocator": (
        "get_cache_path",
        "ensure_cache_path",
        "from_function",
        "get_suitable_cache_subpath",
    ),
    "InTreeCacheLocator": ("get_cache_path", "ensure_cache_path", "from_function"),
    "CompileResultCacheImpl": ("_locator_classes",),
    "FunctionCache": ("_impl_class", "save_overload", "load_overload"),
}
#: The dispatcher's attribute that holds its cache (``njit(cache=True)`` sets it).
DISPATCHER_CACHE = "_cache"


#: In a process of ``scripts/compile_kernels`` only: (share, count), this process compiling
#: every count-th of the kernels' loops from the share-th (in the order the module defines
#: them) and leaving the others out, while the other processes compile theirs. None (the
#: service, the tests): every loop.
SHARE: tuple[int, int] | None = None


def in_share(order: int) -> bool:
    """Whether this process compiles the kernels' ``order``-th loop (``SHARE``)."""
    return SHARE is None or order % SHARE[1] == SHARE[0]


#: The module whose loops numba compiles at import (app/ops/compiled.py).
KERNELS = Path(__file__).resolve().parent / "ops" / "compiled.py"


def cache_directory(source: Path = KERNELS) -> Path:
    """Where numba keeps the machine code of the module ``source``: under ``NUMBA_CACHE_DIR``
    in the folder numba's own locator names (its source folder's name and hash), else in
    ``__pycache__`` beside it."""
    folder = os.environ.get("NUMBA_CACHE_DIR")
    if not folder:
        return source.parent / "__pycache__"
    subpath: str = caching.UserProvidedCacheLocator.get_suitable_cache_subpath(str(source))
    return Path(folder) / subpath


def kernels_cached() -> bool:
    """Whether the kernels' compiled loops are on disk, no older than their source: a start
    then loads them in a second or so instead of compiling them (several seconds)."""
    try:
        source = KERNELS.stat().st_mtime
        indexes = list(cache_directory().glob(f"{KERNELS.stem}.*.nbi"))
        return bool(indexes) and all(index.stat().st_mtime >= source for index in indexes)
    except OSError:
        return False


def _cache_usable(path: str) -> bool:
    """A directory numba may read its cache from: writable, or at least there and readable."""
    with contextlib.suppress(OSError):
        os.makedirs(path, exist_ok=True)
    return os.path.isdir(path) and os.access(path, os.R_OK | os.X_OK)


class _ReadableUserDirectory(caching.UserProvidedCacheLocator):  # type: ignore[misc]
    """``NUMBA_CACHE_DIR``, read even where it cannot be written."""

    def ensure_cache_path(self) -> None:
        if not _cache_usable(self.get_cache_path()):
            raise OSError(f"cannot read {self.get_cache_path()}")


class _ReadableInTree(caching.InTreeCacheLocator):  # type: ignore[misc]
    """``__pycache__`` beside the kernels' module, read even where it cannot be written."""

    def ensure_cache_path(self) -> None:
        if not _cache_usable(self.get_cache_path()):
            raise OSError(f"cannot read {self.get_cache_path()}")


class _CacheImpl(caching.CompileResultCacheImpl):  # type: ignore[misc]
    _locator_classes: ClassVar[list[type]] = [_ReadableUserDirectory, _ReadableInTree]


class _Cache(caching.FunctionCache):  # type: ignore[misc]
    """numba's cache of compiled functions, which takes a cache it cannot write as read-only."""

    _impl_class = _CacheImpl

    def save_overload(self, sig: Any, data: Any) -> None:
        with contextlib.suppress(OSError):
            super().save_overload(sig, data)


def use_readable_cache(dispatcher: Any, function: Callable[..., Any]) -> None:
    """Give ``dispatcher`` (``numba.njit``'s, of ``function``) the cache above; raises
    ``RuntimeError`` or ``OSError`` when no directory can even be read (then it compiles in
    memory, as with no cache)."""
    setattr(dispatcher, DISPATCHER_CACHE, _Cache(function))
