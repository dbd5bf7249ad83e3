"""The numba internals ``app/ops/numba_cache.py`` relies on are still there: an upgrade that
moves them fails here, naming what moved, rather than as a cold cache in production."""

import numba
from numba.core import caching

from app.ops import compiled
from app.ops.numba_cache import DISPATCHER_CACHE, NUMBA_MEMBERS, _Cache


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
        "app/ops/numba_cache.py reads the kernels' cache through them; adapt it to this numba "
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
    assert dispatchers
    for dispatcher in dispatchers:
        assert isinstance(getattr(dispatcher, DISPATCHER_CACHE), _Cache), dispatcher
