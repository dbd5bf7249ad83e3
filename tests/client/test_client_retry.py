"""The client's retries: the policy's arithmetic (a fake clock), and for real, a service that
answers 503 while its memory is held (its ``Retry-After`` honoured, on HTTP and gRPC) and a
replica killed in the middle of a call (the call made again, through a proxy, on the other).
"""

import asyncio
import contextlib
import itertools
import os
import pickle
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tensor_ops_client import AsyncTensorOpsClient, Retry, TensorOpsClient, TensorOpsError
from tensor_ops_client._retry import Attempts
from tests.support import free_port, launch_server, server_output, stop_server

pytestmark = pytest.mark.e2e

# --- The policy ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def retryable(retry_after: float | None = None) -> TensorOpsError:
    return TensorOpsError(503, "busy", kind="busy", retry_after=retry_after, retryable=True)


def test_backoff_doubles_up_to_its_cap_with_full_jitter() -> None:
    clock = Clock()
    ceilings: list[float] = []

    def draw(low: float, high: float) -> float:
        assert low == 0.0
        ceilings.append(high)
        return high / 2

    attempts = Attempts(Retry(attempts=6, deadline=None, backoff=0.5, max_backoff=3.0), clock, draw)
    waits = []
    for _ in range(5):
        attempts.timeout(10.0)
        waits.append(attempts.wait_after(retryable()))
    assert ceilings == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert waits == [0.25, 0.5, 1.0, 1.5, 1.5]
    attempts.timeout(10.0)
    error = retryable()
    assert attempts.wait_after(error) is None  # the sixth attempt was the last
    assert error.attempts == 6


def test_retry_after_is_a_floor_and_the_deadline_a_ceiling() -> None:
    clock = Clock()
    attempts = Attempts(Retry(attempts=10, deadline=5.0, backoff=0.1), clock, lambda a, b: b)
    assert attempts.timeout(30.0) == 5.0  # the first attempt's timeout: cut to the deadline
    assert attempts.wait_after(retryable(retry_after=2.0)) == 2.0
    clock.now += 2.5
    assert attempts.timeout(30.0) == pytest.approx(2.5)
    # Waiting 3 s would end past the deadline: give up now, with the 503 in hand.
    assert attempts.wait_after(retryable(retry_after=3.0)) is None


def test_what_is_not_retryable_is_raised_at_once() -> None:
    attempts = Attempts(Retry(), Clock(), lambda a, b: b)
    attempts.timeout(1.0)
    refused = TensorOpsError(422, "axes: out of range", kind="spec_violation", field="axes")
    assert attempts.wait_after(refused) is None
    assert refused.attempts == 1


@pytest.mark.parametrize(
    ("setting", "count"), [(True, 5), (None, 5), (False, 1), (3, 3), (Retry(attempts=2), 2)]
)
def test_retry_settings(setting: Any, count: int) -> None:
    assert Retry.of(setting).attempts == count


@pytest.mark.parametrize(
    "arguments", [{"attempts": 0}, {"deadline": 0}, {"deadline": -1.0}, {"backoff": 9.0}]
)
def test_bad_policies_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Retry"):
        Retry(**arguments)


def test_errors_pickle_with_every_field() -> None:
    error = TensorOpsError(
        503, "busy", {"x": 1}, kind="busy", field="data", request_id="r1", retry_after=1.0
    )
    error.attempts = 3
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TensorOpsError
    assert (copy.status, copy.message, copy.detail, copy.kind, copy.field) == (
        503, "busy", {"x": 1}, "busy", "data",
    )  # fmt: skip
    assert (copy.request_id, copy.retry_after, copy.attempts, str(copy)) == (
        "r1", 1.0, 3, "[503] busy",
    )  # fmt: skip


# --- A service whose memory is held: 503 with Retry-After --------------------------------------

BUDGET = 64 << 20


@pytest.fixture(scope="module")
def busy_server() -> Iterator[tuple[str, str]]:
    """A memory budget of 64 MiB and an admission timeout of half a second (Retry-After: 1)."""
    grpc_port = free_port()
    url, process = launch_server(
        env={
            "TENSOR_OPS_MEMORY_BUDGET_BYTES": str(BUDGET),
            "TENSOR_OPS_ADMISSION_TIMEOUT": "0.5",
            "TENSOR_OPS_GRPC_PORT": str(grpc_port),
        }
    )
    try:
        yield url, f"127.0.0.1:{grpc_port}"
    finally:
        stop_server(process)


def _reserved(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("tensor_ops_memory_reserved_bytes "):
            return float(line.split()[1])
    return 0.0


class Holder:
    """A request that has sent 56 MiB of a 60 MiB body and waits: what arrived stays reserved
    until it is let go, and 8 MiB of the budget are left."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.socket = socket.create_connection((host, int(port)))
        head = (
            f"POST /roll HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
            f"content-length: {60 << 20}\r\n\r\n"
        ).encode()
        self.socket.sendall(head + b'{"data": "' + b"A" * (56 << 20))
        deadline = time.monotonic() + 10
        while _reserved(url) < 56 << 20:
            assert time.monotonic() < deadline, "the held body was not reserved"
            time.sleep(0.05)

    def release_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.socket.close)
        timer.start()
        return timer


def _statuses() -> tuple[list[int], list[float], dict[str, Any]]:
    """httpx event hooks that note each answer's status and the time it came."""
    statuses: list[int] = []
    times: list[float] = []

    def note(response: httpx.Response) -> None:
        if response.request.method == "POST":
            statuses.append(response.status_code)
            times.append(time.monotonic())

    return statuses, times, {"response": [note]}


DATA = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: it needs more than the 8 MiB left


@pytest.mark.parametrize("transport", ["npz", "json", "v2"])
def test_a_503_is_retried_after_its_retry_after(
    busy_server: tuple[str, str], transport: Any
) -> None:
    url, _ = busy_server
    holder = Holder(url)
    statuses, times, hooks = _statuses()
    timer = holder.release_after(1.0)
    try:
        with (
            httpx.Client(base_url=url, event_hooks=hooks, timeout=30) as http,
            TensorOpsClient(transport=transport, http=http, retry=Retry(deadline=30)) as client,
        ):
            output = client.roll(DATA, 5, 0)
    finally:
        timer.join()
    np.testing.assert_array_equal(output, np.roll(DATA, 5))
    assert statuses[0] == 503 and statuses[-1] == 200, statuses
    assert set(statuses[:-1]) == {503}
    # The service said Retry-After: 1; the next attempt came no sooner (the admission wait
    # of the next attempt comes on top).
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= 1.0 for gap in gaps), gaps


def test_without_retry_the_503_is_raised_with_its_fields(busy_server: tuple[str, str]) -> None:
    url, _ = busy_server
    holder = Holder(url)
    try:
        with TensorOpsClient(url, retry=False) as client, pytest.raises(TensorOpsError) as caught:
            client.roll(DATA, 5, 0)
    finally:
        holder.socket.close()
    error = caught.value
    assert (error.status, error.kind, error.retry_after, error.attempts) == (503, "busy", 1.0, 1)
    assert error.retryable
    assert error.request_id and len(error.request_id) == 32


def test_the_deadline_gives_up_with_the_last_503(busy_server: tuple[str, str]) -> None:
    url, _ = busy_server
    holder = Holder(url)
    try:
        policy = Retry(attempts=50, deadline=2.0)
        with TensorOpsClient(url, retry=policy) as client, pytest.raises(TensorOpsError) as caught:
            client.roll(DATA, 5, 0)
    finally:
        holder.socket.close()
    # After the first 503 and its Retry-After of 1 s, the second attempt has what is left of
    # the 2 s: it gets the next 503 (with a wait past the deadline), or its timeout, cut to
    # the deadline, passes while it waits for memory.
    error = caught.value
    assert error.attempts == 2
    assert (error.status, error.kind) in ((503, "busy"), (0, None))
    assert len(error.__notes__) == 1
    assert "after 2 attempts" in error.__notes__[0]


def test_grpc_resource_exhausted_is_retried(busy_server: tuple[str, str]) -> None:
    url, target = busy_server
    holder = Holder(url)
    timer = holder.release_after(1.0)
    try:
        with TensorOpsClient(url, transport="grpc", grpc_target=target) as client:
            output = client.roll(DATA, -3, 0)
    finally:
        timer.join()
    np.testing.assert_array_equal(output, np.roll(DATA, -3))
    holder = Holder(url)
    try:
        with (
            TensorOpsClient(url, transport="grpc", grpc_target=target, retry=False) as client,
            pytest.raises(TensorOpsError) as caught,
        ):
            client.roll(DATA, -3, 0)
    finally:
        holder.socket.close()
    assert (caught.value.status, caught.value.kind, caught.value.retry_after) == (503, "busy", 1.0)
    assert caught.value.detail["grpc_code"] == "RESOURCE_EXHAUSTED"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_async_client_retries_the_same_way(busy_server: tuple[str, str]) -> None:
    url, _ = busy_server
    holder = await asyncio.to_thread(Holder, url)
    timer = holder.release_after(1.0)
    statuses: list[int] = []

    async def note(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    try:
        async with (
            httpx.AsyncClient(base_url=url, event_hooks={"response": [note]}, timeout=30) as http,
            AsyncTensorOpsClient(http=http, transport="json") as client,
        ):
            output = await client.roll(DATA, 7, 0)
    finally:
        await asyncio.to_thread(timer.join)
    np.testing.assert_array_equal(output, np.roll(DATA, 7))
    assert statuses[0] == 503 and statuses[-1] == 200, statuses


# --- A replica killed mid-call ------------------------------------------------------------------


class Proxy:
    """A TCP proxy in front of two replicas: each connection goes to the first replica that
    accepts one. Counts the bytes clients sent, so a test can act mid-call."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent_up = 0
        self.connections: list[int] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        for port in self.backends:
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                continue
            upstream.settimeout(None)
            self.connections.append(port)
            break
        else:
            client.close()
            return

        def pump(source: socket.socket, sink: socket.socket, up: bool) -> None:
            try:
                while chunk := source.recv(1 << 16):
                    if up:
                        self.sent_up += len(chunk)
                    sink.sendall(chunk)
            except OSError:
                pass
            finally:
                # Either side gone: both connections end (closed with data unread, the
                # client's is reset, as a replica's own connection is when it dies).
                for side in (source, sink):
                    with contextlib.suppress(OSError):
                        side.shutdown(socket.SHUT_RDWR)
                    side.close()

        threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()
        pump(client, upstream, True)

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("transport", ["npz", "grpc"])
def test_a_replica_killed_mid_call_is_retried_on_the_other(transport: Any) -> None:
    grpc_ports = [free_port(), free_port()]
    replicas = [launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)}) for port in grpc_ports]
    ports = [int(url.rsplit(":", 1)[1]) for url, _ in replicas]
    proxy = Proxy(grpc_ports if transport == "grpc" else ports)
    first = replicas[0][1]
    data = np.random.default_rng(3).standard_normal((4096, 4096)).astype(np.float32)  # 64 MiB

    def kill_mid_call() -> None:
        deadline = time.monotonic() + 60
        while proxy.sent_up < 16 << 20 and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(first.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_mid_call)
    killer.start()
    try:
        with TensorOpsClient(
            f"http://127.0.0.1:{proxy.port}",
            transport=transport,
            grpc_target=f"127.0.0.1:{proxy.port}",
            timeout=30,
            retry=Retry(attempts=5, deadline=60),
        ) as client:
            output = client.roll(data, 11, 1)
        killer.join()
        np.testing.assert_array_equal(output, np.roll(data, 11, axis=1))
        assert first.wait(10) == -signal.SIGKILL
        # The call began on the first replica and was made again on the second.
        assert proxy.connections[0] == proxy.backends[0]
        assert proxy.backends[1] in proxy.connections, proxy.connections
        assert "ModelInfer" in server_output(replicas[1][1]) or transport != "grpc"
    finally:
        killer.join()
        proxy.close()
        for _, process in replicas:
            stop_server(process)
