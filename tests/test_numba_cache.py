"""The numba internals ``app/numba_cache.py`` relies on are still there: an upgrade that
moves them fails here, naming what moved, rather than as a cold cache in production."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import pytest
from numba.core import caching

from app.numba_cache import DISPATCHER_CACHE, NUMBA_MEMBERS, _Cache
from app.ops import compiled


def test_the_numba_members_the_cache_relies_on_are_still_there() -> None:
    missing = [
        f"numba.core.caching.{name}.{member}"
        for name, members in NUMBA_MEMBERS.items()
        for member in (*members, "")[:-1] or ("",)
        if not hasattr(getattr(caching, name, None), member)
    ]
    missing += [
        f"numba.core.caching.{name}" for name in NUMBA_MEMBERS if not hasattr(caching, name)
    ]
    assert not missing, (
        f"numba {numba.__version__} no longer has {', '.join(sorted(set(missing)))}: "
        "app/numba_cache.py reads the kernels' cache through them; adapt it to this numba "
        "or keep numba below this version in pyproject.toml"
    )


def test_the_kernels_dispatchers_carry_the_readable_cache() -> None:
    # The loops were compiled at import with the cache this module gives them (a machine with
    # no readable directory at all would compile in memory: not the test machines).
    dispatchers = [
        value
        for value in vars(compiled).values()
        if isinstance(value, numba.core.registry.CPUDispatcher)
    ]
    loops = {id(loop) for _, loop in compiled._LOOPS}
    assert dispatchers and loops <= {id(dispatcher) for dispatcher in dispatchers}
    for dispatcher in dispatchers:
        if dispatcher.targetoptions.get("inline") == "always":
            # A helper inlined into the loops that call it (GatherTree's ``_whole_float``): its
            # code is in their cached machine code, and it is never compiled on its own.
            assert not dispatcher.signatures, dispatcher
            continue
        if id(dispatcher) not in loops:
            # A helper the loops call (ScatterElementsUpdate's): linked into their machine
            # code, so not cached on its own (files no start would read; the image test counts
            # the cache's files against the loops a start loads).
            assert not isinstance(getattr(dispatcher, DISPATCHER_CACHE), _Cache), dispatcher
            continue
        assert isinstance(getattr(dispatcher, DISPATCHER_CACHE), _Cache), dispatcher


def test_the_cache_directory_is_where_numba_writes(tmp_path: Path) -> None:
    """``cache_directory`` (what ``python -m app`` checks before it starts) is the folder
    numba's own locator picks for a function of the kernels' module, with NUMBA_CACHE_DIR set
    and without: a numba that moves its cache fails here, by name."""
    import numba  # noqa: PLC0415
    from numba.core import caching  # noqa: PLC0415

    from app.numba_cache import KERNELS, cache_directory  # noqa: PLC0415

    def sample() -> None:
        pass

    sample.__code__ = sample.__code__.replace(co_filename=str(KERNELS))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
        patch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
        locator = caching.UserProvidedCacheLocator.from_function(sample, str(KERNELS))
        assert locator is not None
        assert Path(locator.get_cache_path()) == cache_directory()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("NUMBA_CACHE_DIR", raising=False)
        in_tree = caching.InTreeCacheLocator.from_function(sample, str(KERNELS))
        assert in_tree is not None
        assert Path(in_tree.get_cache_path()) == cache_directory()


GUARD_BESIDE_KERNELS = """
import sys
from app.ops import loops
from app.v2 import shm_guard

loops.start_compiling()
shm_guard._install()
# The guard compiled after the kernels, never beside them (numba deadlocks two first compiles).
print("kernels over", loops.compiling_over(), "ready", loops.compiled_ready())
"""


#: The loops left out of the test's cache (their index files): compiled from cold while the
#: guard is installed, some 8 s on 2 cores, far longer than the guard's own compile.
COLD_LOOPS = ("_col2im_loop", "_col2im_reach_loop")


def test_the_mapping_guard_never_compiles_beside_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the first region of a fresh start (a cold cache: the kernels compile for
    seconds) installed the SIGBUS guard while the kernels compiled, and numba's two first
    compiles deadlocked (a registration that never answered, one start in two).

    The kernels' cache is copied but for Col2Im's loops, so that the kernels compile for
    seconds, not the minute of one core a whole cold compile takes (test_startup.py has
    that one); the guard is compiled cold either way (it is not cached)."""
    from app.numba_cache import cache_directory  # noqa: PLC0415

    source = cache_directory()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    target = cache_directory()
    target.mkdir(parents=True)
    kept = 0
    for path in source.glob("compiled.*.nb*"):
        if not path.name.startswith(tuple(f"compiled.{name}-" for name in COLD_LOOPS)):
            shutil.copy2(path, target / path.name)
            kept += 1
    assert kept, f"no kernels' cache in {source}: the whole compile runs from cold"
    done = subprocess.run(
        [sys.executable, "-c", GUARD_BESIDE_KERNELS],
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "kernels over True ready True"
    # Col2Im's loops were compiled in that run, beside the guard (their index written anew).
    for name in COLD_LOOPS:
        assert list(target.glob(f"compiled.{name}-*.nbi")), name
