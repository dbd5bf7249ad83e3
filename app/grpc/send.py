"""The send side of gRPC held to the minimum rate: a client that does not take an answer at
``TENSOR_OPS_MIN_TRANSFER_RATE`` over each ``TENSOR_OPS_RATE_WINDOW`` loses its connection, and
what its calls held comes back.

gRPC's core takes an answer whole and writes it as the client's HTTP/2 window lets it; a
client that never opens its window (or stops reading its socket) keeps the answer, and the call,
for as long as the connection lives. The Python server can neither see the progress of a write
nor cancel a call whose status is on its way: keepalive closes a connection whose peer stops
answering pings (60 + 20 s), but a client that answers pings and never sends a window update is
never cut off by gRPC itself. So the progress is read where it can be, from the kernel (the
bytes of the connection its client has acknowledged), and a connection that falls below the
rate is shut down at the socket: gRPC's core then ends every call on it (the client sees
UNAVAILABLE: no status can pass a window it keeps shut) and their answers' memory comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import logging
import os
import socket
import struct
import termios
from collections.abc import Callable
from typing import Any

from app.settings import Settings

LOG = logging.getLogger("tensor_ops.grpc")


def peer_address(peer: str) -> tuple[str, int] | None:
    """The IP address and port of a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``);
    None for any other kind (a Unix socket)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    try:
        return _normal(host.strip("[]")), int(port)
    except ValueError:
        return None


def _normal(host: str) -> str:
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


#: Where a connection was last found: (peer address, local port) -> its descriptor's number,
#: tried first (and checked for what it now is) before the scan of every descriptor.
_FOUND: dict[tuple[tuple[str, int], int], int] = {}
_FOUND_MOST = 4096


def find_connection(peer: str, local_port: int) -> socket.socket | None:
    """This process's TCP connection from ``peer`` to ``local_port``, as a socket of its own
    (a duplicate of gRPC's descriptor, closed by the caller); None when there is none.

    Each descriptor is looked at through a duplicate, so that one closed and reused meanwhile
    is seen for what it now is. The descriptor a connection was last found at is tried first:
    the scan costs some 10 us a descriptor, the try one."""
    wanted = peer_address(peer)
    if wanted is None:
        return None
    key = (wanted, local_port)
    known = _FOUND.get(key)
    if known is not None:
        sock = _connection_at(known, wanted, local_port)
        if sock is not None:
            return sock
        del _FOUND[key]
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            number = int(name)
        except (OSError, ValueError):
            continue
        sock = _connection_at(number, wanted, local_port)
        if sock is not None:
            if len(_FOUND) >= _FOUND_MOST:
                _FOUND.clear()
            _FOUND[key] = number
            return sock
    return None


def _connection_at(number: int, wanted: tuple[str, int], local_port: int) -> socket.socket | None:
    """A duplicate of descriptor ``number`` when it is the TCP connection from ``wanted`` to
    ``local_port``, else None."""
    try:
        duplicate = os.dup(number)
    except OSError:
        return None
    try:
        sock = socket.socket(fileno=duplicate)
    except OSError:
        os.close(duplicate)
        return None
    try:
        if (
            sock.family in (socket.AF_INET, socket.AF_INET6)
            and sock.type == socket.SOCK_STREAM
            and sock.getsockname()[1] == local_port
            and (_normal(sock.getpeername()[0]), sock.getpeername()[1]) == wanted
        ):
            return sock
    except OSError:
        pass
    sock.close()
    return None


# struct tcp_info (linux/tcp.h): 8 bytes of flags, 24 u32 fields, then the u64s pacing_rate,
# max_pacing_rate and bytes_acked.
_BYTES_ACKED = struct.Struct("=Q")
_BYTES_ACKED_OFFSET = 8 + 24 * 4 + 2 * 8
_TCP_INFO_SIZE = 256


def bytes_acked(sock: socket.socket) -> int | None:
    """The bytes of a TCP connection its peer has acknowledged (Linux's ``tcpi_bytes_acked``):
    what its client has taken off the wire. None where the kernel does not say."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except (OSError, AttributeError):
        return None
    if len(info) < _BYTES_ACKED_OFFSET + _BYTES_ACKED.size:
        return None
    acked: int = _BYTES_ACKED.unpack_from(info, _BYTES_ACKED_OFFSET)[0]
    return acked


_QUEUED = struct.Struct("=i")


def bytes_written(sock: socket.socket) -> int | None:
    """The bytes written to a TCP connection so far: those its peer has acknowledged and those
    still in the socket's send queue (Linux's ``SIOCOUTQ``). None where the kernel does not say."""
    acked = bytes_acked(sock)
    if acked is None:
        return None
    try:
        queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(_QUEUED.size))
    except OSError:
        return None
    return acked + int(_QUEUED.unpack(queued)[0])


#: How often an ended call's answer found short of its bytes is looked at again
#: (``Watch.settle``), and how long its count must stand still for it to be short for good.
SETTLE_STEP = 0.02
SETTLE_STALL = 0.25


class SendWatch:
    """The minimum send rate of one gRPC server's answers: each answer is watched while gRPC
    sends it. Once it has been on its way a whole ``TENSOR_OPS_RATE_WINDOW``, the connection it
    travels on is found and must have had ``TENSOR_OPS_MIN_TRANSFER_RATE`` x the window
    acknowledged by its client over each window since, for each of its answers on their way
    that long (the kernel's count, so it holds for TLS too); else the connection is shut. A
    stopped reader is cut off within about two windows of its
    answer being handed over.

    Every answer is watched, small ones too (many calls' small answers left unread add up):
    arming one is adding it to a set; one sweep a quarter window looks at those on their way
    for a window or more, and runs only while there are any."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: The port the server listens on (set once it is bound): a connection's local end.
        self.port = 0
        #: Connections shut for answers not taken at the minimum rate.
        self.cut = 0
        #: The answers on their way: a connection shut ends those on it.
        self.watches: set[Watch] = set()
        #: The connections watches look at, one duplicate descriptor each whatever the count of
        #: answers on it: peer -> (its socket, the watches holding it).
        self._connections: dict[str, tuple[socket.socket, int]] = {}
        self._sweep_handle: asyncio.TimerHandle | None = None

    def arm(
        self,
        context: Any,
        nbytes: int,
        cut: Callable[[float], None] | None = None,
        counted: bool = False,
    ) -> Watch | None:
        """The watch of an answer of ``nbytes`` of the call ``context`` handed to gRPC now;
        the caller cancels it once the answer has been taken. ``cut`` is told the seconds
        since the hand-over when the watch shuts the connection. With ``counted``, the bytes
        written to the connection are counted from now (``Watch.written_whole``). None: the
        rule is off."""
        settings = self.settings
        if settings.min_transfer_rate <= 0 or not self.port:
            return None
        loop = asyncio.get_running_loop()
        watch = Watch(self, context, nbytes, cut, loop.time())
        if counted:
            watch.count_from_now()
        self.watches.add(watch)
        if self._sweep_handle is None:
            self._sweep_handle = loop.call_later(settings.rate_window / 4, self._sweep)
        return watch

    def connection(self, peer: str) -> socket.socket | None:
        """The connection from ``peer``, held until ``let_go`` (one duplicate of gRPC's
        descriptor for all the watches of one connection: a client with many answers on its
        way costs one, as its connection does); None when it is not found."""
        held = self._connections.get(peer)
        if held is not None:
            self._connections[peer] = (held[0], held[1] + 1)
            return held[0]
        sock = find_connection(peer, self.port)
        if sock is not None:
            self._connections[peer] = (sock, 1)
        return sock

    def let_go(self, peer: str) -> None:
        """One watch's hold of the connection from ``peer`` given back (closed with the last)."""
        held = self._connections.get(peer)
        if held is None:
            return
        if held[1] > 1:
            self._connections[peer] = (held[0], held[1] - 1)
            return
        del self._connections[peer]
        held[0].close()

    def _sweep(self) -> None:
        self._sweep_handle = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        window = self.settings.rate_window
        for watch in list(self.watches):
            if watch in self.watches and now >= watch.due:
                watch.check(now)
        if self.watches:
            self._sweep_handle = loop.call_later(window / 4, self._sweep)


class Watch:
    """One answer on its way out (``SendWatch``)."""

    __slots__ = (
        "_peer",
        "acked",
        "context",
        "cut",
        "due",
        "nbytes",
        "sock",
        "started",
        "watch",
        "written",
    )

    def __init__(
        self,
        watch: SendWatch,
        context: Any,
        nbytes: int,
        cut: Callable[[float], None] | None,
        now: float,
    ) -> None:
        self.watch = watch
        self.context = context
        self._peer: str | None = None
        self.nbytes = nbytes
        self.cut = cut
        self.sock: socket.socket | None = None
        self.acked: int | None = None
        #: The bytes written to the connection when the answer was handed over (counted ones).
        self.written: int | None = None
        self.started = now
        #: When it is next looked at: a window after the hand-over, then each window.
        self.due = now + watch.settings.rate_window

    @property
    def peer(self) -> str:
        """The call's peer (``ipv4:1.2.3.4:5``), asked of gRPC once it is needed."""
        if self._peer is None:
            try:
                self._peer = str(self.context.peer())
            except Exception:  # a call gRPC has already let go of
                self._peer = ""
        return self._peer

    def count_from_now(self) -> None:
        """Find the connection now and note the bytes written to it so far."""
        self.sock = self.watch.connection(self.peer)
        if self.sock is not None:
            self.written = bytes_written(self.sock)

    def written_since(self) -> int | None:
        """The bytes written to its connection since the answer was handed over (a counted
        watch, before it is cancelled); other calls' bytes on the same connection count too.
        None: not counted, or the kernel does not say."""
        if self.sock is None or self.written is None:
            return None
        now = bytes_written(self.sock)
        return None if now is None else now - self.written

    def settle(self, then: Callable[[bool | None], None]) -> None:
        """Once its call has ended, the watch stopped and ``then`` told whether as many bytes
        as the answer's were written to its connection since the hand-over: False when fewer
        were, so it cannot all have gone (gRPC stopped sending it: the call ended under it);
        True says only that it may have (other calls' bytes count too); None: not counted.

        gRPC ends a call once its answer is in its own write buffer, before its last bytes
        reach the kernel (the write is the poller thread's, and a loaded machine runs it
        late): an answer found short is looked at again each ``SETTLE_STEP`` while its count
        grows, and found short for good only once it has not grown for ``SETTLE_STALL``."""
        loop = asyncio.get_running_loop()
        moved = loop.time()

        def look(last: int) -> None:
            nonlocal moved
            count = self.written_since()
            now = loop.time()
            if count is not None and count > last:
                moved = now
            if count is None or count >= self.nbytes or now - moved >= SETTLE_STALL:
                self.cancel()
                then(None if count is None else count >= self.nbytes)
                return
            loop.call_later(SETTLE_STEP, look, count)

        look(-1)  # told at once when whole (or not counted)

    def check(self, now: float) -> None:
        settings = self.watch.settings
        self.due = now + settings.rate_window
        if self.sock is None:
            # Found once the answer has been on its way a whole window (most never are).
            self.sock = self.watch.connection(self.peer)
            if self.sock is None:
                self.cancel()  # the connection is gone, and its calls with it
                return
        acked = bytes_acked(self.sock)
        if acked is None:
            self.cancel()
            return
        # Each answer on the connection that has been on its way a window or more must move
        # at the rate: a client that takes one answer slowly cannot hold the others with it
        # (HTTP/2 lets it keep their windows shut while it reads one).
        since = now - settings.rate_window
        pending = sum(
            1 for other in self.watch.watches if other.started <= since and other.peer == self.peer
        )
        quota = settings.min_transfer_rate * settings.rate_window * max(1, pending)
        if self.acked is not None and acked - self.acked < quota:
            self._shut(now, acked - self.acked)
            return
        self.acked = acked

    def _shut(self, now: float, taken: int) -> None:
        assert self.sock is not None
        # Every answer on the connection ends with it, none of them taken: each call's log
        # line says so.
        for other in list(self.watch.watches):
            if other.cut is not None and other.peer == self.peer:
                other.cut(now - other.started)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.watch.cut += 1
        settings = self.watch.settings
        LOG.warning(
            "an answer was not taken at the minimum rate: its connection is closed",
            extra={
                "peer": self.peer,
                "answer_bytes": self.nbytes,
                "taken_bytes": taken,
                "window_seconds": settings.rate_window,
                "min_transfer_rate": settings.min_transfer_rate,
                "seconds": round(now - self.started, 3),
            },
        )
        self.cancel()

    def cancel(self) -> None:
        """The answer has been taken (or its call ended otherwise): the watch stops."""
        if self.sock is not None:
            self.sock = None
            self.watch.let_go(self.peer)
        self.watch.watches.discard(self)
        self.context = None


def disarm(watch: Watch | None) -> None:
    """Stop ``watch`` (None: nothing was watched)."""
    if watch is not None:
        watch.cancel()
