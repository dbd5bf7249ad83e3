"""OpenTelemetry tracing: a span for every request and each of its stages, on when the standard
``OTEL_*`` variables name somewhere to send them, and off otherwise.

Off, nothing of OpenTelemetry is imported by this module: ``TRACER`` is None, and each place
that would make a span tests that once (a few nanoseconds); the HTTP observer and gRPC's handlers,
which make the requests' spans, are wrapped only when the app is built with tracing on. On, the
SDK's tracer provider sends spans through a batch span processor to the OTLP exporter the
variables choose (or to the console), from each worker process: the provider is made where the
app is (after uvicorn has started the worker), never in its supervisor.

What turns it on (``settings_from``): ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` set, or ``OTEL_TRACES_EXPORTER`` naming ``console``; what keeps
it off whatever else is set: ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. Every
other variable (service name, resource attributes, sampler, batch sizes, headers, timeouts,
certificates, propagators) is read by the SDK and the exporter themselves.

Long (some 600 lines) because it is the one module that knows OpenTelemetry: configuration
from the standard variables, exporters, the spans of every stage, and their flush at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from starlette.types import Receive, Scope, Send

from tensor_ops_wire.errors import FAULT_STATUS

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

    from app.errors import ServiceError

LOG = logging.getLogger("tensor_ops.tracing")

#: The service's tracer while tracing is on; None: off.
TRACER: Tracer | None = None
_PROVIDER: TracerProvider | None = None
#: The headers the propagators read (traceparent, tracestate, baggage by default).
_CONTEXT_FIELDS: frozenset[str] = frozenset()

#: Where the service's own attributes go (the semantic conventions have none for these).
REQUEST_ID = "tensor_ops.request_id"
FAULT = "tensor_ops.fault"
OP = "tensor_ops.op"
RESERVED = "tensor_ops.reserved_bytes"
WORKER_THREAD = "tensor_ops.worker_thread"
#: The exporters ``OTEL_TRACES_EXPORTER`` may name here, and the OTLP protocols.
EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
#: How long the exit waits for the last spans to be sent, whatever the collector does.
FLUSH_MILLIS = 5000
# The semantic conventions' known methods; any other is "_OTHER" (and its name kept aside).
_METHODS = frozenset(
    ("CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY", "TRACE")
)
# Labels of requests no route took: their spans have no http.route.
_NO_ROUTE = frozenset(("unmatched", "unauthenticated"))
# gRPC's status codes in order of their numbers, as rpc.grpc.status_code wants them.
_GRPC_CODE_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)  # fmt: skip
_GRPC_CODES = {name: number for number, name in enumerate(_GRPC_CODE_NAMES)}


class TracingError(ValueError):
    """The OTEL_* variables ask for something this service cannot do."""


@dataclass(frozen=True)
class TracingSettings:
    """What the environment asks for: the exporters, and the OTLP protocol."""

    exporters: tuple[str, ...]
    protocol: str
    endpoint: str | None


def settings_from(environ: Mapping[str, str]) -> TracingSettings | None:
    """The tracing the standard variables ask for, or None when they leave it off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    exporters = tuple(dict.fromkeys(name.strip() for name in names.split(",") if name.strip()))
    for name in exporters:
        if name not in EXPORTERS:
            raise TracingError(
                f"OTEL_TRACES_EXPORTER names {name!r}; this service sends traces with "
                f"{', '.join(EXPORTERS)}"
            )
    if "none" in exporters:
        return None
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    # OTLP's default endpoint (localhost:4318) is no reason to turn tracing on: only one
    # given is, as api.md says (off when the variables are unset).
    if not endpoint:
        exporters = tuple(name for name in exporters if name != "otlp")
    if not exporters:
        return None
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if "otlp" in exporters and protocol not in PROTOCOLS:
        raise TracingError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}; this service sends OTLP as "
            f"{' or '.join(PROTOCOLS)}"
        )
    return TracingSettings(exporters, protocol, endpoint)


#: How to get what tracing needs: OpenTelemetry's SDK and exporters are an extra.
INSTALL_HINT = "pip install 'tensor-ops[tracing]'"
#: The modules each exporter needs (the OTLP ones by protocol), beside the SDK's.
_SDK_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.sdk.resources")
_OTLP_MODULES = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}


def turned_on_by(settings: TracingSettings, environ: Mapping[str, str]) -> str:
    """The variable that turned tracing on, in words (for a refusal)."""
    if "otlp" in settings.exporters:
        for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            if environ.get(name):
                return f"{name} is set"
    return f"OTEL_TRACES_EXPORTER={environ.get('OTEL_TRACES_EXPORTER', '').strip()}"


def unavailable(settings: TracingSettings, environ: Mapping[str, str]) -> str | None:
    """Why tracing as ``settings`` say cannot run here, in words: OpenTelemetry's SDK, or the
    exporter chosen, not installed (the ``tracing`` extra); None when it can. The modules are
    looked up, not run (only their packages' ``__init__`` are): ``python -m app``'s supervisor
    asks before any worker starts."""
    modules = list(_SDK_MODULES)
    if "otlp" in settings.exporters:
        modules.append(_OTLP_MODULES[settings.protocol])
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or blocked
            found = False
        if not found:
            return (
                f"tracing is on ({turned_on_by(settings, environ)}) but OpenTelemetry is not "
                f"installed: {INSTALL_HINT}"
            )
    return None


def configure(environ: Mapping[str, str] | None = None) -> None:
    """Turn tracing on as the environment says (once: nothing changes while it is on).

    Called where the app is made, in each worker process. With tracing on and OpenTelemetry
    not installed, the process exits (status 2) with one line saying so, under any launcher.
    """
    if TRACER is not None:
        return
    environ = os.environ if environ is None else environ
    settings = settings_from(environ)
    if settings is None:
        return
    problem = unavailable(settings, environ)
    if problem is not None:
        logging.getLogger("tensor_ops.service").error("cannot start: %s", problem)
        raise SystemExit(2)
    install(provider_for(settings))
    LOG.info(
        "tracing on",
        extra={
            "exporters": list(settings.exporters),
            "protocol": settings.protocol,
            "endpoint": settings.endpoint,
        },
    )


def provider_for(settings: TracingSettings) -> TracerProvider:
    """A tracer provider sending spans as ``settings`` say, through a batch span processor."""
    # Imported here: with tracing off, none of this is loaded.
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    # No shutdown at the interpreter's exit: the SDK's would send each batch left with the
    # exporter's own timeout and retries (tens of seconds with a collector that is down);
    # ``flush`` bounds the exit instead.
    provider = TracerProvider(resource=service_resource(), shutdown_on_exit=False)
    for exporter in exporters_for(settings):
        provider.add_span_processor(BatchSpanProcessor(CountingExporter(exporter)))
    return provider


def counting_exporter_class() -> type:
    """``CountingExporter``'s class, made when tracing is on (the SDK is imported then)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: PLC0415

    from app.metrics import SPANS_DROPPED  # noqa: PLC0415

    class Counting(SpanExporter):
        """An exporter that counts the spans it could not send (``tensor_ops_spans_dropped``)."""

        def __init__(self, exporter: SpanExporter) -> None:
            self.exporter = exporter

        def export(self, spans: Any) -> Any:
            try:
                result = self.exporter.export(spans)
            except Exception:
                SPANS_DROPPED.inc(len(spans))
                raise
            if result is not SpanExportResult.SUCCESS:
                SPANS_DROPPED.inc(len(spans))
            return result

        def shutdown(self) -> None:
            self.exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self.exporter.force_flush(timeout_millis))

    return Counting


def CountingExporter(exporter: SpanExporter) -> SpanExporter:  # noqa: N802 - a class, made late
    """``exporter``, its failures counted."""
    made: SpanExporter = counting_exporter_class()(exporter)
    return made


def exporters_for(settings: TracingSettings) -> list[SpanExporter]:
    """The span exporters ``settings`` name; each reads its own variables (endpoint, headers,
    timeout, compression, certificates)."""
    exporters: list[SpanExporter] = []
    for name in settings.exporters:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # noqa: PLC0415

            exporters.append(ConsoleSpanExporter())
        elif settings.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter as GrpcSpanExporter,
            )

            exporters.append(GrpcSpanExporter())
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter as HttpSpanExporter,
            )

            exporters.append(HttpSpanExporter())
    return exporters


def service_resource() -> Resource:
    """What the spans come from: this service, its version and worker process, overridden by
    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource  # noqa: PLC0415

    from app.version import VERSION  # noqa: PLC0415 - read from the package's metadata

    own = Resource(
        {"service.name": "tensor-ops", "service.version": VERSION, "process.pid": os.getpid()}
    )
    # Resource.create puts what it is given over the environment's: the environment's go on top.
    return Resource.create(dict(own.merge(OTELResourceDetector().detect()).attributes))


def install(provider: TracerProvider) -> None:
    """Turn tracing on with ``provider`` (tests and benchmarks give their own)."""
    global TRACER, _PROVIDER, _CONTEXT_FIELDS  # noqa: PLW0603
    _load_api()
    from app.version import VERSION  # noqa: PLC0415 - read from the package's metadata

    _PROVIDER = provider
    _CONTEXT_FIELDS = frozenset(propagate.get_global_textmap().fields)
    # Not the global provider: FastAPI would then trace the routes it serves a second time.
    TRACER = provider.get_tracer("tensor_ops", VERSION)


def uninstall() -> None:
    """Turn tracing off (the provider is left to its owner)."""
    global TRACER, _PROVIDER  # noqa: PLW0603
    TRACER = None
    _PROVIDER = None


async def flush() -> None:
    """Send the spans still queued (at exit: a worker's last ones) and shut the provider down,
    waiting at most ``FLUSH_MILLIS`` in all whatever the collector does: what is not sent by
    then is dropped (and counted), so that the exit stays within its time."""
    provider = _PROVIDER
    if provider is None:
        return

    def finish() -> None:
        provider.force_flush(FLUSH_MILLIS)
        provider.shutdown()

    # A daemon thread: an export stuck in a collector's timeout or retries does not hold the
    # process's exit.
    done = asyncio.get_running_loop().create_future()
    loop = asyncio.get_running_loop()

    def run() -> None:
        try:
            finish()
        except Exception as error:
            LOG.warning("tracing did not shut down cleanly: %s", error)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, done)

    threading.Thread(target=run, name="tracing-shutdown", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(done), FLUSH_MILLIS / 1000)
    except TimeoutError:
        LOG.warning(
            "the last spans were not sent within %.0f s (the collector is slow or down): dropped",
            FLUSH_MILLIS / 1000,
        )


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _load_api() -> None:
    global otel_context, propagate, trace, Span, SpanKind, Status, StatusCode  # noqa: PLW0603
    from opentelemetry import context as otel_context  # noqa: PLC0415
    from opentelemetry import propagate, trace  # noqa: PLC0415
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode  # noqa: PLC0415


# ------------------------------------------------------------------------------------------------
# Server spans


def _parent(pairs: Iterable[tuple[Any, Any]]) -> Context:
    """The trace context a request carries in its headers (or gRPC metadata), if any."""
    carrier: dict[str, str] = {}
    for key, value in pairs:
        name = key.decode("latin-1") if isinstance(key, bytes) else key
        if name in _CONTEXT_FIELDS:
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            # Lines of one header are one list (tracestate may come in several).
            carrier[name] = f"{carrier[name]},{text}" if name in carrier else text
    return propagate.extract(carrier)


#: What the HTTP observer runs for one request: (scope, receive, send, app).
Observed = TypeVar("Observed", bound=Callable[..., Awaitable[None]])


def http_spans(observed: Observed) -> Observed:
    """``observed`` (the HTTP observer's handling of a request) inside a server span, current
    while it runs, continuing the trace of the request's ``traceparent``."""
    tracer = TRACER
    assert tracer is not None

    async def traced(scope: Scope, receive: Receive, send: Send, app: Any) -> None:
        original = scope["method"]
        method = original if original in _METHODS else "_OTHER"
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": scope["path"][:256],
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        if method != original:
            attributes["http.request.method_original"] = original[:32]
        if scope.get("query_string"):
            attributes["url.query"] = scope["query_string"].decode("latin-1")[:256]
        client = scope.get("client")
        if client:
            attributes["client.address"] = client[0]
        server = scope.get("server")
        if server:
            attributes["server.address"] = server[0]
            if server[1] is not None:
                attributes["server.port"] = server[1]
        parent = _parent(scope["headers"])
        # Named by its route once the router has taken it (record(), below).
        span = tracer.start_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            await observed(scope, receive, send, app)
        except Exception as error:
            span.record_exception(error)
            raise
        finally:
            otel_context.detach(token)
            span.end()

    return cast(Observed, traced)


#: A gRPC method's handler: (request, context).
Handler = Callable[[Any, Any], Awaitable[Any]]


def grpc_spans(route: str, handle: Handler, fault_key: str) -> Handler:
    """``handle`` (a gRPC method's observed call) inside a server span, continuing the trace
    of the call's ``traceparent`` metadata; ``fault_key`` names the trailing metadata that
    holds a refusal's fault kind."""
    tracer = TRACER
    assert tracer is not None
    service, _, method = route.strip("/").partition("/")
    name = f"{service}/{method}"
    attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}

    async def traced(request: Any, context: Any) -> Any:
        parent = _parent(context.invocation_metadata() or ())
        span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        ends = _SpanEnd(span)
        _CALL_SPAN.set(ends)
        try:
            return await handle(request, context)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            # A refusal is an abort, its fault kind in the trailing metadata; anything else
            # escaped the service's handling.
            fault = _metadata_value(context, fault_key)
            if fault is not None:
                _mark_fault(span, fault)
            else:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                span.set_attribute("error.type", type(error).__qualname__)
            raise
        finally:
            otel_context.detach(token)
            if not ends.with_call:
                span.end()

    return traced


class _SpanEnd:
    """A gRPC call's server span, and whether it ends with the call (``end_later``)."""

    __slots__ = ("span", "with_call")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.with_call = False


#: The server span of the gRPC call this task serves (``grpc_spans``).
_CALL_SPAN: ContextVar[_SpanEnd | None] = ContextVar("call_span", default=None)


def end_later() -> Callable[[], None] | None:
    """The current gRPC call's span, if it has one, is not ended when its handler returns:
    its answer goes out after that, and what its way out says is put on the span first. The
    caller ends it with what this gives (None: no span)."""
    ends = _CALL_SPAN.get()
    if ends is None or ends.with_call:
        return None
    ends.with_call = True
    end: Callable[[], None] = ends.span.end
    return end


def _metadata_value(context: Any, key: str) -> str | None:
    try:
        pairs = context.trailing_metadata() or ()
    except Exception:  # a context without it (a test's stand-in)
        return None
    for name, value in pairs:
        if name == key:
            return str(value)
    return None


def _mark_fault(span: Span, kind: str) -> None:
    """The fault kind on a span; an error (status ERROR) only for the service's own faults,
    those HTTP answers 5xx: a client's fault is no failure of the server."""
    span.set_attribute(FAULT, kind)
    if FAULT_STATUS.get(kind, 0) >= 500:
        span.set_status(Status(StatusCode.ERROR, kind))
        span.set_attribute("error.type", kind)


def note_fault(error: ServiceError) -> None:
    """Put a refusal's fault kind on the current span (the request's)."""
    span = trace.get_current_span()
    if span.is_recording():
        _mark_fault(span, error.kind.value)


def request_done(
    request_id: str, route: str, status: int | str, bytes_in: int, bytes_out: int, reserved: int
) -> dict[str, str]:
    """What is known once a request is answered, put on its span (the current one): its id,
    route, status and sizes; returns the span's ids for the request's log line."""
    span = trace.get_current_span()
    ids = span.get_span_context()
    if not ids.is_valid:
        return {}
    if span.is_recording():
        # What the span has so far (an SDK span shows it; the API's does not).
        given: Mapping[str, Any] = getattr(span, "attributes", None) or {}
        attributes: dict[str, Any] = {REQUEST_ID: request_id, RESERVED: reserved}
        if isinstance(status, int):
            attributes["http.response.status_code"] = status
            attributes["http.request.body.size"] = bytes_in
            attributes["http.response.body.size"] = bytes_out
            if route not in _NO_ROUTE and given.get("http.route") != route:
                attributes["http.route"] = route  # known once FastAPI has routed it
                span.update_name(f"{given.get('http.request.method', 'HTTP')} {route}")
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR, str(status)))
                if "error.type" not in given:
                    attributes["error.type"] = str(status)
        elif status in _GRPC_CODES:
            attributes["rpc.grpc.status_code"] = _GRPC_CODES[status]
        span.set_attributes(attributes)  # at once: the span takes its lock once
    return {"trace_id": format(ids.trace_id, "032x"), "span_id": format(ids.span_id, "016x")}


def log_ids() -> dict[str, str]:
    """The current span's trace and span ids, for a log line written inside it."""
    ids = trace.get_current_span().get_span_context()
    if not ids.is_valid:
        return {}
    return {"trace_id": format(ids.trace_id, "032x"), "span_id": format(ids.span_id, "016x")}


# ------------------------------------------------------------------------------------------------
# Stage spans


def recording() -> bool:
    """Whether the current span (the request's) is recorded: sampled, its children will be."""
    return trace.get_current_span().is_recording()


def stages() -> Stages | None:
    """The stage spans of the request under way; None when its span is not recorded (not
    sampled): its stages would not be either, and making them would cost all the same."""
    parent = otel_context.get_current()
    request = trace.get_current_span(parent)
    return Stages(parent, request) if request.is_recording() else None


class Stages:
    """The stage spans of one request in the pipeline (read, decode, encode): one at a time,
    children of the request's span, each current while it runs (so that the kernel's span,
    and a stage run in a worker thread, find it)."""

    __slots__ = ("parent", "request", "span", "token")

    def __init__(self, parent: Context, request: Span) -> None:
        self.parent = parent
        self.request = request
        self.span: Span | None = None
        self.token: Token[Context] | None = None

    def begin(self, name: str, threaded: bool = False) -> None:
        """End the stage under way, if any, and begin ``name`` (``threaded``: its work runs in
        a worker thread)."""
        self._close()
        assert TRACER is not None
        span = TRACER.start_span(
            name, context=self.parent, attributes={WORKER_THREAD: True} if threaded else None
        )
        self.token = otel_context.attach(trace.set_span_in_context(span, self.parent))
        self.span = span

    def op(self, name: str) -> None:
        """The op the request runs, on the request's span."""
        self.request.set_attribute(OP, name)

    def end(self) -> None:
        self._close()

    def fail(self, error: BaseException) -> None:
        """End the stage under way with what stopped it: a refusal's fault kind, or the
        exception (an error) when it is none; a cancellation ends it as it is."""
        span = self.span
        if span is not None and span.is_recording():
            kind = getattr(error, "kind", None)  # a ServiceError's fault kind (a StrEnum)
            if isinstance(kind, str):
                _mark_fault(span, str(kind))
            elif isinstance(error, Exception):
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                span.set_attribute("error.type", type(error).__qualname__)
        self._close()

    def _close(self) -> None:
        span = self.span
        if span is not None:
            if self.token is not None:
                otel_context.detach(self.token)
            span.end()
            self.span = None


def kernel_span() -> Any:
    """A "kernel" span, current while the block runs (a child of the encode stage)."""
    assert TRACER is not None
    return TRACER.start_as_current_span("kernel")


def send_span() -> Any:
    """A "send" span, current while the block runs: the answer written to the client."""
    assert TRACER is not None
    return TRACER.start_as_current_span("send")
