"""Deadlines for many short waits, kept by one timer a tick rather than one timer a wait.

``asyncio.timeout`` schedules and cancels a timer per use (about 9 us on this stack, a tenth of a
small request's own work). A small body read needs a deadline only in case the client stalls,
which it almost never does: here each wait registers itself in a set, and one callback, running
every ``TICK`` seconds while anything is registered, cancels the waits that are past their time.
A deadline so kept fires up to one tick late.
"""

import asyncio
import weakref
from types import TracebackType

#: How often the waits are looked over, in seconds (how late a deadline may fire).
TICK = 0.05


class _Watch:
    """The waits of one event loop, and its ticking."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waits: set[Deadline] = set()
        self.ticking = False

    def add(self, wait: "Deadline") -> None:
        self.waits.add(wait)
        if not self.ticking:
            self.ticking = True
            self.loop.call_later(TICK, self._tick)

    def _tick(self) -> None:
        now = self.loop.time()
        for wait in self.waits:
            if wait.at <= now and not wait.expired:
                wait.expired = True
                wait.task.cancel()
        if self.waits:
            self.loop.call_later(TICK, self._tick)
        else:
            self.ticking = False


_WATCHES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch]" = (
    weakref.WeakKeyDictionary()
)


class _Last:
    """The watch found last, tried first: one event loop serves a worker (the weak
    dictionary's look-up is Python code)."""

    watch: _Watch | None = None


def _last_watch(loop: asyncio.AbstractEventLoop) -> _Watch:
    watch = _Last.watch
    if watch is not None and watch.loop is loop:
        return watch
    watch = _WATCHES.get(loop)
    if watch is None:
        watch = _WATCHES[loop] = _Watch(loop)
    _Last.watch = watch
    return watch


class Deadline:
    """``with Deadline(seconds):`` raises ``TimeoutError`` when the block's task is still inside
    it ``seconds`` from now (up to one tick later), as ``asyncio.timeout`` would."""

    __slots__ = ("at", "expired", "seconds", "task", "watch")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False

    def __enter__(self) -> "Deadline":
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a Deadline must be used inside a task")
        self.task = task
        self.at = loop.time() + self.seconds
        watch = _last_watch(loop)
        self.watch = watch
        watch.add(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.watch.waits.discard(self)
        if self.expired and kind is asyncio.CancelledError and self.task.uncancel() == 0:
            raise TimeoutError from error
