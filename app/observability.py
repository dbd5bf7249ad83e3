"""One JSON log line and the metrics of every request, and its ``X-Request-ID``; with tracing
on, the line and its span tied together (the span's ids in the line, the request id on the span).
"""

import contextlib
import functools
import logging
import os
import re
import sys
import time
from typing import Any, NamedTuple

import orjson

from app import tracing
from app.metrics import BYTES_IN, BYTES_OUT, KEY_REQUESTS, LATENCY, REQUESTS

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
    return orjson.dumps(line, default=str).decode()


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


def configure_logging(level: str, form: str) -> None:
    """Send the service's logs to standard error, as JSON lines or as plain text."""
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    SERVICE_LOG.handlers[:] = [handler]
    SERVICE_LOG.setLevel(level.upper() if level != "trace" else "DEBUG")
    SERVICE_LOG.propagate = False


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
    # 128 random bits as 32 hex digits, as uuid4().hex reads (less its 6 fixed bits) at a
    # quarter of the cost.
    return given if given and _REQUEST_ID.fullmatch(given) else os.urandom(16).hex()


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
) -> None:
    """Count one request (HTTP or gRPC) in the metrics and write its access log line.

    ``route`` is a bounded label (a route template, a gRPC method); ``status`` an HTTP status
    or a gRPC status code's name; ``key`` the label of the API key that admitted it.
    """
    duration = time.perf_counter() - started
    metrics = _route_metrics(route, status)
    metrics.requests.inc()
    metrics.latency.observe(duration)
    metrics.bytes_in.inc(bytes_in)
    metrics.bytes_out.inc(bytes_out)
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
        _key_requests(key).inc()
    if tracing.TRACER is not None:
        # The request's span is current: it takes what the line says, and the line its ids.
        fields |= tracing.request_done(request_id, route, status, bytes_in, bytes_out, reserved)
    _write_access_line(fields)


class _RouteMetrics(NamedTuple):
    requests: Any
    latency: Any
    bytes_in: Any
    bytes_out: Any


@functools.cache
def _key_requests(key: str) -> Any:
    return KEY_REQUESTS.labels(key)


@functools.cache
def _route_metrics(route: str, status: int | str) -> _RouteMetrics:
    # Looking labelled children up costs more than the updates; routes and statuses are few.
    return _RouteMetrics(
        REQUESTS.labels(route, str(status)),
        LATENCY.labels(route),
        BYTES_IN.labels(route),
        BYTES_OUT.labels(route),
    )
