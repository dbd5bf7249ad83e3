"""A stream's refused messages leave nothing behind, against a real ``python -m app`` worker: a
stream that goes on after refusals holds what a unary call's refusal leaves, and its messages'
bytes are not kept (issue 42, point 5)."""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.support import free_port, launch_server, stop_server

pytestmark = pytest.mark.e2e

MiB = 1 << 20
RESERVED = re.compile(r"^tensor_ops_memory_reserved_bytes (\S+)$", re.MULTILINE)
#: The worker's message limit: a read reserves twice it while a message arrives.
MAX_BODY = 256 * MiB
#: What a refused message is here: 200 MiB of raw contents for a tensor of 4 bytes.
REFUSED_MIB = 200
#: The memory model's promise (docs/limits.md): growth within 1.25 x the reservation + 16 MiB;
#: nothing reserved is nothing held, within the same 16 MiB.
GROWTH, SLACK = 1.25, 16 * MiB


class Worker:
    """A ``python -m app`` with one worker (its pid is the worker's) and a gRPC stub to it."""

    def __init__(self, url: str, process: Any, port: int) -> None:
        self.url, self.process = url, process
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        self.stub: Any = pb_grpc.GRPCInferenceServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.peak = 0
        self._sampling = False

    def resident(self) -> int:
        fields = Path(f"/proc/{self.process.pid}/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")

    def reserved(self) -> float:
        match = RESERVED.search(httpx.get(f"{self.url}/metrics").text)
        assert match is not None
        return float(match.group(1))

    def settled(self, reserved: int = 0) -> int:
        """Resident memory once the budget holds ``reserved`` bytes and it stops moving."""
        deadline = time.monotonic() + 10
        while self.reserved() != reserved:
            assert time.monotonic() < deadline, "the budget came back"
            time.sleep(0.05)
        previous = self.resident()
        for _ in range(40):
            time.sleep(0.1)
            current = self.resident()
            if abs(current - previous) < MiB:
                return current
            previous = current
        return previous

    def sampling(self) -> threading.Thread:
        """Start sampling the peak of resident memory (``stop_sampling`` ends it)."""
        self.peak, self._sampling = self.resident(), True

        def sample() -> None:
            while self._sampling:
                self.peak = max(self.peak, self.resident())
                time.sleep(0.002)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        return thread

    def stop_sampling(self, thread: threading.Thread) -> int:
        self._sampling = False
        thread.join()
        return self.peak


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    port = free_port()
    url, process = launch_server(
        env={
            "TENSOR_OPS_GRPC_PORT": str(port),
            "TENSOR_OPS_MEMORY_BUDGET_BYTES": str(2 << 30),
            "TENSOR_OPS_MAX_BODY_BYTES": str(MAX_BODY),
        },
        command=["-m", "app"],
        settled=True,
    )
    running = Worker(url, process, port)
    yield running
    running.channel.close()
    stop_server(process)


def refused_request(request_id: str) -> Any:
    """A ``gather`` whose ``data`` of shape [1] comes with 200 MiB of raw contents: refused
    INVALID_ARGUMENT once the message has been read whole."""
    request = pb.ModelInferRequest(model_name="gather", id=request_id)
    tensor = request.inputs.add(name="data", datatype="FP32")
    tensor.shape.append(1)
    request.raw_input_contents.append(bytes(REFUSED_MIB * MiB))
    return request


def test_a_stream_s_refused_messages_leave_nothing_behind(worker: Worker) -> None:
    """One 200 MiB message refused as a unary call, then three refused on one stream that stays
    open, each sent once the one before has been answered: at rest the stream holds what the
    unary refusal left (within the memory model's 16 MiB), still open and once ended, and its
    peak is within what the memory model lets one message's read reach (1.25 x twice the
    message limit + 16 MiB). Before: +1,035 MiB with the stream open, +603 MiB once it ended
    (each refused message kept by a cycle through its error's traceback until the collector
    ran), at a peak of +1,072 MiB; the unary refusal +2 MiB."""
    request = refused_request("refused")
    start = worker.settled()
    with pytest.raises(grpc.RpcError) as refused:
        worker.stub.ModelInfer(request)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "shape [1] of FP32 takes 4 bytes" in str(refused.value.details())
    before = worker.settled()
    after_unary = before - start

    messages: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        while (item := messages.get()) is not None:
            yield item

    sampler = worker.sampling()
    answers = worker.stub.ModelStreamInfer(requests())
    try:
        for _ in range(3):
            messages.put(request)
            answer = next(answers)
            assert "shape [1] of FP32 takes 4 bytes" in answer.error_message, answer
            assert answer.infer_response.id == "refused"
        # The stream's next read is posted: its worst case (twice the message limit) reserved.
        still_open = worker.settled(2 * MAX_BODY)
    finally:
        peak = worker.stop_sampling(sampler)
        messages.put(None)
    assert list(answers) == []
    ended = worker.settled()
    assert still_open - before <= after_unary + SLACK, (still_open - before) / MiB
    assert ended - before <= after_unary + SLACK, (ended - before) / MiB
    assert peak - before <= GROWTH * 2 * MAX_BODY + SLACK, (peak - before) / MiB
