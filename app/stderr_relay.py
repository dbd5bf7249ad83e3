"""A worker's file descriptor 2 as log lines, written by a process of its own: the worker's
last words reach the log even when it dies writing them.

``python -m app`` points a worker's fd 2 at a pipe whose other end this process reads (started
by ``app.observability``; ``python -m app.stderr_relay json|text``). Each line becomes one log
line of the chosen format on the real standard error. A thread of the worker would die with
it and lose what was still in the pipe (a ``Fatal Python error`` report, faulthandler's
traceback of a SIGSEGV, an abort's message); this process reads to the end of the pipe, which
comes only once every writer is gone, and ignores the signals that stop the service (SIGTERM,
SIGINT, SIGHUP) so that a group stopped together still has its last lines written.

Two kinds of line: gRPC core's own (``E1128 07:19:47.123456 1234 file.cc:12] ...``), which a
stranger can cause (a failed TLS handshake each), are the ``grpc.core`` logger's and limited to
``LINES_PER_MINUTE`` a minute, the count of those left out written as they are left out (at
the 1st, 2nd, 4th, 8th... of a minute) and again with the next minute's first line; anything
else the process writes (Python's fatal-error reports, tracebacks, a library's ``print``) is
the ``stderr`` logger's and never left out. A line longer than ``LINE_LIMIT`` is cut.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from typing import Any, BinaryIO

import orjson

#: gRPC core's lines a minute; past it, counted and left out.
LINES_PER_MINUTE = 20
#: The longest line written whole.
LINE_LIMIT = 65536
#: The glog prefix gRPC's core writes its lines with: severity, date, time, thread, file:line.
GRPC_CORE_LINE = re.compile(rb"^[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\s\]]+:\d+\]")
_LEVELS = {"E": "error", "W": "warning", "I": "info", "F": "critical"}


def _utc(created: float) -> str:
    whole = int(created)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{stamp}.{int((created - whole) * 1000):03d}Z"


def _escaped(text: str) -> str:
    return re.sub(r"[\x00-\x1f\x7f]", lambda match: repr(match.group())[1:-1], text)


class Relay:
    """Turns raw lines into log lines (``form``: json or text) on ``out``."""

    def __init__(self, form: str, out: Any) -> None:
        self.form = form
        self.out = out
        self.minute = -1
        self.lines = 0
        self.dropped = 0

    def write(self, level: str, logger: str, message: str, **fields: Any) -> None:
        now = time.time()
        if self.form == "json":
            line = {"time": _utc(now), "level": level, "logger": logger, "message": message}
            text = orjson.dumps({**line, **fields}, default=str).decode()
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            extra = "".join(f" {key}={value}" for key, value in fields.items())
            text = f"{stamp} {level:<5} {_escaped(f'{logger}: {message}{extra}')}"
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass

    def line(self, raw: bytes) -> None:
        if len(raw) > LINE_LIMIT:
            raw = raw[:LINE_LIMIT] + f"... ({len(raw) - LINE_LIMIT} more bytes)".encode()
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            return
        if not GRPC_CORE_LINE.match(raw):
            fatal = text.startswith("Fatal Python error")
            self.write("critical" if fatal else "warning", "stderr", text)
            return
        minute = int(time.time() // 60)
        if minute != self.minute:
            if self.dropped:
                self.write(
                    "warning",
                    "grpc.core",
                    f"{self.dropped} lines of gRPC's core were left out in the minute before "
                    f"(more than {LINES_PER_MINUTE} a minute)",
                    dropped_before=self.dropped,
                )
            self.minute, self.lines, self.dropped = minute, 0, 0
        if self.lines >= LINES_PER_MINUTE:
            self.dropped += 1
            if self.dropped & (self.dropped - 1) == 0:  # 1, 2, 4, 8...: told as it happens
                self.write(
                    "warning",
                    "grpc.core",
                    f"{self.dropped} lines of gRPC's core left out this minute so far (more than "
                    f"{LINES_PER_MINUTE} a minute)",
                    left_out=self.dropped,
                )
            return
        self.lines += 1
        self.write(_LEVELS.get(text[0], "warning"), "grpc.core", text)


def relay(source: BinaryIO, relay_: Relay) -> None:
    pending = b""
    while True:
        chunk = source.read(65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > LINE_LIMIT:
            lines.append(pending)
            pending = b""
        for raw in lines:
            relay_.line(raw)
    if pending:
        relay_.line(pending)


def main() -> None:
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    form = sys.argv[1] if len(sys.argv) > 1 else "json"
    with os.fdopen(0, "rb", buffering=0) as source:
        relay(source, Relay(form, sys.stdout))


if __name__ == "__main__":
    main()
