"""One JSON log line and the metrics of every request, and its ``X-Request-ID``."""

import functools
import logging
import re
import sys
import time
import uuid
from typing import Any, NamedTuple

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import BYTES_IN, BYTES_OUT, LATENCY, REQUESTS

ACCESS_LOG = logging.getLogger("tensor_ops.access")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object on one line, its ``extra`` fields included."""

    _standard = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._standard:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: str, form: str) -> None:
    """Send the service's logs to standard error, as JSON lines or as plain text."""
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(JsonFormatter())
        handler.formatter.converter = time.gmtime  # type: ignore[union-attr]
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("tensor_ops")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper() if level != "trace" else "DEBUG")
    logger.propagate = False


class ObservabilityMiddleware:
    """Tags each HTTP request with an id, then logs and measures it once it is answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = accepted_request_id(_header(scope, b"x-request-id"))
        counts = {"in": 0, "out": 0, "status": 500}

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                counts["in"] += len(message.get("body", b""))
            return message

        async def tagging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                counts["status"] = message["status"]
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                counts["out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, tagging_send)
        finally:
            record(
                started,
                request_id,
                method=scope["method"],
                route=_route_of(scope),
                path=scope["path"][:256],
                status=counts["status"],
                bytes_in=counts["in"],
                bytes_out=counts["out"],
                reserved=_reserved(scope),
            )


def accepted_request_id(given: str | None) -> str:
    """The client's request id when it is a sane one (letters, digits, ``._:-``, at most 128),
    else a new one."""
    return given if given and _REQUEST_ID.match(given) else uuid.uuid4().hex


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
) -> None:
    """Count one request (HTTP or gRPC) in the metrics and write its access log line.

    ``route`` is a bounded label (a route template, a gRPC method); ``status`` an HTTP status
    or a gRPC status code's name.
    """
    duration = time.perf_counter() - started
    metrics = _route_metrics(route, status)
    metrics.requests.inc()
    metrics.latency.observe(duration)
    metrics.bytes_in.inc(bytes_in)
    metrics.bytes_out.inc(bytes_out)
    ACCESS_LOG.info(
        "request",
        extra={
            "request_id": request_id,
            "method": method,
            "route": route,
            "path": path,
            "status": status,
            "duration_ms": round(duration * 1000, 3),
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "reserved_bytes": reserved,
        },
    )


class _RouteMetrics(NamedTuple):
    requests: Any
    latency: Any
    bytes_in: Any
    bytes_out: Any


@functools.cache
def _route_metrics(route: str, status: int | str) -> _RouteMetrics:
    # Looking labelled children up costs more than the updates; routes and statuses are few.
    return _RouteMetrics(
        REQUESTS.labels(route, str(status)),
        LATENCY.labels(route),
        BYTES_IN.labels(route),
        BYTES_OUT.labels(route),
    )


def _reserved(scope: Scope) -> int:
    # The request's memory estimate at its peak, when the pipeline served it.
    reservation = scope.get("state", {}).get("reservation")
    return int(getattr(reservation, "peak", 0))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _route_of(scope: Scope) -> str:
    # The route's template (/v2/models/{name}/infer), never the raw path: bounded label values.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
