"""Triton's ``ModelStreamInfer`` through ``tritonclient.grpc`` (``start_stream`` and
``async_stream_infer``), unchanged, against a real server: each request answered on the stream
with its id, bit for bit as NumPy computes it; a refused request answered with its error and the
stream going on; a cancelled stream giving back every byte of the budget it held; the key
checked when the stream starts; tensors in shared memory; what a stream holds of the memory budget, idle and once ended,
and the share the reads of idle streams may take."""

import asyncio
import contextlib
import hashlib
import queue
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from app.grpc.receive import RECEIVE_COPIES
from app.main import create_app
from app.pipeline.admission import MemoryBudget
from app.registry import REGISTRY
from app.settings import Settings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.grpc_raw import RawConnection, framed
from tests.support import (
    assert_same_bits,
    free_port,
    grpc_channel,
    grpc_serving,
    inference_stub,
    launch_server,
    sample,
    stop_server,
    v2_name,
)

pytestmark = pytest.mark.e2e

KEY = "k-5e1b7c3a9d2f4086b1c3e5f7091b2d4f"
RESERVED = re.compile(r"^tensor_ops_memory_reserved_bytes (\S+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


class Stream:
    """A tritonclient stream whose answers are collected in arrival order."""

    def __init__(self, address: str, **options: Any) -> None:
        self.client = grpcclient.InferenceServerClient(address)
        self.answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(lambda result, error: self.answers.put((result, error)), **options)

    def roll(self, data: Any, shift: Any, axes: Any, request_id: str, model: str = "roll") -> None:
        inputs = []
        for name, array in (("data", data), ("shift", shift), ("axes", axes)):
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        self.client.async_stream_infer(model, inputs, request_id=request_id)

    def next(self) -> tuple[Any, Any]:
        return self.answers.get(timeout=30)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def reserved(url: str) -> float:
    match = RESERVED.search(httpx.get(f"{url}/metrics").text)
    assert match is not None
    return float(match.group(1))


def wait_for_reserved(url: str, test: Any) -> float:
    deadline = time.monotonic() + 10
    while True:
        value = reserved(url)
        if test(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


CASES = [
    ("FP32", (4, 5), [1, -2], [0, 1]),
    ("INT8", (7,), [3], [0]),
    ("FP64", (2, 3, 4), [5], [2]),
    ("UINT16", (3, 3), [-1, -1], [0, 1]),
    ("FP16", (6, 2), [2], [-2]),
    ("BOOL", (5,), [1], [0]),
]


def test_each_request_is_answered_with_its_id_bit_exact(server: tuple[str, str]) -> None:
    stream = Stream(server[1])
    try:
        expected = {}
        for index, (name, shape, shift, axes) in enumerate(CASES * 3):
            data = sample(name, shape, finite=False, seed=index)
            shift_array = np.array(shift, dtype=np.int64 if index % 2 else np.int32)
            stream.roll(data, shift_array, np.array(axes, dtype=np.int64), f"req-{index}")
            expected[f"req-{index}"] = np.roll(data, shift, axes)
        for sent in list(expected):  # answered in order
            result, error = stream.next()
            assert error is None
            response = result.get_response()
            assert response.id == sent
            assert response.model_name == "roll"
            assert response.model_version == "7"  # Roll-7
            assert_same_bits(result.as_numpy("output"), expected.pop(response.id))
        assert not expected
    finally:
        stream.close()


def test_a_refused_request_gets_its_error_and_the_stream_goes_on(server: tuple[str, str]) -> None:
    stream = Stream(server[1])
    data = np.arange(6, dtype=np.float32)
    one = np.array([1], dtype=np.int64)
    try:
        stream.roll(data, one, np.array([0]), "first")
        stream.roll(data, one, np.array([3]), "bad-axis")  # axis 3 of a 1-D tensor: refused
        stream.roll(data, one, np.array([0]), "lost", model="nope")
        stream.roll(data, np.array([2]), np.array([0]), "after")
        result, error = stream.next()
        assert error is None and result.get_response().id == "first"
        result, error = stream.next()
        assert result is None
        assert isinstance(error, InferenceServerException)
        assert "axes" in error.message()
        result, error = stream.next()
        assert result is None and "'nope' is not served here" in error.message()
        result, error = stream.next()
        assert error is None and result.get_response().id == "after"
        assert_same_bits(result.as_numpy("output"), np.roll(data, 2))
    finally:
        stream.close()


def _stream_answers(data: bytes) -> list[pb.ModelStreamInferResponse]:
    answers = []
    while data:
        length = int.from_bytes(data[1:5], "big")
        answers.append(pb.ModelStreamInferResponse.FromString(data[5 : 5 + length]))
        data = data[5 + length :]
    return answers


def test_an_empty_message_is_refused_on_the_stream_which_goes_on(
    server: tuple[str, str],
) -> None:
    """A zero-length message is a ModelInferRequest of no fields (model ''): refused as an
    error_message like any other bad message, not taken for one that never came (which ended
    the stream and dropped the good message after it)."""
    data = np.arange(4, dtype=np.float32)
    request = pb.ModelInferRequest(model_name="roll", id="after")
    for name, array in (("data", data), ("shift", np.array([1])), ("axes", np.array([0]))):
        request.inputs.add(name=name, datatype=v2_name(array.dtype), shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
    connection = RawConnection(int(server[1].rsplit(":", 1)[1]))
    try:
        stream = connection.start("ModelStreamInfer")
        connection.send(stream, framed(b"") + framed(request.SerializeToString()), end=True)
        outcome = connection.wait(stream, 30)
    finally:
        connection.close()
    assert (outcome.status, outcome.message) == (0, "")
    answers = _stream_answers(outcome.data)
    assert [answer.error_message for answer in answers] == [
        f"model: model '' is not served here; models: {', '.join(REGISTRY)}",
        "",
    ]
    answer = answers[1].infer_response
    assert answer.id == "after"
    assert_same_bits(np.frombuffer(answer.raw_output_contents[0], np.float32), np.roll(data, 1))


def test_a_cancelled_stream_gives_back_its_reservations(server: tuple[str, str]) -> None:
    url = server[0]
    assert wait_for_reserved(url, lambda value: value == 0) == 0
    stream = Stream(server[1])
    data = np.zeros((1 << 20,), dtype=np.float32)  # 4 MiB: reserved, not lost in the noise
    try:
        stream.roll(data, np.array([1]), np.array([0]), "large")
        result, error = stream.next()
        assert error is None and result.as_numpy("output").shape == data.shape
        # Waiting for the next message, the stream holds the largest one's room.
        assert wait_for_reserved(url, lambda value: value > 0) > 0
        for index in range(4):  # and cancelled with messages on their way
            stream.roll(data, np.array([index]), np.array([0]), f"in-flight-{index}")
    finally:
        stream.close(cancel=True)
    assert wait_for_reserved(url, lambda value: value == 0) == 0


def test_a_stream_that_ends_gives_back_its_reservations(server: tuple[str, str]) -> None:
    stream = Stream(server[1])
    stream.roll(np.arange(3, dtype=np.int32), np.array([1]), np.array([0]), "one")
    _, error = stream.next()
    assert error is None
    stream.close()
    assert wait_for_reserved(server[0], lambda value: value == 0) == 0


def test_the_key_is_checked_when_the_stream_starts(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} streams\n")
    port = free_port()
    _, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": str(port), "TENSOR_OPS_API_KEYS_FILE": str(keys)}
    )
    try:
        data, one = np.arange(4, dtype=np.int64), np.array([1])
        refused = Stream(f"127.0.0.1:{port}")
        # The stream is refused as it starts: tritonclient may already know when it sends.
        with contextlib.suppress(InferenceServerException):
            refused.roll(data, one, one * 0, "no-key")
        result, error = refused.next()
        assert result is None
        assert "StatusCode.UNAUTHENTICATED" in str(error.status())
        refused.close()
        admitted = Stream(f"127.0.0.1:{port}", headers={"authorization": f"Bearer {KEY}"})
        admitted.roll(data, one, one * 0, "with-key")
        result, error = admitted.next()
        assert error is None
        assert_same_bits(result.as_numpy("output"), np.roll(data, 1))
        admitted.close()
    finally:
        stop_server(process)


def test_tensors_in_shared_memory_each_message_on_its_own(server: tuple[str, str]) -> None:
    """Inputs and output named by shared memory parameters, as ``ModelInfer`` takes them: the
    output written into the client's region bit for bit, the answer naming it; a message whose
    output does not fit is answered with its error and the stream goes on."""
    data = sample("FP32", (6, 7), finite=False, seed=11)
    size = data.nbytes
    key = f"/tensor-ops-stream-{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region(key[1:], key, 2 * size + 64)
    stream = Stream(server[1])
    try:
        shm.set_shared_memory_region(handle, [data])
        stream.client.register_system_shared_memory("io", key, 2 * size + 64)

        def send(shift: int, request_id: str, output_bytes: int) -> None:
            tensor = grpcclient.InferInput("data", list(data.shape), "FP32")
            tensor.set_shared_memory("io", size)
            inputs = [tensor]
            for name, value in (("shift", shift), ("axes", 1)):
                small = grpcclient.InferInput(name, [1], "INT64")
                small.set_data_from_numpy(np.array([value], np.int64))
                inputs.append(small)
            output = grpcclient.InferRequestedOutput("output")
            output.set_shared_memory("io", output_bytes, offset=size + 64)
            stream.client.async_stream_infer(
                "roll", inputs, outputs=[output], request_id=request_id
            )

        def written() -> Any:
            raw = shm.get_contents_as_numpy(handle, np.uint8, [size], size + 64)
            return raw.copy().view(np.float32).reshape(data.shape)

        send(2, "first", size)
        result, error = stream.next()
        assert error is None
        response = result.get_response()
        assert response.id == "first"
        assert len(response.raw_output_contents) == 0
        parameters = response.outputs[0].parameters
        assert parameters["shared_memory_region"].string_param == "io"
        assert parameters["shared_memory_byte_size"].int64_param == size
        assert parameters["shared_memory_offset"].int64_param == size + 64
        assert_same_bits(written(), np.roll(data, 2, 1))

        send(3, "too-small", size - 4)
        result, error = stream.next()
        assert result is None
        assert error.message() == (
            "output.parameters.shared_memory_byte_size: "
            f"shared_memory_byte_size {size - 4} is too small: the output takes {size} bytes "
            "(shape [6, 7], FP32)"
        )
        assert_same_bits(written(), np.roll(data, 2, 1))  # not touched

        send(-1, "after", size)
        result, error = stream.next()
        assert error is None
        assert result.get_response().id == "after"
        assert_same_bits(written(), np.roll(data, -1, 1))
    finally:
        stream.client.unregister_system_shared_memory()
        stream.close()
        shm.destroy_shared_memory_region(handle)


# What a stream holds of the budget, in process (the budget object read directly)

MiB = 1 << 20


def roll_message(data: Any, shift: int, request_id: str) -> Any:
    """A roll of ``data`` along its first axis, its tensors as raw contents."""
    message = pb.ModelInferRequest(model_name="roll", id=request_id)
    arrays = {"data": data, "shift": np.array([shift]), "axes": np.array([0])}
    for name, array in arrays.items():
        message.inputs.add(name=name, datatype=v2_name(array.dtype), shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    return message


class RawStream:
    """A ``ModelStreamInfer`` call of the generated asyncio client, fed message by message."""

    def __init__(self, stub: Any) -> None:
        self.outgoing: asyncio.Queue[Any] = asyncio.Queue()
        self.call = stub.ModelStreamInfer(self._messages())

    async def _messages(self) -> Any:
        while (message := await self.outgoing.get()) is not None:
            yield message

    def send(self, message: Any) -> None:
        self.outgoing.put_nowait(message)

    async def answer(self) -> Any:
        return await asyncio.wait_for(self.call.read(), 30)

    async def end(self) -> None:
        """The client's last message sent; the call's end awaited."""
        self.outgoing.put_nowait(None)
        assert await self.answer() is grpc.aio.EOF
        assert await self.call.code() is grpc.StatusCode.OK


async def settle(budget: MemoryBudget, expected: int) -> int:
    """``budget.in_use`` once it is ``expected`` (the server's side moves a moment after the
    client's), or as it is after a few seconds."""
    for _ in range(250):
        if budget.in_use == expected:
            break
        await asyncio.sleep(0.02)
    return budget.in_use


@pytest.mark.anyio
async def test_an_idle_stream_holds_one_pending_read_and_gives_it_back() -> None:
    """Waiting for its next message, a stream holds the worst case of the one read it keeps
    posted (gRPC takes the message off the wire only while a read is pending), nothing more;
    ended, nothing."""
    app = create_app(Settings(memory_budget_bytes=64 * MiB, max_body_bytes=4 * MiB))
    budget = app.state.budget
    one_read = RECEIVE_COPIES * 4 * MiB
    data = np.arange(1 * MiB, dtype=np.float32)  # 4 MiB: its own reservation is counted
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stream = RawStream(inference_stub(channel))
        stream.send(roll_message(data[:5], 1, "small"))
        answer = await stream.answer()
        assert answer.error_message == ""
        assert answer.infer_response.id == "small"
        assert await settle(budget, one_read) == one_read
        # A message as large as the limit allows, then idle again: the same one read.
        stream.send(roll_message(data[: (4 * MiB - 4096) // 4], 3, "large"))
        answer = await stream.answer()
        assert answer.error_message == ""
        output = np.frombuffer(answer.infer_response.raw_output_contents[0], np.float32)
        assert_same_bits(output, np.roll(data[: (4 * MiB - 4096) // 4], 3))
        assert await settle(budget, one_read) == one_read
        await stream.end()
        assert await settle(budget, 0) == 0


@pytest.mark.anyio
async def test_idle_streams_leave_half_the_budget_to_other_calls() -> None:
    """The reads of idle streams take at most half the budget: four streams of 8 MiB reads in
    a 64 MiB budget; a fifth waits for a turn while a unary call still has the memory it
    needs, and gets its turn when a stream ends."""
    app = create_app(
        Settings(memory_budget_bytes=64 * MiB, max_body_bytes=4 * MiB, admission_timeout=60)
    )
    budget = app.state.budget
    one_read = RECEIVE_COPIES * 4 * MiB
    data = np.arange(3 * MiB // 4, dtype=np.int32)  # 3 MiB: with its read, some 14 MiB
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stub = inference_stub(channel)
        idle = [RawStream(stub) for _ in range(4)]
        for number, stream in enumerate(idle):
            stream.send(roll_message(data[:4], number, f"idle-{number}"))
            answer = await stream.answer()
            assert answer.infer_response.id == f"idle-{number}"
        assert await settle(budget, 4 * one_read) == 32 * MiB
        waiting = RawStream(stub)
        waiting.send(roll_message(data, 7, "waited"))
        # Its message is not read yet (it would be answered at once): the unary call has room.
        response = await stub.ModelInfer(roll_message(data, 5, "unary"))
        output = np.frombuffer(response.raw_output_contents[0], np.int32)
        assert_same_bits(output, np.roll(data, 5))
        # Its answer's memory is given back once the call is over: the streams' reads remain.
        assert await settle(budget, 32 * MiB) == 32 * MiB
        await idle[0].end()
        answer = await waiting.answer()
        assert answer.error_message == ""
        assert answer.infer_response.id == "waited"
        output = np.frombuffer(answer.infer_response.raw_output_contents[0], np.int32)
        assert_same_bits(output, np.roll(data, 7))
        for stream in (*idle[1:], waiting):
            await stream.end()
        assert await settle(budget, 0) == 0


@pytest.mark.anyio
async def test_a_message_in_hand_is_not_held_back_by_the_next_read() -> None:
    """The read posted while a message runs goes ahead only into room free now: a message that
    leaves no room for it is served (as the same unary call is), not refused busy waiting for
    memory the next read waits for."""
    app = create_app(Settings(memory_budget_bytes=64 * MiB, admission_timeout=2))
    budget = app.state.budget  # the default body limit: a read's worst case is the budget
    data = np.arange(2 * MiB, dtype=np.float32)  # 8 MiB, some 16 held and 16 more for its output
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stream = RawStream(inference_stub(channel))
        for number in range(3):
            stream.send(roll_message(data, number, f"large-{number}"))
        for number in range(3):
            answer = await stream.answer()
            assert answer.error_message == ""
            assert answer.infer_response.id == f"large-{number}"
            output = np.frombuffer(answer.infer_response.raw_output_contents[0], np.float32)
            assert_same_bits(output, np.roll(data, number))
        await stream.end()
        assert await settle(budget, 0) == 0


@pytest.mark.anyio
async def test_a_stream_idle_past_the_receive_limit_ends_deadline_exceeded_saying_why() -> None:
    """A stream waits for its next message as long as one message may take to arrive
    (TENSOR_OPS_BODY_TIMEOUT at most): past it the stream ends DEADLINE_EXCEEDED with a message
    that says it was the wait for the next message and what to do, after every answer before
    it; its read's memory is given back."""
    app = create_app(Settings(memory_budget_bytes=64 * MiB, body_timeout=1))
    budget = app.state.budget
    data = np.arange(6, dtype=np.int16)
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stream = RawStream(inference_stub(channel))
        stream.send(roll_message(data, 2, "before"))
        answer = await stream.answer()
        assert answer.error_message == ""
        assert answer.infer_response.id == "before"
        output = np.frombuffer(answer.infer_response.raw_output_contents[0], np.int16)
        assert_same_bits(output, np.roll(data, 2))
        started = time.monotonic()
        assert await asyncio.wait_for(stream.call.code(), 30) is grpc.StatusCode.DEADLINE_EXCEEDED
        assert 0.8 <= time.monotonic() - started <= 10
        assert await stream.call.details() == (
            "the stream's next message did not come within 1 s: a stream waits that long "
            "for each message (the time the largest message takes at "
            "TENSOR_OPS_MIN_TRANSFER_RATE after TENSOR_OPS_RATE_WINDOW, at most "
            "TENSOR_OPS_BODY_TIMEOUT); start a new stream when there is more to send"
        )
        assert await settle(budget, 0) == 0


@pytest.mark.anyio
async def test_a_stream_past_the_streams_share_waits_its_turn_then_ends_busy() -> None:
    """Four idle streams hold the reads half a 64 MiB budget allows (8 MiB each); a fifth waits
    for a turn up to the admission timeout, then ends RESOURCE_EXHAUSTED saying why, with a
    Retry-After; the idle streams go on, bit-exact, and everything is given back."""
    app = create_app(
        Settings(memory_budget_bytes=64 * MiB, max_body_bytes=4 * MiB, admission_timeout=1)
    )
    budget = app.state.budget
    data = np.arange(12, dtype=np.float64).reshape(3, 4)
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stub = inference_stub(channel)
        idle = [RawStream(stub) for _ in range(4)]
        for number, stream in enumerate(idle):
            stream.send(roll_message(data, number, f"idle-{number}"))
            assert (await stream.answer()).infer_response.id == f"idle-{number}"
        late = RawStream(stub)
        late.send(roll_message(data, 1, "late"))
        started = time.monotonic()
        code = await asyncio.wait_for(late.call.code(), 30)
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert 0.9 <= time.monotonic() - started <= 10
        assert await late.call.details() == (
            "the service is busy: the 4 stream reads this worker keeps posted (half its memory "
            "budget) all wait for a message, and no turn came free within 1 s "
            "(TENSOR_OPS_ADMISSION_TIMEOUT); retry later"
        )
        trailing = dict(await late.call.trailing_metadata())
        assert trailing["retry-after"] == "1"
        for number, stream in enumerate(idle):
            stream.send(roll_message(data, -number, f"again-{number}"))
            answer = await stream.answer()
            assert answer.error_message == ""
            assert answer.infer_response.id == f"again-{number}"
            output = np.frombuffer(answer.infer_response.raw_output_contents[0], np.float64)
            assert_same_bits(output.reshape(3, 4), np.roll(data, -number, 0))
            await stream.end()
        assert await settle(budget, 0) == 0
