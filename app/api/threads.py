"""Work on large tensors runs in worker threads, so the event loop keeps serving everyone else."""

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

Result = TypeVar("Result")


async def run_sized(offload: bool, function: Callable[..., Result], *args: Any) -> Result:
    """Run ``function(*args)`` in a worker thread when ``offload`` (large tensors), else inline.

    Small requests stay inline: a thread hop costs more than their whole computation.
    """
    if offload:
        return await anyio.to_thread.run_sync(function, *args)
    return function(*args)
