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

A request's head is bounded in size and in time: uvicorn's httptools protocol keeps every header
line it is sent, however many (2 GB of headers were 2.3 GB of a worker's memory), and waits for
a head as long as the client likes (a connection that sends half a request line and stops, or
opens and sends nothing, stayed open for good), and the trailer lines of a chunked body too.
Here a head past ``MAX_HEAD_BYTES`` is answered
431, one not complete within ``head_timeout`` seconds of the connection (or of its first byte,
after an earlier request) 408, and the connection closes (a connection that sent nothing is
closed without an answer); trailers are dropped (the app reads none), and the body's minimum
rate cuts off a client that sends trailers instead.
"""

import asyncio
import functools
from typing import Any, cast

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.errors import Fault, ServiceError
from app.http.errors import render_detail, render_v2
from app.settings import Settings

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


#: The most a request's head (request line and header lines) may take: a larger one is 431.
MAX_HEAD_BYTES = 64 * 1024


class HeadGuard:
    """A connection's head in progress: its bytes counted, its deadline armed."""

    def __init__(self, protocol: HttpToolsProtocol, timeout: float) -> None:
        self.protocol = protocol
        #: Seconds a head may take to arrive (the settings' rate window).
        self.timeout = timeout
        #: Whether the bytes arriving are a head's (from the connection, or a message's end, to
        #: the end of the next head).
        self.in_head = True
        self.bytes = 0
        #: The head's own size, from the parser's callbacks (the target and each header line).
        self.size = 0
        #: The first bytes of the request's target: which protocol's shape a refusal takes.
        self.target = b""
        self.timer: asyncio.TimerHandle | None = None
        #: Whether a head's deadline runs (from a head's first byte to its end), and when it
        #: falls (the loop's clock). The timer may run past a head that ended (it is not
        #: cancelled and made again for every request, which cost a keep-alive connection's small
        #: request two of the loop's heap operations): it checks these when it fires.
        self.armed = False
        self.deadline = 0.0
        #: Whether the parser has seen the head begin (its bytes may have come in the read that
        #: ended the request before it, which ``bytes`` does not count).
        self.begun = False
        #: A refusal of a head that waits for the answers of the requests before it.
        self.pending: bytes | None = None
        self.arm()

    def arm(self) -> None:
        """A head's deadline starts (a deadline already running goes on)."""
        if self.armed:
            return
        self.armed = True
        self.deadline = self.protocol.loop.time() + self.timeout
        if self.timer is None:
            self.timer = self.protocol.loop.call_at(self.deadline, self.timed_out)

    def release(self) -> None:
        """The head ended in time: its deadline no longer runs (the timer, if it fires before
        the next head's, finds nothing to do)."""
        self.armed = False

    def disarm(self) -> None:
        self.armed = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def headers_complete(self) -> bool:
        """The head is done: False (and a 431 sent) if it is larger than the limit, which a head
        that came in one read can be before any check of the bytes read."""
        self.in_head = False
        self.bytes = 0
        self.release()
        size, self.size = self.size, 0
        if size > MAX_HEAD_BYTES:
            self.refuse_large()
            return False
        return True

    def message_complete(self) -> None:
        # The next head's deadline starts at its first byte (until then the connection is idle,
        # and uvicorn's keep-alive timeout closes it).
        self.in_head = True
        self.begun = False
        self.bytes = 0
        self.size = 0
        self.target = b""

    def received(self, size: int) -> None:
        if self.in_head:
            self.bytes += size

    def check_size(self) -> None:
        """After the bytes were fed: 431 if a head still incomplete has passed the limit."""
        if self.in_head and self.bytes > MAX_HEAD_BYTES:
            self.disarm()
            self.refuse_large()

    def refuse_large(self) -> None:
        self.refuse(
            431,
            "Request Header Fields Too Large",
            f"the request line and headers take more than {MAX_HEAD_BYTES} bytes",
            Fault.TOO_LARGE,
        )

    def timed_out(self) -> None:
        self.timer = None
        protocol = self.protocol
        if not self.armed or not self.in_head or protocol.transport.is_closing():
            return
        if protocol.loop.time() < self.deadline:
            # Armed for a later head than the one this timer was made for: wait for its deadline.
            self.timer = protocol.loop.call_at(self.deadline, self.timed_out)
            return
        cycle = protocol.cycle
        if cycle is not None and not cycle.response_complete:
            # An answer is still being sent (and the next head waits behind it): later.
            self.armed = False
            self.arm()
            return
        if not self.bytes and not self.begun:
            # Opened and never used: closed without a word, as an idle keep-alive connection is
            # (a 408 there could be read by a pool as the answer to its next request).
            protocol.transport.close()
            return
        self.refuse(
            408,
            "Request Timeout",
            f"the request line and headers did not arrive within {self.timeout:g} seconds",
            Fault.TIMEOUT,
        )

    def refuse(
        self,
        status: int,
        reason: str,
        message: str,
        kind: Fault,
        loc: tuple[str, ...] = ("header",),
        behind: bool = False,
    ) -> None:
        """Answer with the service's error model, in the shape of the route the request line
        names (V2's ``{"error"}`` under ``/v2``, else the plain routes' ``detail``), and close
        (the parser cannot go on). A refusal ``behind`` answers still to be sent (or of a new
        head while the request before it is answered) waits for them."""
        self.in_head = False
        error = ServiceError(kind, loc, message)
        v2 = self.target == b"/v2" or self.target.startswith((b"/v2/", b"/v2?"))
        answer = render_v2(error) if v2 else render_detail(error)
        lines = [f"HTTP/1.1 {status} {reason}\r\n".encode("ascii")]
        lines += [name + b": " + value + b"\r\n" for name, value in answer.raw_headers]
        lines.append(b"connection: close\r\n\r\n")
        refusal = b"".join(lines) + bytes(answer.body)
        protocol = self.protocol
        cycle = protocol.cycle
        if behind or (loc == ("header",) and cycle is not None and not cycle.response_complete):
            # A new head, behind requests still being answered (pipelined in the same
            # packet, or sent before their answers): their answers go first, then this one
            # (``send_pending``); nothing more is read.
            self.disarm()
            self.pending = refusal
            protocol.flow.pause_reading()
            return
        transport = protocol.transport
        transport.write(refusal)
        transport.close()

    def send_pending(self) -> None:
        """The waiting refusal, once the answers before it are sent; then close."""
        refusal, self.pending = self.pending, None
        transport = self.protocol.transport
        if refusal is not None and not transport.is_closing():
            transport.write(refusal)
            transport.close()


class _HeadRefusedError(Exception):
    """Raised from a parser callback to stop the parser once a head has been refused."""


@functools.cache
def head_timeout() -> float:
    """Seconds a TLS handshake may take when the app served gave the event loop none (no
    lifespan ran, ``app.http.loop``): the rate window of the settings the environment gives."""
    return Settings().rate_window


def app_settings(config: Any) -> Settings:
    """The settings of the app uvicorn serves (``create_app(settings)``'s), found through the
    middleware uvicorn wraps it in; the environment's when it is not the service's app."""
    app = getattr(config, "loaded_app", None)
    for _ in range(8):  # uvicorn's wrappers (proxy headers, message logger) are few
        settings = getattr(getattr(app, "state", None), "settings", None)
        if isinstance(settings, Settings):
            return settings
        app = getattr(app, "app", None)
    return Settings()


class ServiceHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the service's fixes, given to uvicorn through its
    supported ``http=`` option (``python -m app`` does; ``python -m uvicorn app.main:app
    --http app.http.protocol:ServiceHttpProtocol`` does the same): each answer's
    head and body in one write (``JoinedWrites``), a declined upgrade's body read as the body
    (``DeclinedUpgradeBody``), each head bounded in size and time (``HeadGuard``), trailers
    dropped, and reading paused while pipelined requests are queued. Nothing of uvicorn's is
    patched. The members of uvicorn's class this relies on are listed in
    ``UVICORN_MEMBERS``; a test fails clearly when uvicorn changes them."""

    _head_guard: HeadGuard | None = None
    _declined_upgrade: DeclinedUpgradeBody | None = None

    @property
    def _head_timeout(self) -> float:
        """Seconds a head may take: the rate window of the settings the app was made with."""
        # A few attribute lookups a connection (the app's wrappers are few).
        return app_settings(self.config).rate_window

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = cast(asyncio.Transport, JoinedWrites(transport))
        self._head_guard = HeadGuard(self, self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        guard = self._head_guard
        if guard is not None:
            guard.disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's ``data_received``, with a declined upgrade's body read as the body, and
        the head's size bounded."""
        guard = self._head_guard
        # A declined upgrade's body comes after its head is done: not counted.
        if guard is not None and self._declined_upgrade is None:
            guard.received(len(data))
        self._feed(data)
        if guard is not None and self._declined_upgrade is None and not self.transport.is_closing():
            guard.check_size()

    def _feed(self, data: bytes) -> None:
        guard = self._head_guard
        if guard is not None and guard.pending is not None:
            return  # a head was refused: the parser cannot go on, and nothing more is read
        declined = self._declined_upgrade
        if declined is None:
            self._unset_keepalive_if_required()
        try:
            if declined is not None:
                declined.feed(data)
                return
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self.transport.is_closing() or (guard is not None and guard.pending is not None):
                return  # a head refused (431) stopped the parser: answered, or to be
            self._refuse_unreadable(error)
        except httptools.HttpParserUpgrade as upgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
                return
            # Declined. httptools has completed the message with no body (the app's task, made
            # but not yet run, has read nothing): the body is to come.
            cycle = self.cycle
            cycle.body = bytearray()
            cycle.more_body = True
            cycle.keep_alive = False
            declined = DeclinedUpgradeBody(self)
            self._declined_upgrade = declined
            try:
                declined.feed(data[int(upgrade.args[0]) :])
            except httptools.HttpParserError as error:
                self._refuse_unreadable(error, in_body=True)

    def _refuse_unreadable(self, error: httptools.HttpParserError, in_body: bool = False) -> None:
        """A request the parser cannot read (a method, a header line, a chunk's framing): 400
        with the service's error model, naming the part and what the parser found, and close
        (uvicorn's own answer is a line of plain text)."""
        self.logger.warning("Invalid HTTP request received.")
        guard = self._head_guard
        if guard is None:
            self.send_400_response("Invalid HTTP request received.")
            return
        in_body = in_body or not guard.in_head
        cycle = self.cycle
        if in_body and cycle is not None and cycle.response_started:
            self.transport.close()  # an answer is on its way: a second one cannot follow
            return
        behind = False
        if in_body and cycle is not None and self.pipeline and self.pipeline[0][0] is cycle:
            # The body of a request queued behind others still being answered: it will not
            # run (its body cannot be read), and its refusal comes in its turn, after theirs.
            self.pipeline.popleft()
            cycle.response_complete = True
            behind = True
        part = "body's framing" if in_body else "request line and headers"
        found = str(error).rstrip(".") or "an error"
        guard.refuse(
            400,
            "Bad Request",
            f"the {part} cannot be read as HTTP/1.1 (the parser found: {found}); send a "
            f"well-formed request",
            Fault.BAD_LENGTH if in_body else Fault.BAD_HEADER,
            ("body",) if in_body else ("header",),
            behind,
        )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_guard is not None:
            self._head_guard.begun = True
            self._head_guard.arm()

    def on_url(self, url: bytes) -> None:
        guard = self._head_guard
        if guard is not None:
            guard.size += len(url)
            if len(guard.target) < 4:
                guard.target = (guard.target + url)[:4]
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        guard = self._head_guard
        if guard is not None:
            if not guard.in_head:
                # A trailer of a chunked body: uvicorn would append it to the request's
                # headers, one more line for every line sent, with no end. The app reads none.
                return
            guard.size += len(name) + len(value) + 4  # ": " and the line's end
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        guard = self._head_guard
        if guard is not None and not guard.headers_complete():
            # Refused (431) and closing: the parser goes no further (its error is expected).
            raise _HeadRefusedError
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._head_guard is not None:
            self._head_guard.message_complete()

    def on_response_complete(self) -> None:
        # With none queued, the answer just sent was the last one before a waiting refusal.
        last = not self.pipeline
        super().on_response_complete()
        # uvicorn resumes reading after every answer, even with pipelined requests still
        # queued: a client that sends without reading its answers grew the queue by a socket
        # buffer of requests (thousands) for each answer, gigabytes in seconds. Read again
        # once the queue is empty.
        if self.pipeline and not self.transport.is_closing():
            self.flow.pause_reading()
        guard = self._head_guard
        if last and guard is not None and guard.pending is not None:
            guard.send_pending()


#: The name ``python -m app`` gave the protocol before (deployments may name it in --http).
JoinedWritesProtocol = ServiceHttpProtocol

#: What ``ServiceHttpProtocol`` uses of uvicorn's class beyond its documented ``http=`` hook:
#: uvicorn has no public extension point for these, so they are named here, in one place, and
#: ``tests/http/test_http_protocol.py`` fails with this list when uvicorn changes them.
UVICORN_MEMBERS = (
    "parser",
    "cycle",
    "flow",
    "pipeline",
    "headers",
    "logger",
    "loop",
    "_unset_keepalive_if_required",
    "_should_upgrade",
    "handle_websocket_upgrade",
    "send_400_response",
    "on_message_begin",
    "on_url",
    "on_header",
    "on_headers_complete",
    "on_message_complete",
    "on_response_complete",
)
