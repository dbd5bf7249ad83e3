"""The shared-timer deadlines of short waits (app/pipeline/deadlines.py)."""

import asyncio
import time

import pytest

from app.pipeline.deadlines import TICK, Deadline

pytestmark = pytest.mark.anyio


async def test_a_wait_past_its_deadline_raises_timeout_error() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError), Deadline(0.1):
        await asyncio.sleep(5)
    elapsed = time.monotonic() - started
    assert 0.1 <= elapsed < 0.1 + TICK + 1.0


async def test_a_wait_within_its_deadline_is_left_alone() -> None:
    with Deadline(5):
        await asyncio.sleep(0.01)
    # The task is not left cancelled: it can go on waiting.
    await asyncio.sleep(TICK * 2)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def waits() -> None:
        with Deadline(5):
            await asyncio.sleep(5)

    task = asyncio.ensure_future(waits())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_waits_each_keep_their_own_deadline() -> None:
    outcomes: list[str] = []

    async def waits(seconds: float, sleeping: float) -> None:
        try:
            with Deadline(seconds):
                await asyncio.sleep(sleeping)
            outcomes.append("done")
        except TimeoutError:
            outcomes.append("timed out")

    await asyncio.gather(*(waits(0.1, 3) for _ in range(5)), *(waits(3, 0.01) for _ in range(5)))
    assert sorted(outcomes) == ["done"] * 5 + ["timed out"] * 5


def test_outside_an_event_loop_it_says_so() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"), Deadline(1):
        pass
