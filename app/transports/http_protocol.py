"""uvicorn's HTTP/1.1 protocol, with each answer's head and body leaving in one write.

uvicorn writes an answer's status line and headers when the app sends ``http.response.start``,
and its body at the next message: two system calls. A replica killed or stopped between the two
(under load, often enough: two failover runs in five caught one) leaves a load balancer with an
answer it has begun to pass on, which it can neither finish nor send again to another replica:
the client's request fails though the request itself was never served. Joined, an answer leaves
whole or not at all, and nginx moves the request on (``proxy_next_upstream``).
"""

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: A write of up to this many bytes (an answer's head, a small body) waits for the next write,
#: at most to the end of the event loop's turn; a larger one goes at once.
HELD_BYTES = 64 * 1024


class JoinedWrites:
    """A connection's transport that holds a small write back until the next one, and sends the
    two with one system call; or sends it alone at the end of the event loop's turn. The app
    sends an answer's head and body in one turn, so they leave together."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines([held, data])
        elif len(data) <= HELD_BYTES:
            self._held = bytes(data)
            asyncio.get_running_loop().call_soon(self._release)
        else:
            self._transport.write(data)

    def _release(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._release()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        # Everything else (flow control, extra info, abort) is the real transport's.
        return getattr(self._transport, name)


class JoinedWritesProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through ``JoinedWrites``. ``python -m app`` serves
    with it; uvicorn's own command takes it as
    ``--http app.transports.http_protocol:JoinedWritesProtocol``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = cast(asyncio.Transport, JoinedWrites(transport))
