"""Work on large tensors runs in worker threads, so the event loop keeps serving everyone else."""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio.to_thread

Params = ParamSpec("Params")
Result = TypeVar("Result")


async def run_sized(
    offload: bool,
    function: Callable[Params, Result],
    *args: Params.args,
    **kwargs: Params.kwargs,
) -> Result:
    """Run ``function(*args, **kwargs)`` in a worker thread when ``offload`` (large tensors),
    else inline: a thread hop costs more than a small request's whole computation."""
    if offload:
        return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))
    return function(*args, **kwargs)
