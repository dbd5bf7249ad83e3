"""Memory admission: large requests share a byte budget, so the process never overcommits.

Each request reserves what it will hold at its peak (its body, what decoding adds, its output
and the encoded answer) before it holds it, in steps as each becomes known. A reservation that
does not fit waits for others to finish; past the admission timeout it is
answered 503 with ``Retry-After``. A request that could never fit is answered 413.
"""

import asyncio
import math
import time

from app.errors import Fault, ServiceError
from app.metrics import REFUSED_BUSY, RESERVED, WAITING

#: Below this, a request's memory is not reserved at all.
UNCOUNTED_BYTES = 256 * 1024


class MemoryBudget:
    """A byte budget shared by the requests of one worker process."""

    def __init__(self, capacity: int, timeout: float) -> None:
        self.capacity = capacity
        self.timeout = timeout
        self.in_use = 0
        self._changed = asyncio.Condition()

    def reserve(self) -> "Reservation":
        """A reservation of this budget, empty until it grows."""
        return Reservation(self)

    async def _take(self, nbytes: int, total: int, deadline: float) -> None:
        if total > self.capacity:
            raise ServiceError(
                Fault.TOO_LARGE,
                ("body",),
                f"the request needs about {total} bytes of memory, more than the budget of "
                f"{self.capacity} bytes (raise it with TENSOR_OPS_MEMORY_BUDGET_BYTES)",
            )
        async with self._changed:
            waiting = False
            while self.in_use + nbytes > self.capacity:
                if not waiting:
                    waiting = True
                    WAITING.inc()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    WAITING.dec()
                    REFUSED_BUSY.inc()
                    raise ServiceError(
                        Fault.BUSY,
                        (),
                        f"the service is busy: {self.in_use} of {self.capacity} bytes of its "
                        f"memory budget are in use and this request needs {nbytes}; retry later",
                        headers={"Retry-After": str(max(1, math.ceil(self.timeout / 4)))},
                    )
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    continue
            if waiting:
                WAITING.dec()
            self.in_use += nbytes
            RESERVED.inc(nbytes)

    async def _give_back(self, nbytes: int) -> None:
        async with self._changed:
            self.in_use -= nbytes
            RESERVED.dec(nbytes)
            self._changed.notify_all()


class Reservation:
    """What one request holds of the budget; given back when the request is done."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held = 0
        #: The most this request asked for, counted or not: its memory estimate, logged.
        self.peak = 0
        self._deadline = time.monotonic() + budget.timeout

    async def grow_to(self, nbytes: int) -> None:
        """Hold at least ``nbytes`` in all (waiting for room, or refused).

        Requests that stay below ``UNCOUNTED_BYTES`` are not counted: their memory is lost in the
        noise of the process, and taking the budget's lock would cost more than their work.
        """
        self.peak = max(self.peak, nbytes)
        if nbytes <= UNCOUNTED_BYTES:
            return
        extra = nbytes - self.held
        if extra > 0:
            await self.budget._take(extra, nbytes, self._deadline)
            self.held += extra

    async def release(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            await self.budget._give_back(held)
