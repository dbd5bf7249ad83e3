"""Whose turn it is to read a stream's next message: the reads all streams keep posted, within
half the budget (``StreamReads``), and the messages of one stream answered so far
(``StreamOrder``)."""

from __future__ import annotations

import asyncio
import collections
import math

from app.errors import (
    Fault,
    ServiceError,
)


class StreamReads:
    """The reads streams keep posted for their next message. Each holds the worst case of a
    message (``Receiver``) for as long as the client takes to send one, an idle stream's
    until the receive time limit: together they may hold at most half the budget (one read at
    least), so that streams kept open cannot take the memory other calls need. A stream past
    that share waits for a turn, first come first, up to the admission timeout (then busy,
    which ends the stream as a busy budget does)."""

    def __init__(self, capacity: int, worst_case: int, timeout: float) -> None:
        self.slots = max(1, capacity // 2 // max(1, worst_case))
        self.free = self.slots
        self.timeout = timeout
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def try_enter(self) -> bool:
        """Take a turn now if one is free and nobody waits for one; whether it was taken."""
        if self._waiting or not self.free:
            return False
        self.free -= 1
        return True

    async def enter(self) -> None:
        """Take a turn, waiting for one in line (busy past the timeout)."""
        if self.try_enter():
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.timeout)
        except TimeoutError:
            if turn.done():  # handed over as the time ran out: taken after all
                return
            self._waiting.remove(turn)
            raise self._busy() from None
        except asyncio.CancelledError:
            if turn.done():
                self.leave()  # handed over, but its stream is gone
            else:
                self._waiting.remove(turn)
            raise

    def leave(self) -> None:
        """Give a turn back: to the first stream waiting for one, if any."""
        if self._waiting:
            self._waiting.popleft().set_result(None)
        else:
            self.free += 1

    def _busy(self) -> ServiceError:
        return ServiceError(
            Fault.BUSY,
            (),
            f"the service is busy: the {self.slots} stream reads this worker keeps posted "
            f"(half its memory budget) all wait for a message, and no turn came free within "
            f"{self.timeout:g} s (TENSOR_OPS_ADMISSION_TIMEOUT); retry later",
            headers={"Retry-After": str(max(1, math.ceil(self.timeout / 4)))},
        )


class StreamOrder:
    """How many of a stream's messages have been answered and given back what they held (in
    order, by its writer), for a read that must wait for those before it."""

    __slots__ = ("_waiter", "large", "posted", "unwritten", "written")

    def __init__(self) -> None:
        #: Messages whose reads have been posted (the next one's index).
        self.posted = 0
        self.written = 0
        #: The bytes held by messages in hand whose memory is all reserved and by answers not
        #: yet written (taken by the client).
        self.unwritten = 0
        #: A message of the stream held ``TRIM_FROM_BYTES`` or more (its end trims the heap).
        self.large = False
        #: The one read waiting (a stream reads one message at a time).
        self._waiter: asyncio.Future[None] | None = None

    def wrote(self) -> None:
        self.written += 1
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def written_up_to(self, count: int) -> None:
        """Once the first ``count`` messages have been written."""
        while self.written < count:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
