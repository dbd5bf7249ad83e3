"""One JSON log line and the metrics of every request, and its ``X-Request-ID``; with tracing
on, the line and its span tied together (the span's ids in the line, the request id on the span).

Long (some 550 lines) because the log's form, its quotas and the access line are one policy:
what a line holds, what may be left out and counted, and what never is.
"""

import contextlib
import faulthandler
import json
import logging
import os
import random
import re
import subprocess
import sys
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import orjson

from app import tracing
from app.metrics import REQUEST_TALLY

ACCESS_LOG = logging.getLogger("tensor_ops.access")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object on one line, its ``extra`` fields included."""

    _standard = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}

    def format(self, record: logging.LogRecord) -> str:
        fields = {key: value for key, value in record.__dict__.items() if key not in self._standard}
        if tracing.TRACER is not None and "trace_id" not in fields:
            fields.update(tracing.log_ids())  # a line written inside a span
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return json_line(
            record.created, record.levelname.lower(), record.name, record.getMessage(), fields
        )


def json_line(created: float, level: str, logger: str, message: str, fields: dict[str, Any]) -> str:
    """One log line as JSON: time, level, logger and message first, then the fields."""
    line = {
        "time": utc_time(created),
        "level": level,
        "logger": logger,
        "message": message,
        **fields,
    }
    try:
        text = orjson.dumps(line, default=str).decode()
    except TypeError:  # an integer past 64 bits, which orjson does not write: the stdlib does
        text = json.dumps(line, default=str, separators=(",", ":"))
    # JSON escapes only C0 controls: DEL, the C1 controls (U+0085 and U+009B among them) and
    # the line and paragraph separators are escaped too, so that no reader of the log splits
    # or rewrites a line on what a client sent. Only a line with non-ASCII text pays for it.
    if text.isascii():
        return text.replace("\x7f", "\\u007f")
    return _JSON_UNSAFE.sub(_json_escaped, text)


class _Clock:
    """The text of the current second, made once a second rather than once a line."""

    whole = -1
    text = ""

    def utc(self, created: float) -> str:
        whole = int(created)
        if whole != self.whole:
            self.text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
            self.whole = whole
        return f"{self.text}.{int((created - whole) * 1000):03d}Z"


#: ``created`` (seconds since the epoch) as ``2026-11-23T20:18:48.924Z``.
utc_time = _Clock().utc

SERVICE_LOG = logging.getLogger("tensor_ops")
#: A record of another library (OpenTelemetry, gRPC, asyncio) is cut to this many characters:
#: its message may quote what a client sent (a ``baggage`` header, a metadata value).
LIBRARY_MESSAGE_CHARS = 512
#: At most this many lines a minute from each other library's logger (raw standard error's
#: lines are limited the same way by their own process, app/stderr_relay.py); past it, lines
#: are counted and left out: their noise does not grow with what strangers send.
LIBRARY_LINES_PER_MINUTE = 20


class LibraryNoise(logging.Filter):
    """Other libraries' records: cut, and limited per logger per minute. A record that may be a
    process's last words (critical, or an error with its traceback) is never left out; the
    count of those left out is told as they are (with the 1st, 2nd, 4th, 8th... of a minute:
    a line in its place) and again with the next minute's first line."""

    def __init__(self) -> None:
        super().__init__()
        self._budget: dict[str, tuple[int, int, int]] = {}  # logger: (minute, lines, dropped)

    def filter(self, record: logging.LogRecord) -> bool:
        minute = int(record.created // 60)
        seen, lines, dropped = self._budget.get(record.name, (minute, 0, 0))
        if seen != minute:
            if dropped:
                record.dropped_before = dropped  # told with the first line of the next minute
            seen, lines, dropped = minute, 0, 0
        last_words = record.levelno >= logging.CRITICAL or (
            record.levelno >= logging.ERROR and record.exc_info is not None
        )
        if lines >= LIBRARY_LINES_PER_MINUTE and not last_words:
            dropped += 1
            self._budget[record.name] = (seen, lines, dropped)
            if dropped & (dropped - 1):
                return False
            # Told as it happens: this record's place holds the count.
            record.msg = (
                f"{dropped} lines of this logger left out this minute so far (more than "
                f"{LIBRARY_LINES_PER_MINUTE} a minute)"
            )
            record.args = None
            record.exc_info = None
            record.left_out = dropped
            return True
        if len(self._budget) > 1024:  # a bounded table, whatever names loggers are given
            self._budget.clear()
        self._budget[record.name] = (seen, lines + 1, dropped)
        record.msg = cut(record.getMessage(), LIBRARY_MESSAGE_CHARS)
        record.args = None
        if record.exc_info and record.levelno < logging.ERROR:
            record.exc_info = None  # a library's warning with a traceback: the line alone
        return True


#: gRPC's own record of a call its peer ended while the servicer sent (a client's cancel, a
#: connection dropped or shut for a stopped reader, a deadline): the call's access line says
#: how it ended (CANCELLED, ...); this is no server error, and carries a traceback.
_CALL_ENDED_BY_PEER = (
    "ExecuteBatchError raised in core by servicer method",
    "Unexpected [ExecuteBatchError] raised by servicer method",
)


#: The gRPC call whose answer is on its way in this task (a unary answer, sent by gRPC with the
#: call's status once the handler has returned it): its observation, so that gRPC's record of
#: that send failing marks it CANCELLED before its line is written.
ANSWER_ON_ITS_WAY: ContextVar["Observation | None"] = ContextVar("answer_on_its_way", default=None)


class CallEndedByPeer(logging.Filter):
    """Drops gRPC's error record of a send that failed because the call had already ended
    (``_CALL_ENDED_BY_PEER``): a client's cancel is logged once, as its access line, which the
    record marks CANCELLED when it is about a call of ``ANSWER_ON_ITS_WAY`` (gRPC writes it in
    the call's own task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("grpc"):
            return True
        try:
            message = record.getMessage()
        except Exception:  # a library's record whose arguments do not fit its message
            return True
        if not message.startswith(_CALL_ENDED_BY_PEER):
            return True
        seen = ANSWER_ON_ITS_WAY.get()
        if seen is not None:
            seen.status = "CANCELLED"
        return False


def cut(text: str, most: int) -> str:
    """``text`` as at most ``most`` characters, saying how many more there were."""
    if len(text) <= most:
        return text
    return f"{text[:most]}... ({len(text) - most} more characters)"


def log_format(form: str) -> str:
    """The format ``TENSOR_OPS_LOG_FORMAT`` asks for: ``json`` or ``text`` as given; ``auto``
    (or anything else) JSON unless standard error is a terminal (a container's log, a file, a
    pipe: one object a line for a collector), text on a terminal (a person reading)."""
    if form in ("json", "text"):
        return form
    stream = _REAL_STDERR if _REAL_STDERR is not None else sys.stderr
    try:
        terminal = stream is not None and stream.isatty()
    except (AttributeError, OSError, ValueError):
        terminal = False
    return "text" if terminal else "json"


def configure_logging(level: str, form: str, capture_stderr: bool = False) -> None:
    """Send the service's logs to standard error, as JSON lines or as plain text (``form``:
    ``json``, ``text`` or ``auto``, see ``log_format``); other libraries' records (the root
    logger's) the same way, cut and limited (``LibraryNoise``); uvicorn's own messages the
    same way, and its access log off: the service writes one line a request itself, under
    ``python -m app`` and ``python -m uvicorn app.main:app`` alike.

    With ``capture_stderr`` (a process started by ``python -m app``), what anything else writes
    to file descriptor 2 (gRPC's core, Python's last-resort handler, a library's ``print``) is
    read back and logged as lines of the ``stderr`` logger: every line the process writes is
    one line of the chosen format."""
    form = log_format(form)  # before standard error is captured: the real one decides
    stream = _captured_stderr(form) if capture_stderr else sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if form == "json" else TextFormatter())
    SERVICE_LOG.handlers[:] = [handler]
    SERVICE_LOG.setLevel(level.upper() if level != "trace" else "DEBUG")
    SERVICE_LOG.propagate = False
    libraries = logging.StreamHandler(stream)
    libraries.setFormatter(handler.formatter)
    libraries.addFilter(CallEndedByPeer())  # first: it spends none of the quota
    libraries.addFilter(LibraryNoise())
    root = logging.getLogger()
    root.handlers[:] = [libraries]
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    _take_over_uvicorn(handler)
    if capture_stderr:
        _point_handlers_at(stream)
        # A handler's own failure is printed to standard error: captured, it would come back.
        logging.raiseExceptions = False


def _take_over_uvicorn(handler: logging.Handler) -> None:
    """uvicorn's loggers in the service's format, and its access log off (the service's own
    line replaces it). Under ``python -m uvicorn`` uvicorn set its handlers up before the app
    was imported: its access line would be a second line for each request, and its messages
    another format than the service's."""
    access = logging.getLogger("uvicorn.access")
    access.handlers[:] = []
    access.propagate = False
    access.disabled = True  # and its protocols see no handler: no line made, none written
    server = logging.getLogger("uvicorn")
    server.handlers[:] = [handler]
    server.propagate = False
    errors = logging.getLogger("uvicorn.error")
    errors.handlers[:] = []
    errors.propagate = True
    if not any(isinstance(item, _ReportedStartupFailure) for item in errors.filters):
        errors.addFilter(_ReportedStartupFailure())
    if not any(isinstance(item, _AnswerCutOff) for item in errors.filters):
        errors.addFilter(_AnswerCutOff())


#: uvicorn's words for an answer the app left incomplete.
_INCOMPLETE = "ASGI callable returned without completing response."
#: Answers the service has cut off (a client below the minimum rate), whose incompleteness
#: uvicorn is about to report: one record each is dropped.
_cut_answers = [0]


def answer_cut_off() -> None:
    """The service has left an answer incomplete on purpose (its client stopped reading, and
    was told in the service's own warning): uvicorn's error record of it is no server error."""
    _cut_answers[0] += 1


class _AnswerCutOff(logging.Filter):
    """Drops uvicorn's "returned without completing response" record of an answer the
    service cut off itself (``answer_cut_off``): a client's doing, logged once as a warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _cut_answers[0] and record.msg == _INCOMPLETE:
            _cut_answers[0] -= 1
            return False
        return True


#: Errors the service reports itself, in one line, before they reach uvicorn's lifespan.
_REPORTED_ERRORS = ("app.grpc.ports.GrpcPortError: ",)


class _ReportedStartupFailure(logging.Filter):
    """Drops uvicorn's record of a start-up failure that the service has already told in one
    line (the gRPC port taken): Starlette hands uvicorn the whole traceback, some 30 lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Traceback (most recent call last)"):
            return True
        last = message.rstrip().rsplit("\n", 1)[-1]
        return not last.startswith(_REPORTED_ERRORS)


class TextFormatter(logging.Formatter):
    """Plain text, a record a line, for a person at a terminal::

        2026-11-26 17:40:01 info  POST /roll 200 1.2 ms  id=5c0f... in=37 out=164
        2026-11-26 17:40:00 info  memory budget  budget_bytes=4294967296
        2026-11-26 17:40:00 info  uvicorn: Started server process [7]

    Local time to the second, the level, the message (a request's line: method, path, status
    and duration; a library's: its logger's name first) and the record's fields as
    ``key=value``.
    Control characters are escaped (``\\n``) in all of it, so no message, nor what a client
    put in it, can start a line of its own."""

    _standard = JsonFormatter._standard

    def format(self, record: logging.LogRecord) -> str:
        fields = {key: value for key, value in record.__dict__.items() if key not in self._standard}
        if tracing.TRACER is not None and "trace_id" not in fields:
            fields.update(tracing.log_ids())
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        level = record.levelname.lower()
        if record.name == ACCESS_LOG.name and "status" in fields:
            text = _request_text(fields)
        elif record.name in _UNNAMED:
            text = record.getMessage()
        else:
            text = f"{_SHOWN_NAMES.get(record.name, record.name)}: {record.getMessage()}"
        if fields:
            text += "  " + " ".join(f"{key}={_value_text(value)}" for key, value in fields.items())
        if record.exc_info:
            text += "  exception=" + self.formatException(record.exc_info)
        return f"{stamp} {level:<5} " + _CONTROLS.sub(_escaped, text)


#: Loggers whose lines need no name in text (the service's own messages), and shorter names.
_UNNAMED = frozenset(("tensor_ops.service", "tensor_ops.access"))
_SHOWN_NAMES = {"uvicorn.error": "uvicorn"}


def _request_text(fields: dict[str, Any]) -> str:
    """A request's line in words (what is said is taken out of ``fields``)."""
    method = fields.pop("method", "-")
    path = cut(str(fields.pop("path", "-")), 256)
    status = fields.pop("status", "-")
    duration = fields.pop("duration_ms", 0.0)
    request_id = fields.pop("request_id", "-")
    fields.pop("route", None)
    shown = {
        "id": request_id,
        "in": fields.pop("bytes_in", 0),
        "out": fields.pop("bytes_out", 0),
        **fields,
    }
    fields.clear()
    fields.update(shown)
    return f"{method} {path} {status} {duration:.1f} ms"


def _value_text(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    if not text or any(character in text for character in ' "='):
        return orjson.dumps(text).decode()
    return text


#: Every control character (C0, DEL, C1: U+0085 and U+009B among them) and the line and
#: paragraph separators (U+2028, U+2029): each would split a line, or rewrite it on a terminal.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: What JSON leaves raw of those (it escapes C0 itself).
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029]")


def _json_escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _escaped(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def launched_as_service() -> bool:
    """Whether this process was started by ``python -m app`` (a worker of it too: spawned
    workers run ``app.__main__`` as their main module)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "app.__main__"


#: The real standard error once it is captured (the same for every later configuration).
_REAL_STDERR: Any = None


def _captured_stderr(form: str) -> Any:
    """A stream on the process's real standard error; fd 2 itself becomes a pipe whose lines
    a process of its own writes as log lines of ``form`` (``app/stderr_relay.py``: it outlives
    the worker, so that a dying worker's last words are written whole; gRPC core's lines
    limited, the process's own never). faulthandler is on: a fatal signal's traceback is among
    those last words. Once per process."""
    global _REAL_STDERR, _RELAY  # noqa: PLW0603
    if _REAL_STDERR is not None:
        return _REAL_STDERR
    real = os.dup(2)
    stream = os.fdopen(real, "w", buffering=1, encoding="utf-8", errors="replace")
    read_end, write_end = os.pipe()
    # Its standard error is the real one: it holds no write end of the pipe, and reads it to
    # the end once every writer (this process, and what it starts) is gone.
    _RELAY = subprocess.Popen(  # this interpreter and a file of the service
        [sys.executable, str(Path(__file__).with_name("stderr_relay.py")), form],
        stdin=read_end,
        stdout=real,
        stderr=real,
        close_fds=True,
    )
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    _REAL_STDERR = stream
    faulthandler.enable(file=sys.stderr, all_threads=True)
    return stream


#: The process that writes fd 2's lines (kept: it ends by itself, after this process).
_RELAY: subprocess.Popen[bytes] | None = None


def _point_handlers_at(stream: Any) -> None:
    """Handlers that write to the captured descriptor (uvicorn's, made before the app was
    imported) write to the real standard error instead: they already write the log's format."""
    loggers = [logging.getLogger(), *logging.root.manager.loggerDict.values()]
    for item in loggers:
        for handler in getattr(item, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and handler.stream is not stream:
                try:
                    descriptor = handler.stream.fileno()
                except (AttributeError, OSError, ValueError):
                    continue
                if descriptor == 2:
                    handler.setStream(stream)


def _write_access_line(fields: dict[str, Any]) -> None:
    """The access log line: written straight as JSON when the only thing that would see its
    record is one handler with our JSON formatter (what configure_logging sets up): a record
    and a formatter's pass cost about 25 us a request. Else logged as any record, for whatever
    handlers are there."""
    handlers = SERVICE_LOG.handlers
    handler = handlers[0] if len(handlers) == 1 else None
    if (
        isinstance(handler, logging.StreamHandler)
        and isinstance(handler.formatter, JsonFormatter)
        and not handler.filters
        and handler.level <= logging.INFO
        and not ACCESS_LOG.handlers
        and not ACCESS_LOG.filters
        and not ACCESS_LOG.disabled
        and ACCESS_LOG.parent is SERVICE_LOG
        and not SERVICE_LOG.filters
        and ACCESS_LOG.isEnabledFor(logging.INFO)
    ):
        text = json_line(time.time(), "info", ACCESS_LOG.name, "request", fields) + "\n"
        with handler.lock or contextlib.nullcontext():
            try:
                handler.stream.write(text)
                handler.flush()
            except Exception:  # as logging does: a broken stream never fails the request
                handler.handleError(logging.makeLogRecord({"msg": text}))
        return
    ACCESS_LOG.info("request", extra=fields)


def accepted_request_id(given: str | None) -> str:
    """The client's request id when it is a sane one (letters, digits, ``._:-``, at most 128),
    else a new one."""
    # 128 random bits as 32 hex digits, as uuid4().hex reads (less its 6 fixed bits). An id
    # names a request in logs and traces, it guards nothing: the process's own generator (seeded
    # from the system's and reseeded in each forked worker) serves at less than half the cost
    # of a system call a request.
    return given if given and _REQUEST_ID.fullmatch(given) else f"{random.getrandbits(128):032x}"


class Observation:
    """One call on any transport (an HTTP request, a gRPC call, a stream's message) from its
    arrival to its log line: the id it is known by, the key that admitted it and its figures,
    which the transport fills in as they come; ``finish`` counts it and writes its line."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "fault",
        "field",
        "given",
        "key",
        "request_id",
        "reserved",
        "started",
        "status",
    )

    def __init__(self, given: str | None, status: int | str) -> None:
        self.started = time.perf_counter()
        #: The client's own request id, when it sent one.
        self.given = given
        self.request_id = accepted_request_id(given)
        #: The label of the API key that admitted it.
        self.key: str | None = None
        self.status = status
        self.bytes_in = 0
        self.bytes_out = 0
        self.reserved = 0
        #: A refusal's fault kind and field (one of the service's names), never its values.
        self.fault: str | None = None
        self.field: str | None = None

    def finish(self, method: str, route: str, path: str) -> None:
        """Count the call in the metrics and write its access log line."""
        record(
            self.started,
            self.request_id,
            method=method,
            route=route,
            path=path,
            status=self.status,
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            reserved=self.reserved,
            key=self.key,
            fault=self.fault,
            field=self.field,
        )


def record(
    started: float,
    request_id: str,
    *,
    method: str,
    route: str,
    path: str,
    status: int | str,
    bytes_in: int,
    bytes_out: int,
    reserved: int,
    key: str | None = None,
    fault: str | None = None,
    field: str | None = None,
) -> None:
    """Count one request (HTTP or gRPC) in the metrics and write its access log line.

    ``route`` is a bounded label (a route template, a gRPC method); ``status`` an HTTP status
    or a gRPC status code's name; ``key`` the label of the API key that admitted it; ``fault``
    and ``field`` a refusal's kind and the field it is in, so that a line tells why.
    """
    duration = time.perf_counter() - started
    REQUEST_TALLY.add(route, str(status), duration, bytes_in, bytes_out, key)
    if tracing.TRACER is None and not ACCESS_LOG.isEnabledFor(logging.INFO):
        return  # nobody reads the line (a log level above info, tracing off): not made
    fields = {
        "request_id": request_id,
        "method": method,
        "route": route,
        "path": path,
        "status": status,
        "duration_ms": round(duration * 1000, 3),
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "reserved_bytes": reserved,
    }
    if key is not None:
        fields["key"] = key
    if fault is not None:
        fields["fault"] = fault
        if field is not None:
            fields["field"] = field
    if tracing.TRACER is not None:
        # The request's span is current: it takes what the line says, and the line its ids.
        fields |= tracing.request_done(request_id, route, status, bytes_in, bytes_out, reserved)
    _write_access_line(fields)
