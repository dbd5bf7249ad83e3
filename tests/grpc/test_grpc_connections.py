"""The send watch's view of a connection from the kernel: the connection found by its peer
(again, at the descriptor it was found at, and never once that descriptor is another
connection's), and the bytes written to it counted."""

import socket
from collections.abc import Iterator

import pytest

from app.grpc.send import bytes_written, find_connection


@pytest.fixture
def connections() -> Iterator[tuple[int, list[socket.socket], list[socket.socket]]]:
    """A listening socket's port, 8 connections' client ends and their accepted ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    clients, accepted = [], []
    for _ in range(8):
        clients.append(socket.create_connection(server.getsockname()))
        accepted.append(server.accept()[0])
    try:
        yield server.getsockname()[1], clients, accepted
    finally:
        for sock in [*clients, *accepted, server]:
            sock.close()


def peer_of(sock: socket.socket) -> str:
    host, port = sock.getpeername()[:2]
    return f"ipv4:{host}:{port}"


def test_a_connection_is_found_by_its_peer_and_its_written_bytes_counted(
    connections: tuple[int, list[socket.socket], list[socket.socket]],
) -> None:
    port, _clients, accepted = connections
    for index in (3, 3, 5):  # the second time from where it was found
        found = find_connection(peer_of(accepted[index]), port)
        assert found is not None
        try:
            assert found.getpeername() == accepted[index].getpeername()
            before = bytes_written(found)
            assert before is not None
            accepted[index].sendall(b"x" * 300_000)
            after = bytes_written(found)
            assert after is not None
            # Written: taken by the client's kernel, or still queued in the server's.
            assert after - before == 300_000
        finally:
            found.close()
    assert find_connection("ipv4:127.0.0.1:1", port) is None
    assert find_connection("unix:/tmp/x", port) is None


def test_a_descriptor_closed_and_reused_is_not_taken_for_the_connection(
    connections: tuple[int, list[socket.socket], list[socket.socket]],
) -> None:
    port, _clients, accepted = connections
    peer = peer_of(accepted[2])
    first = find_connection(peer, port)
    assert first is not None
    first.close()
    number = accepted[2].fileno()
    accepted[2].close()
    # The lowest free number goes to the next socket: this one's, a connection of another kind.
    other = socket.create_connection(("127.0.0.1", port))
    try:
        assert other.fileno() == number
        assert find_connection(peer, port) is None
    finally:
        other.close()


def test_the_watches_of_one_connection_hold_one_descriptor(
    connections: tuple[int, list[socket.socket], list[socket.socket]],
) -> None:
    """However many answers are on their way on one connection, the send watch holds one
    duplicate of its descriptor, closed when the last of them lets go."""
    from app.grpc.send import SendWatch  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    port, _clients, accepted = connections
    watch = SendWatch(Settings())
    watch.port = port
    peer = peer_of(accepted[4])
    held = [watch.connection(peer) for _ in range(5)]
    assert held[0] is not None and all(sock is held[0] for sock in held)
    assert held[0].getpeername() == accepted[4].getpeername()
    for _ in range(4):
        watch.let_go(peer)
    assert held[0].fileno() >= 0  # still held by the fifth
    watch.let_go(peer)
    assert held[0].fileno() == -1  # closed with the last
    watch.let_go(peer)  # one more is nothing
    assert watch.connection("ipv4:127.0.0.1:1") is None


class Context:
    """A gRPC call's context as the send watch asks it: its peer."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@pytest.mark.parametrize(
    ("written_late", "expected"),
    [
        (300_000, True),  # the last bytes reach the kernel after the call has ended
        (100_000, False),  # gRPC stopped sending: the count stands still, short
        (0, False),
    ],
)
def test_an_answer_found_short_when_its_call_ends_is_looked_at_until_its_count_stands_still(
    connections: tuple[int, list[socket.socket], list[socket.socket]],
    written_late: int,
    expected: bool,
) -> None:
    """gRPC ends a call once the answer is in its own write buffer, and its poller thread
    writes the last bytes to the kernel after that (late on a loaded machine; before, such a
    call was logged CANCELLED though its client had the whole answer). ``settle`` looks again
    while the count grows, and says short only once it has stood still for SETTLE_STALL; it
    lets go of the connection either way."""
    import asyncio  # noqa: PLC0415

    from app.grpc.send import SETTLE_STALL, SendWatch  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    port, clients, accepted = connections
    nbytes = 300_000
    peer = peer_of(accepted[2])

    async def run() -> tuple[bool | None, float]:
        watches = SendWatch(Settings())
        watches.port = port
        loop = asyncio.get_running_loop()
        watch = watches.arm(Context(peer), nbytes, counted=True)
        assert watch is not None and watch.sock is not None
        accepted[2].sendall(b"x" * 1000)  # a first part, before the call ends
        told: asyncio.Future[bool | None] = loop.create_future()
        started = loop.time()
        watch.settle(told.set_result)
        assert not told.done()  # short: looked at again
        if written_late:
            await asyncio.sleep(0.05)
            accepted[2].sendall(b"x" * (written_late - 1000))
        result = await asyncio.wait_for(told, 5)
        assert watch not in watches.watches
        assert peer not in watches._connections  # its descriptor let go
        return result, loop.time() - started

    clients[2].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    result, seconds = asyncio.run(run())
    assert result is expected
    if not expected:
        assert seconds >= SETTLE_STALL
    else:
        assert seconds < SETTLE_STALL + 0.05 + 1  # told once the count was whole
