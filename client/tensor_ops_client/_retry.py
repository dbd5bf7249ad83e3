"""When a failed call is made again, and how long the client waits first: no I/O here."""

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tensor_ops_client._errors import TensorOpsError


@dataclass(frozen=True)
class Retry:
    """How the client repeats a call that failed for a reason a repeat can cure.

    Roll and Gather are pure functions, so a repeat is always safe. What is repeated: a call
    that got no answer because the connection could not be made or broke (a replica killed
    mid-call), a 503 (the service's memory is busy, or it is shutting down), a proxy's 502 or
    504, and over gRPC ``UNAVAILABLE`` and ``RESOURCE_EXHAUSTED`` with ``retry-after``. What is
    not: every other refusal (the request itself is at fault), and a call whose ``timeout``
    passed (it may be the request that is slow; a repeat would double the load).

    - ``attempts``: calls in all, the first included (``1``: no retry).
    - ``deadline``: seconds from the first call's start after which no new attempt begins,
      and each attempt's timeout is cut to what remains; None: no limit but ``attempts``.
    - ``backoff``, ``max_backoff``: the wait before the n-th retry is drawn at random between 0
      and ``min(max_backoff, backoff * 2 ** (n - 1))`` seconds ("full jitter": clients that
      failed together do not come back together).
    - A 503's ``Retry-After`` is honoured: the wait is at least that long. When it would end
      past the deadline, the client gives up at once with that 503.

    >>> Retry(attempts=3, deadline=10.0).attempts
    3
    >>> Retry.off().attempts
    1
    """

    attempts: int = 5
    deadline: float | None = 120.0
    backoff: float = 0.1
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry.attempts must be 1 or more, got {self.attempts}")
        if self.deadline is not None and not self.deadline > 0:
            raise ValueError(f"Retry.deadline must be positive or None, got {self.deadline}")
        if not 0 <= self.backoff <= self.max_backoff:
            raise ValueError("Retry needs 0 <= backoff <= max_backoff")

    @classmethod
    def off(cls) -> "Retry":
        """One attempt: every failure is raised as it comes."""
        return cls(attempts=1)

    @classmethod
    def of(cls, setting: "Retry | bool | int | None") -> "Retry":
        """The policy a client's ``retry=`` means: a ``Retry``; True or None the default;
        False no retry; an int that many attempts."""
        if isinstance(setting, Retry):
            return setting
        if setting is None or setting is True:
            return cls()
        if setting is False:
            return cls.off()
        return cls(attempts=int(setting))


class Attempts:
    """One call's attempts under a ``Retry``: the time left, and the wait before the next."""

    def __init__(
        self,
        policy: Retry,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.draw = draw
        self.started = clock()
        self.made = 0

    def timeout(self, timeout: float | None) -> float | None:
        """The next attempt's timeout: ``timeout`` cut to the time left before the deadline."""
        self.made += 1
        left = self.left()
        if left is None:
            return timeout
        return left if timeout is None else min(timeout, left)

    def left(self) -> float | None:
        if self.policy.deadline is None:
            return None
        return max(0.0, self.started + self.policy.deadline - self.clock())

    def wait_after(self, error: TensorOpsError) -> float | None:
        """Seconds to wait before the next attempt, or None: give up and raise ``error``
        (with a note saying why, when it was a retry that gave up)."""
        error.attempts = self.made
        if not error.retryable:
            if self.made > 1:
                error.add_note(f"(after {self.made} attempts)")
            return None
        if self.made >= self.policy.attempts:
            if self.policy.attempts > 1:
                error.add_note(f"(gave up after {self.made} attempts, the most Retry allows)")
            return None
        ceiling = min(self.policy.max_backoff, self.policy.backoff * 2 ** (self.made - 1))
        wait = self.draw(0.0, ceiling)
        if error.retry_after is not None:
            wait = max(wait, error.retry_after)
        left = self.left()
        # No time for the wait and a call after it: give up now, with the error in hand.
        if left is not None and wait >= left:
            error.add_note(
                f"(gave up after {self.made} attempts: the next would begin past the retry "
                f"deadline of {self.policy.deadline:g} s)"
            )
            return None
        return wait
