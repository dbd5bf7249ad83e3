"""Work on large tensors runs in worker threads, so the event loop keeps serving everyone else."""

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio.to_thread

from app.errors import release_frames

Params = ParamSpec("Params")
Result = TypeVar("Result")


async def run_sized(
    offload: bool,
    function: Callable[Params, Result],
    *args: Params.args,
    **kwargs: Params.kwargs,
) -> Result:
    """Run ``function(*args, **kwargs)`` in a worker thread when ``offload`` (large tensors),
    else inline: a thread hop costs more than a small request's whole computation.

    A thread cannot be stopped: when the request is cancelled (a gRPC deadline, a client gone),
    this still waits for the thread to return before the cancellation goes on, so that the
    memory the thread holds stays reserved until it is given back.
    """
    if not offload:
        return function(*args, **kwargs)
    work = asyncio.ensure_future(anyio.to_thread.run_sync(lambda: function(*args, **kwargs)))
    # anyio's cancellations (HTTP's) wait for the thread inside the shielded scope; a task
    # cancelled outright (gRPC's deadlines) waits for it below, then is cancelled.
    with anyio.CancelScope(shield=True):
        try:
            result = await asyncio.shield(work)
        except asyncio.CancelledError:
            while not work.done():
                try:
                    await asyncio.shield(work)
                except asyncio.CancelledError:
                    continue
                except Exception:
                    break  # its outcome no longer matters: the thread is done
            raise
        except BaseException as error:
            # The error's traceback holds this frame and anyio's, which hold the task and the
            # future that carried it: a cycle that would keep the request's bytes until a full
            # collection.
            release_frames(error)
            raise
    return result
