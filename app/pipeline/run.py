"""A request's life on any transport: reserve, read, decode, check, compute, encode, release.

A transport supplies an ``Exchange``: how to read its body, how its inputs and attributes are
decoded (and the memory that costs), how its answer is encoded (and what that costs). The
pipeline runs the stages in order, reserves each stage's memory before the stage holds it,
moves large work off the event loop, and gives the reservation back when the answer has been
sent or the request has failed. It knows nothing of URLs, headers or protocols.
"""

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app import tracing
from app.pipeline.admission import MemoryBudget, Reservation
from app.pipeline.jobs import Job, Limits, with_kernel_span
from app.pipeline.statistics import Statistics
from app.pipeline.threads import run_sized
from app.settings import Settings

#: A request body: bytes as they came, or a view of the buffer they were read into.
Body = bytes | bytearray | memoryview
#: Anything with the buffer protocol, or an iterable of byte pieces made as they are sent.
Buffer = Any


@dataclass
class Answer:
    """An encoded answer: buffers to send one after the other, unjoined, and their metadata."""

    buffers: Sequence[Buffer]
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)


class Exchange(Protocol):
    """One request of one transport, as the pipeline drives it."""

    def prepare(self, body: Body) -> int:
        """A cheap first look at the body (framing, the JSON envelope, an archive's directory);
        returns the bytes decoding will hold beyond the body itself."""

    def decode(self, limits: Limits) -> Job:
        """The inputs and attributes, decoded and checked against the limits and the spec."""

    def encoding_bytes(self, job: Job) -> int:
        """The bytes the output and its encoding will hold at their peak."""

    def encode(self, job: Job) -> Answer:
        """Run the job and encode its answer."""


#: Reads the body, growing the reservation as its bytes arrive.
BodyReader = Callable[[Reservation], Awaitable[Body]]


class Pipeline:
    """Runs requests of every transport within one worker's settings and memory budget."""

    def __init__(self, settings: Settings, budget: MemoryBudget) -> None:
        self.settings = settings
        self.budget = budget
        self.limits = Limits.of(settings)
        #: Triton's statistics of the requests this pipeline runs (app/pipeline/statistics.py).
        self.statistics = Statistics(settings.metrics_dir)

    async def run(
        self, read: BodyReader, exchange: Exchange, reserved: Callable[[], None] | None = None
    ) -> tuple[Answer, Reservation]:
        """The answer to one request, and the reservation the caller releases once it is sent;
        ``reserved`` is called once all the request will hold is reserved, before its work.

        Any failure releases the reservation and propagates (a ``ServiceError`` for the client's
        faults), for the transport to render. With tracing on, the stages are spans: "read",
        "decode" (with the memory it waits for), and "encode" with the "kernel" inside it.
        """
        started = time.perf_counter_ns()  # Triton's statistics (app/pipeline/statistics.py)
        # Tracing's stage spans, when it is on: a test here, and of a local below, when off.
        stages = None if tracing.TRACER is None else tracing.stages()
        reservation = self.budget.reserve()
        try:
            if stages is not None:
                stages.begin("read")
            body = await read(reservation)
            large = len(body) > self.settings.offload_bytes
            if stages is not None:
                stages.begin("decode", large)
            # Small work inline, not through run_sized's await (a small request's every
            # microsecond counts); large work in a thread.
            if large:
                decoding = await run_sized(True, exchange.prepare, body)
            else:
                decoding = exchange.prepare(body)
            if not reservation.uncounted(len(body) + decoding):
                await reservation.grow_to(len(body) + decoding)
            # A small body may decode large (an .npz member deflated 1,000 to 1): decoding and
            # the plan, which reads what was decoded, go to a thread by what they will hold.
            large = large or decoding > self.settings.offload_bytes
            if large:
                job = await run_sized(True, exchange.decode, self.limits)
            else:
                job = exchange.decode(self.limits)
            decoded, waited = time.perf_counter_ns(), reservation.waited_ns
            offload = large or job.output_bytes > self.settings.offload_bytes
            if stages is not None:
                stages.op(job.op.name)
                stages.begin("encode", offload)
                job = with_kernel_span(job)
            # The output and its encoding, and the kernel's own temporaries while it runs.
            compute = exchange.encoding_bytes(job) + job.workspace_bytes
            needed = max(reservation.held, reservation.peak) + compute
            if not reservation.uncounted(needed):
                await reservation.grow_to(needed)
            if reserved is not None:
                reserved()
            answer = (
                await run_sized(True, exchange.encode, job) if offload else exchange.encode(job)
            )
            if stages is not None:
                stages.end()
        except BaseException as error:
            if stages is not None:
                stages.fail(error)
            # Counted under its model when the exchange knows it (a gRPC message: once read).
            op = getattr(exchange, "op", None)
            if op is not None:
                self.statistics.failed(op.model_key, time.perf_counter_ns() - started)
            await reservation.release()
            raise
        self.statistics.succeeded(
            job.op.model_key,
            time.perf_counter_ns() - started,
            reservation.waited_ns,
            decoded - started - waited,
            job.kernel_ns,
        )
        return answer, reservation
