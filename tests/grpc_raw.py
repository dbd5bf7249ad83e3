"""A gRPC call written frame by frame (the ``h2`` library): messages compressed by hand, bodies
that stop halfway, metadata no gRPC client would send. What an attacker's client can do, and
gRPC's own client cannot."""

from __future__ import annotations

import gzip
import socket
import ssl
import struct
import time
import zlib
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings

V2 = "/inference.GRPCInferenceService"


def framed(message: bytes, compressed: bool = False) -> bytes:
    """One gRPC length-prefixed message: the compressed flag, the length, the bytes."""
    return struct.pack(">BI", int(compressed), len(message)) + message


def gzip_bomb(inflated: int) -> bytes:
    """Zeros of ``inflated`` bytes as one gzip member (about a thousandth of that)."""
    out = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    pieces = [out.compress(chunk) for _ in range(inflated >> 20)]
    pieces.append(out.compress(bytes(inflated & ((1 << 20) - 1))))
    pieces.append(out.flush())
    return b"".join(pieces)


def deflated(message: bytes) -> bytes:
    return zlib.compress(message, 6)


def gzipped(message: bytes) -> bytes:
    return gzip.compress(message, 6)


@dataclass
class Outcome:
    """What came back: gRPC's status and message, the headers and trailers, and the time."""

    status: int | None = None
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    reset: bool = False
    closed: bool = False
    seconds: float = 0.0


class RawConnection:
    """One HTTP/2 connection to a gRPC port; calls on it are streams."""

    def __init__(
        self, port: int, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
    ) -> None:
        plain = socket.create_connection((host, port), timeout=10)
        plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            tls.set_alpn_protocols(["h2"])
            self.sock: socket.socket = tls.wrap_socket(plain, server_hostname="localhost")
        else:
            self.sock = plain
        config = h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.h2 = h2.connection.H2Connection(config=config)
        # Answers of many MiB arrive without waiting for window updates.
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: (1 << 31) - 1},
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(1 << 30)
        self._flush()
        self.outcomes: dict[int, Outcome] = {}
        self.started: dict[int, float] = {}
        self.closed = False

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def start(
        self,
        method: str,
        metadata: list[tuple[str, str]] = (),  # type: ignore[assignment]
        encoding: str | None = None,
    ) -> int:
        """Open a call: its headers only."""
        stream = self.h2.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "https" if isinstance(self.sock, ssl.SSLSocket) else "http"),
            (":path", f"{V2}/{method}" if not method.startswith("/") else method),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        if encoding is not None:
            headers.append(("grpc-encoding", encoding))
        headers.extend(metadata)
        self.h2.send_headers(stream, headers)
        self._flush()
        self.outcomes[stream] = Outcome()
        self.started[stream] = time.monotonic()
        return stream

    def send(
        self,
        stream: int,
        data: bytes,
        end: bool = False,
        stop_after: int | None = None,
        wait: float = 30.0,
        give_up: bool = False,
    ) -> int:
        """Send ``data`` on the stream as flow control lets it (reading the peer meanwhile); at
        most ``stop_after`` bytes. Returns the bytes sent; when the peer keeps its window shut
        for ``wait`` seconds, ``TimeoutError`` (or, with ``give_up``, the bytes sent so far)."""
        view = memoryview(data)
        limit = len(view) if stop_after is None else min(stop_after, len(view))
        sent = 0
        deadline = time.monotonic() + wait
        while sent < limit:
            if self.outcome_done(stream):
                return sent
            window = min(self.h2.local_flow_control_window(stream), self.h2.max_outbound_frame_size)
            if window <= 0:
                if time.monotonic() > deadline:
                    if give_up:
                        return sent
                    raise TimeoutError(f"the peer kept its window shut after {sent} bytes")
                self.read(timeout=0.5)
                continue
            piece = view[sent : min(limit, sent + window)]
            last = end and sent + len(piece) == len(view)
            self.h2.send_data(stream, piece.tobytes(), end_stream=last)
            self._flush()
            sent += len(piece)
        if end and sent == len(view) == 0:
            self.h2.end_stream(stream)
            self._flush()
        return sent

    def outcome_done(self, stream: int) -> bool:
        outcome = self.outcomes[stream]
        return outcome.status is not None or outcome.reset or self.closed

    def read(self, timeout: float = 1.0) -> None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed = True
            for item in self.outcomes.values():
                item.closed = True
            return
        for event in self.h2.receive_data(data):
            stream: int = getattr(event, "stream_id", 0) or 0
            outcome = self.outcomes.get(stream)
            if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                if outcome is None:
                    continue
                for name, value in event.headers:
                    key = name.decode() if isinstance(name, bytes) else name
                    text = value.decode() if isinstance(value, bytes) else value
                    outcome.headers[key] = text
                if "grpc-status" in outcome.headers:
                    outcome.status = int(outcome.headers["grpc-status"])
                    outcome.message = outcome.headers.get("grpc-message", "")
                    outcome.seconds = time.monotonic() - self.started[stream]
            elif isinstance(event, h2.events.DataReceived):
                if outcome is not None:
                    outcome.data += event.data
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                if outcome is not None:
                    outcome.reset = True
                    outcome.seconds = time.monotonic() - self.started[stream]
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.closed = True
                for item in self.outcomes.values():
                    item.closed = True
        self._flush()

    def wait(self, stream: int, timeout: float = 10.0) -> Outcome:
        """Read until the call has its status (or is reset, or the connection closed)."""
        deadline = time.monotonic() + timeout
        while not self.outcome_done(stream) and time.monotonic() < deadline:
            self.read(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
        return self.outcomes[stream]

    def call(
        self,
        method: str,
        message: bytes,
        metadata: list[tuple[str, str]] = (),  # type: ignore[assignment]
        encoding: str | None = None,
        timeout: float = 30.0,
    ) -> Outcome:
        """A whole call: headers, the message framed (compressed when ``encoding`` is set, the
        message then being already compressed), the end of the stream, and its status."""
        stream = self.start(method, metadata, encoding)
        self.send(stream, framed(message, encoding is not None), end=True)
        return self.wait(stream, timeout)

    def close(self) -> None:
        try:
            self.h2.close_connection()
            self._flush()
        except Exception:
            pass
        self.sock.close()
