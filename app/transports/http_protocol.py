"""uvicorn's HTTP/1.1 protocol, with each answer's head and body leaving in one write, and the
body of a request whose protocol upgrade is declined read as its body.

uvicorn writes an answer's status line and headers when the app sends ``http.response.start``,
and its body at the next message: two system calls. A replica killed or stopped between the two
(under load, often enough: two failover runs in five caught one) leaves a load balancer with an
answer it has begun to pass on, which it can neither finish nor send again to another replica:
the client's request fails though the request itself was never served. Joined, an answer leaves
whole or not at all, and nginx moves the request on (``proxy_next_upstream``).

A request may offer to switch protocols (``Connection: Upgrade``, ``Upgrade: h2c``): Java's
``java.net.http.HttpClient`` does so on every cleartext request by default, as do Spring's
``RestClient`` and Ktor. The server may decline and answer over HTTP/1.1 (RFC 9110, 7.8), and
must then read the request's body as the body. httptools stops at the end of such a request's
head (the rest would be the new protocol's), and uvicorn's protocol then hands the app an empty
body (uvicorn issue 2722, open): a roll or gather refused as ``json_invalid``. Here the bytes
after the head are read as the body the request's own ``Content-Length`` or chunked coding
frames, and the connection closes after the answer (the parser cannot go on after an upgrade).
WebSocket upgrades, which uvicorn takes, are left to it.
"""

import asyncio
from typing import Any, cast

import httptools
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

    def data_received(self, data: bytes) -> None:
        data_received(self, data)


class DeclinedUpgradeBody:
    """The body of a request whose upgrade was declined, parsed by a parser of its own from the
    request's framing headers, and handed to the protocol as the body of the request."""

    def __init__(self, protocol: HttpToolsProtocol) -> None:
        self.protocol = protocol
        self.done = False
        self.parser = httptools.HttpRequestParser(self)
        head = [b"POST / HTTP/1.1\r\n"]
        head += [
            name + b": " + value + b"\r\n"
            for name, value in protocol.headers
            if name in (b"content-length", b"transfer-encoding")
        ]
        self.parser.feed_data(b"".join([*head, b"\r\n"]))

    def on_body(self, body: bytes) -> None:
        if not self.done:
            self.protocol.on_body(body)

    def on_message_complete(self) -> None:
        if not self.done:
            self.done = True
            self.protocol.on_message_complete()

    def feed(self, data: bytes) -> None:
        """Bytes of the body; those after it are dropped (the connection closes)."""
        if not self.done and data:
            self.parser.feed_data(data)


def data_received(self: HttpToolsProtocol, data: bytes) -> None:
    """uvicorn's ``data_received``, with a declined upgrade's body read as the body."""
    declined: DeclinedUpgradeBody | None = getattr(self, "_declined_upgrade", None)
    if declined is None:
        self._unset_keepalive_if_required()
    try:
        if declined is not None:
            declined.feed(data)
            return
        self.parser.feed_data(data)
    except httptools.HttpParserError:
        message = "Invalid HTTP request received."
        self.logger.warning(message)
        self.send_400_response(message)
    except httptools.HttpParserUpgrade as upgrade:
        if self._should_upgrade():
            self.handle_websocket_upgrade()
            return
        # Declined. httptools has completed the message with no body (the app's task, made but
        # not yet run, has read nothing): the body is to come.
        cycle = self.cycle
        cycle.body = bytearray()
        cycle.more_body = True
        cycle.keep_alive = False
        declined = DeclinedUpgradeBody(self)
        self._declined_upgrade = declined  # type: ignore[attr-defined]
        try:
            declined.feed(data[int(upgrade.args[0]) :])
        except httptools.HttpParserError:
            message = "Invalid HTTP request received."
            self.logger.warning(message)
            self.send_400_response(message)


def read_declined_upgrade_bodies() -> None:
    """Make uvicorn's own httptools protocol read a declined upgrade's body as the body, so
    that ``python -m uvicorn app.main:app`` serves such requests too (``python -m app`` serves
    with ``JoinedWritesProtocol``, which does it itself)."""
    HttpToolsProtocol.data_received = data_received  # type: ignore[method-assign]
