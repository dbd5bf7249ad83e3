"""Memory admission: large requests share a byte budget, so the process never overcommits.

Each request reserves what it will hold at its peak (its body, what decoding adds, its output
and the encoded answer) before it holds it, in steps as each becomes known. A reservation that
does not fit waits for others to finish; past the admission timeout it is
answered 503 with ``Retry-After``. A request that could never fit is answered 413.
"""

import asyncio
import math
import os
import time
from pathlib import Path

from app.errors import Fault, ServiceError
from app.metrics import REFUSED_BUSY, RESERVED, WAITING

#: Below this, a request's memory is not reserved at all.
UNCOUNTED_BYTES = 256 * 1024
#: The budget of a worker when neither the settings nor a container limit give one.
DEFAULT_BUDGET = 4 << 30
#: Where a container's memory limit is read: cgroup v2, then v1.
CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
# cgroup v1 writes "no limit" as 2**63 - 1 rounded down to a page.
_NO_LIMIT = 1 << 62
# What the memory model promises: a request's growth stays within 1.25 x its reservation plus
# 16 MiB; the budget leaves room for both beside the workers' own baseline.
_GROWTH_FACTOR = 1.25
_GROWTH_SLACK = 16 << 20
_SMALLEST_BUDGET = 64 << 20


def container_limit(paths: tuple[Path, ...] = CGROUP_LIMITS) -> int | None:
    """The memory limit of the cgroup the process runs in, or None when there is none."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        if text.isascii() and text.isdigit():
            value = int(text)
            return None if value >= _NO_LIMIT else value
    return None


def resident_bytes() -> int:
    """This process's resident memory now (its baseline, when measured at start-up)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def derive_budget(
    configured: int | None, limit: int | None, workers: int, baseline: int
) -> tuple[int, str]:
    """A worker's memory budget and where it comes from.

    The setting wins. Under a container limit, each worker's share of the limit, less a margin
    (a tenth, at least 64 MiB), less the worker's measured baseline, divided by what the memory
    model lets a reservation grow to. Else 4 GiB.
    """
    if configured is not None:
        return configured, "TENSOR_OPS_MEMORY_BUDGET_BYTES"
    if limit is None:
        return DEFAULT_BUDGET, "default (no container memory limit)"
    margin = max(64 << 20, limit // 10)
    share = (limit - margin) // workers - baseline - _GROWTH_SLACK
    budget = max(_SMALLEST_BUDGET, int(share / _GROWTH_FACTOR))
    return budget, (
        f"container limit {limit} bytes, {workers} worker(s), baseline {baseline} bytes, "
        f"margin {margin} bytes"
    )


class MemoryBudget:
    """A byte budget shared by the requests of one worker process."""

    def __init__(self, capacity: int, timeout: float) -> None:
        self.capacity = capacity
        self.timeout = timeout
        self.in_use = 0
        #: Reservations waiting for room, in arrival order, each with the future that grants
        #: it: while there are any, nobody new takes first.
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    def reserve(self) -> "Reservation":
        """A reservation of this budget, empty until it grows."""
        return Reservation(self)

    def refuse_what_never_fits(self, total: int) -> None:
        """413 for a request that would need more than the whole budget."""
        if total > self.capacity:
            raise ServiceError(
                Fault.TOO_LARGE,
                ("body",),
                f"the request needs about {total} bytes of memory, more than the budget of "
                f"{self.capacity} bytes (raise it with TENSOR_OPS_MEMORY_BUDGET_BYTES)",
            )

    async def _take(self, nbytes: int, total: int, deadline: float) -> None:
        self.refuse_what_never_fits(total)
        # Nobody waiting and room now: taken at once (one event loop: nothing runs between the
        # test and the take).
        if not self._waiting and self.in_use + nbytes <= self.capacity:
            self.in_use += nbytes
            # The gauge's value itself (what ``Gauge.inc`` does after its checks of the
            # metric's kind): a gRPC call reserves its message's worst case and gives most of
            # it back, each a few Python calls fewer.
            RESERVED._value.inc(nbytes)
            return
        # Else it waits in line: each time memory comes back, the waiters it now fits are
        # granted, first come first (a large one does not hold back a smaller one that fits),
        # and only they are woken.
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, granted)
        self._waiting.append(entry)
        WAITING.inc()
        try:
            await asyncio.wait_for(asyncio.shield(granted), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            if granted.done():  # granted as the time ran out: taken after all
                return
            self._waiting.remove(entry)
            REFUSED_BUSY.inc()
            raise busy_error(self.in_use, self.capacity, nbytes, self.timeout) from None
        except asyncio.CancelledError:
            if granted.done():
                self._release(nbytes)  # granted, but its request is gone
            else:
                self._waiting.remove(entry)
            raise
        finally:
            WAITING.dec()

    def _grant(self) -> None:
        for entry in list(self._waiting):
            nbytes, granted = entry
            if self.in_use + nbytes <= self.capacity:
                self._waiting.remove(entry)
                self.in_use += nbytes
                RESERVED.inc(nbytes)
                granted.set_result(None)

    def take_now(self, nbytes: int, total: int) -> bool:
        """``_take`` when it would not wait: refused (413) if ``total`` never fits, taken if
        ``nbytes`` fit now with nobody waiting; False: ``_take`` must wait for them."""
        self.refuse_what_never_fits(total)
        if self._waiting or self.in_use + nbytes > self.capacity:
            return False
        self.in_use += nbytes
        RESERVED._value.inc(nbytes)  # ``Gauge.inc`` without its checks (see ``_take``)
        return True

    def try_take(self, nbytes: int) -> bool:
        """Take ``nbytes`` now if they fit, without waiting; whether they were taken."""
        if self._waiting or self.in_use + nbytes > self.capacity:
            return False
        self.in_use += nbytes
        RESERVED.inc(nbytes)
        return True

    def _release(self, nbytes: int) -> None:
        self.in_use -= nbytes
        RESERVED._value.inc(-nbytes)  # ``Gauge.dec`` without its checks (see ``_take``)
        if self._waiting:
            self._grant()


class Reservation:
    """What one request holds of the budget; given back when the request is done."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held = 0
        #: The most this request held, counted or not (below UNCOUNTED_BYTES an estimate is held
        #: without counting): logged. An estimate refused was never held and is not in it.
        self.peak = 0
        #: Nanoseconds spent in admission (waiting for room in the budget, or taking it).
        self.waited_ns = 0
        self._deadline = time.monotonic() + budget.timeout

    async def grow_to(self, nbytes: int) -> None:
        """Hold at least ``nbytes`` in all (waiting for room, or refused).

        Requests that stay below ``UNCOUNTED_BYTES`` are not counted: their memory is lost in the
        noise of the process, and taking the budget's lock would cost more than their work.
        """
        if self.grow_now(nbytes):
            return
        extra = nbytes - self.held
        started = time.perf_counter_ns()
        try:
            await self.budget._take(extra, nbytes, self._deadline)
        finally:
            # Triton's "queue" statistic (app/pipeline/statistics.py).
            self.waited_ns += time.perf_counter_ns() - started
        self.held += extra
        # Counted once held: a refused estimate (413 or 503) was never reserved, and the access
        # line's reserved_bytes says what was (an estimate of 10**39 bytes is no log figure).
        self.peak = max(self.peak, nbytes)

    def grow_now(self, nbytes: int) -> bool:
        """``grow_to(nbytes)`` when it need not wait (uncounted, already held, or room in the
        budget now with nobody waiting: done without a coroutine); refused as ``grow_to``
        refuses (413); False: ``grow_to`` must wait for room."""
        if nbytes <= UNCOUNTED_BYTES:
            self.peak = max(self.peak, nbytes)
            return True
        extra = nbytes - self.held
        if extra > 0:
            started = time.perf_counter_ns()
            try:
                if not self.budget.take_now(extra, nbytes):
                    return False
            finally:
                self.waited_ns += time.perf_counter_ns() - started
            self.held += extra
        self.peak = max(self.peak, nbytes)
        return True

    def uncounted(self, nbytes: int) -> bool:
        """``grow_to(nbytes)`` done at once when ``nbytes`` is below ``UNCOUNTED_BYTES`` (a
        small request's every step, without a coroutine); False: ``grow_to`` is needed."""
        if nbytes > UNCOUNTED_BYTES:
            return False
        self.peak = max(self.peak, nbytes)
        return True

    def try_grow_to(self, nbytes: int) -> bool:
        """Hold at least ``nbytes`` in all if the budget has room now (never waiting);
        whether it had."""
        if nbytes <= UNCOUNTED_BYTES or nbytes <= self.held:
            self.peak = max(self.peak, nbytes)
            return True
        if not self.budget.try_take(nbytes - self.held):
            return False
        self.held = nbytes
        self.peak = max(self.peak, nbytes)
        return True

    async def shrink_to(self, nbytes: int) -> None:
        """``shrink_now``, for a caller that awaits it."""
        self.shrink_now(nbytes)

    def shrink_now(self, nbytes: int) -> None:
        """Hold at most ``nbytes`` from now on: a worst case reserved before its size was
        known (a gRPC message while it arrives) brought down to what it turned out to be. The
        estimate (``peak``) becomes ``nbytes`` too: what is held from here on is measured
        against it."""
        self.peak = nbytes
        extra = self.held - (nbytes if nbytes > UNCOUNTED_BYTES else 0)
        if extra > 0:
            self.held -= extra
            self.budget._release(extra)

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        """Give back all that is held, at once and exactly once (a second call gives nothing):
        safe in a done callback, and in a ``finally`` that a second cancellation could cut
        short at its next ``await``."""
        if self.held:
            held, self.held = self.held, 0
            self.budget._release(held)


def busy_error(in_use: int, capacity: int, nbytes: int, timeout: float) -> ServiceError:
    """The 503 of a request that found no room in the budget within ``timeout`` seconds."""
    return ServiceError(
        Fault.BUSY,
        (),
        f"the service is busy: {in_use} of {capacity} bytes of its memory budget are in use "
        f"and this request needs {nbytes}; retry later",
        headers={"Retry-After": str(max(1, math.ceil(timeout / 4)))},
    )
