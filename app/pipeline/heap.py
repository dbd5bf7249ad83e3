"""Freed heap memory given back to the system after large gRPC messages.

gRPC's core receives a message in many small slices from glibc's arenas; freed, they stay in
the arenas (below ``MALLOC_MMAP_THRESHOLD_`` nothing is unmapped), so a worker that received a
few large messages, or had a few stalled uploads cut off, kept them resident. ``malloc_trim``
returns the free pages of every arena. It runs once a little after the call that freed them
ended (gRPC frees a call's buffers as it tears the call down), in a thread, and at most once at
a time (a call that ends while one is pending has one more after it); elsewhere than glibc it
does nothing.
"""

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

#: Calls whose message or reservation reached this size have their freed memory returned.
TRIM_FROM_BYTES = 8 << 20
#: How long after the call ended: gRPC frees its buffers as the call is torn down.
_DELAY_SECONDS = 0.05


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


_TRIM = _malloc_trim()


class HeapTrimmer:
    """Schedules ``malloc_trim(0)`` after large calls, coalesced: one pending at a time."""

    def __init__(self) -> None:
        self._pending = False
        #: A call ended while a trim was pending: its memory may be freed after that trim
        #: has run, so one more follows it.
        self._again = False
        self._tasks: set[asyncio.Task[None]] = set()

    def after_call(self, nbytes: int) -> None:
        """A call that held ``nbytes`` has ended (from its done callback, on the loop)."""
        if _TRIM is None or nbytes < TRIM_FROM_BYTES:
            return
        if self._pending:
            self._again = True
            return
        self._schedule()

    def _schedule(self) -> None:
        self._pending, self._again = True, False
        task = asyncio.get_running_loop().create_task(self._trim())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _trim(self) -> None:
        try:
            await asyncio.sleep(_DELAY_SECONDS)
            if _TRIM is not None:
                await asyncio.to_thread(_TRIM, 0)
        except BaseException:
            self._pending = self._again = False  # the loop is ending: nothing more to trim
            raise
        self._pending = False
        if self._again:
            self._schedule()
