"""The gRPC server beside HTTP: same process, settings and memory budget; health, reflection,
a port shared by the workers of one service and by nobody else, and a drain on shutdown."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from app.access import AccessControl
from app.errors import Fault, ServiceError, fault_headers
from app.grpc.answer import answer_limit
from app.grpc.handlers import inference_handlers
from app.grpc.keys import admitted_key, route_keys
from app.grpc.ports import (
    GrpcPortError,
    claimed,
    grpc_address,
    held_message,
    port_is_free,
    unbindable_message,
)
from app.grpc.receive import CallNotes, Receiver
from app.grpc.service import InferenceService
from app.grpc.status import CODES, SERVICE_NAME, STREAM_METHOD
from app.pipeline.run import Pipeline
from app.settings import Settings
from app.v2.shared_memory import Regions
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb

__all__ = [
    "GrpcPortError",
    "GrpcServer",
    "grpc_address",
    "held_message",
    "port_is_free",
    "unbindable_message",
]

LOG = logging.getLogger("tensor_ops.grpc")
INFER_ROUTE = f"/{SERVICE_NAME}/ModelInfer"
#: The health and reflection methods ``GrpcServer.methods`` must find registered.
_STANDARD_METHODS = frozenset(
    (
        f"/{health.SERVICE_NAME}/Check",
        f"/{health.SERVICE_NAME}/Watch",
        f"/{reflection.SERVICE_NAME}/ServerReflectionInfo",
    )
)
#: The inference calls a stop refuses: ModelInfer, and new streams of Triton's ModelStreamInfer.
INFER_ROUTES = frozenset((INFER_ROUTE, f"/{SERVICE_NAME}/{STREAM_METHOD}"))


#: Calls one connection may have open at once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS).
#: A call's message is only read once its memory is reserved, so the budget bounds what the
#: calls of all connections hold; this bounds the bookkeeping of one connection's.
MAX_STREAMS_PER_CONNECTION = 128
#: A connection with no call open for this long is closed (GOAWAY; clients reconnect).
IDLE_CONNECTION_SECONDS = 300
#: The service pings a connection that has been quiet this long, and closes it when the ping
#: is not answered within the timeout: a peer that is gone stops holding its calls.
KEEPALIVE_SECONDS = 60
KEEPALIVE_TIMEOUT_SECONDS = 20


def server_options(settings: Settings, message_limit: int) -> list[tuple[str, int]]:
    """gRPC's own knobs, set from the settings.

    - Messages are received as sent, compressed or not (``per_message_decompression`` off):
      the service inflates them itself, bounded by the message limit and reserved piece by
      piece as HTTP bodies are, after the key check.
    - A stream takes at most 64 KiB before its message is asked for (no bandwidth probes).
    - The message limit: the body limit and half the budget (``Receiver``).
    - A connection's TLS handshake and HTTP/2 preface within one rate window, as HTTP's head.
    - Streams per connection bounded; idle connections closed; dead peers found by pings.
    """
    return [
        ("grpc.max_receive_message_length", message_limit),
        ("grpc.max_send_message_length", answer_limit(settings.max_output_bytes)),
        ("grpc.per_message_decompression", 0),
        # A stream's window stays at gRPC's 64 KiB lookahead until its message is asked for
        # (then it opens to the message): with the window tuned by bandwidth probes, a stream
        # waiting for memory took 8 MiB on localhost before anything asked for it.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ("grpc.server_handshake_timeout_ms", max(1, math.ceil(settings.rate_window * 1000))),
        ("grpc.max_connection_idle_ms", IDLE_CONNECTION_SECONDS * 1000),
        ("grpc.keepalive_time_ms", KEEPALIVE_SECONDS * 1000),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_SECONDS * 1000),
    ]


class GrpcServer:
    """The V2 service over gRPC, started and stopped with the app."""

    def __init__(
        self,
        settings: Settings,
        pipeline: Pipeline,
        ready: Callable[[], bool],
        access: AccessControl | None = None,
        regions: Regions | None = None,
    ) -> None:
        """``regions``: the app's shared memory regions, shared with ``/v2`` (the server makes
        its own when not given)."""
        self.settings = settings
        self.pipeline = pipeline
        self.ready = ready
        self.access = access
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.service = InferenceService(pipeline, ready, access, regions)
        self.drain = Drain()
        self.port = 0

    def methods(self) -> Methods:
        """Every method the server serves: the V2 service's, health's and reflection's."""
        registered = _Registered()
        # The generated functions take a server: this stands in for one (the stubs say so).
        found: Any = registered
        health_pb2_grpc.add_HealthServicer_to_server(self.health, found)
        # What ``reflection.enable_server_reflection`` registers on an aio server.
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # type: ignore[no-untyped-call]
            reflection.aio.ReflectionServicer(
                (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                pool=_reflection_pool(),
            ),
            found,
        )
        missing = _STANDARD_METHODS - registered.handlers.keys()
        if missing:
            # gRPC's generated code registers by name since 1.62; one that did not would leave
            # the probes UNIMPLEMENTED with nothing said: refuse to start instead.
            raise RuntimeError(f"grpc did not register {sorted(missing)} by name")
        receiver = self.service.receiver
        handlers = {
            # The health and reflection services read their messages as the V2 service's
            # small calls do (``reading_small_messages``).
            method: reading_small_messages(handler, receiver)
            for method, handler in registered.handlers.items()
        }
        handlers.update(inference_handlers(self.service))
        health_keys = (
            HealthKeys(self.access) if self.access is not None and self.access.probes else None
        )
        return Methods(handlers, self.drain, health_keys)

    async def start(self) -> int:
        """Bind and serve; returns the port (the one bound, when the setting asks for any)."""
        settings = self.settings
        host, port = settings.host, settings.grpc_port
        with claimed(host, port, settings.workers) as shared:
            # A port held by another process is said here, in one line: gRPC's core would
            # first write its own failure to standard error.
            if port and not shared and not port_is_free(host, port):
                raise GrpcPortError(held_message(host, port))
            # No interceptors and no registered methods: one handler finds every method (see
            # ``Methods``).
            server = grpc.aio.server(
                options=[
                    *server_options(settings, self.service.receiver.limit),
                    ("grpc.so_reuseport", int(shared)),
                ]
            )
            server.add_generic_rpc_handlers((self.methods(),))
            credentials = _server_credentials(settings)
            try:
                if credentials is None:
                    self.port = server.add_insecure_port(grpc_address(host, port))
                else:
                    self.port = server.add_secure_port(grpc_address(host, port), credentials)
            except RuntimeError as error:
                held = port and not port_is_free(host, port)
                reason = held_message(host, port) if held else unbindable_message(host, port, error)
                if credentials is not None and not held:
                    # gRPC refuses a certificate or key it cannot load as an unbindable address.
                    reason += (
                        "; or gRPC refused TENSOR_OPS_TLS_CERT_FILE and TENSOR_OPS_TLS_KEY_FILE "
                        "(not PEM, or a key that is not the certificate's)"
                    )
                raise GrpcPortError(reason) from None
        await server.start()
        self.server = server
        self.service.send_watch.port = self.port
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        LOG.info(
            "gRPC serving",
            extra={"address": grpc_address(host, self.port), "tls": credentials is not None},
        )
        return self.port

    async def stop(self) -> None:
        """Refuse new calls (UNAVAILABLE), let those in flight finish within the graceful
        timeout, then stop.

        gRPC's own stop closes a connection as soon as its last call has ended; a large answer's
        tail then still sits in the socket's send buffer, and the close (with the client's
        window updates unread) resets the connection and loses it: the client sees UNAVAILABLE
        for a call the service finished. So the service refuses new inference calls itself
        first, waits until those in flight have ended and lingers a moment for their last bytes
        to leave, and only then hands the rest of the graceful timeout to gRPC's stop (which
        still serves a call whose message was arriving when the stop began)."""
        server, self.server = self.server, None
        if server is None:
            return
        deadline = time.monotonic() + self.settings.graceful_timeout
        self.drain.closing = True
        await self.health.enter_graceful_shutdown()
        service = self.service
        while time.monotonic() < deadline:
            if service.calls_in_flight:
                await asyncio.sleep(0.02)
                continue
            # The last answer's bytes: time to reach the client after its call ended.
            quiet = time.monotonic() - service.last_ended
            if quiet >= LINGER:
                break
            await asyncio.sleep(min(LINGER - quiet, max(0.0, deadline - time.monotonic())))
        await server.stop(max(0.0, deadline - time.monotonic()))


#: How long no inference call must have been in flight before gRPC's stop closes the
#: connections: time for the last answer's bytes to reach the client.
LINGER = 0.5


class Drain:
    """Once the stop has begun, new inference calls are refused UNAVAILABLE (``shutting_down``,
    as HTTP's 503); the probes and metadata calls are still answered (ready: false)."""

    def __init__(self) -> None:
        self.closing = False
        error = ServiceError(Fault.SHUTTING_DOWN, (), "the service is shutting down")
        trailers = tuple((name.lower(), value) for name, value in fault_headers(error).items())

        async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await context.abort(CODES[error.kind], error.message, trailers)

        # Client-streaming: refused without reading the message.
        self.refusal: grpc.RpcMethodHandler[Any, Any] = grpc.stream_unary_rpc_method_handler(refuse)


class HealthKeys:
    """The standard health service's calls (``grpc.health.v1``) with the key check the V2
    service does itself, for TENSOR_OPS_AUTH_PROBES."""

    def __init__(self, access: AccessControl) -> None:
        self.access = access

    def refusal(self, method: str, metadata: Any) -> grpc.RpcMethodHandler[Any, Any] | None:
        """A handler refusing the call UNAUTHENTICATED, when it is a health call without a
        key that admits it; None: it goes on."""
        keys = route_keys(self.access, method)
        if not method.startswith("/grpc.health.") or keys is None:
            return None
        try:
            admitted_key(keys, metadata)
        except ServiceError as error:
            return _refusing(error, streams=method.endswith("/Watch"))
        return None


class Methods(grpc.GenericRpcHandler):
    """Every method of the server by its path, found in one look-up a call; before it, the
    drain's refusal of new inference calls and the health calls' key check.

    Served this way rather than through gRPC's interceptors (a chain of coroutines for each
    call) and registered methods (gRPC's aio server waits for the next call of each registered
    method and for any other at once, an ``asyncio.wait`` over all of them for every call):
    together they cost a small call some 10 us (docs/benchmarks.md, gRPC)."""

    def __init__(
        self,
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]],
        drain: Drain,
        health_keys: HealthKeys | None = None,
    ) -> None:
        self.handlers = handlers
        self.drain = drain
        self.health_keys = health_keys

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = handler_call_details.method
        if self.drain.closing and method in INFER_ROUTES:
            return self.drain.refusal
        if self.health_keys is not None:
            refusal = self.health_keys.refusal(method, handler_call_details.invocation_metadata)
            if refusal is not None:
                return refusal
        return self.handlers.get(method)


class _Registered:
    """Where gRPC's generated ``add_*Servicer_to_server`` functions register a service's
    methods (in place of a server): each method's handler by its path."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same methods come by name too (``add_registered_method_handlers``)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.handlers.update({f"/{service}/{name}": handler for name, handler in handlers.items()})


def reading_small_messages(
    handler: grpc.RpcMethodHandler[Any, Any], receiver: Receiver
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` as a client-streaming method whose messages ``receiver`` reads; its answers
    written as it makes them."""
    deserialize = handler.request_deserializer or (lambda raw: raw)
    serialize = handler.response_serializer
    # An aio server's behaviours are coroutines and async generators (the stubs say sync).
    own: Any = handler

    async def requests(context: Any) -> AsyncIterator[Any]:
        notes = CallNotes()
        while (raw := await receiver.small(context, notes)) is not None:
            yield deserialize(raw)

    async def first(context: Any) -> Any:
        raw = await receiver.small(context, CallNotes())
        if raw is None:
            raise ServiceError(Fault.TENSOR_DECODE, ("body",), "the call has no message")
        return deserialize(raw)

    async def answered(result: Any, context: Any) -> None:
        # A servicer's stream is a generator, or a coroutine that writes through the context.
        if inspect.isasyncgen(result):
            async for item in result:
                await context.write(item)
        else:
            await result

    async def refused(error: ServiceError, context: Any) -> None:
        await context.abort(CODES[error.kind], error.message)

    async def unary(requests_: Any, context: Any) -> Any:
        try:
            request = await first(context)
        except ServiceError as error:
            await refused(error, context)
        return await own.unary_unary(request, context)

    async def server_streaming(requests_: Any, context: Any) -> None:
        try:
            request = await first(context)
        except ServiceError as error:
            await refused(error, context)
        await answered(own.unary_stream(request, context), context)

    async def client_streaming(requests_: Any, context: Any) -> Any:
        return await own.stream_unary(_refusing_on_error(requests(context), context), context)

    async def both_streaming(requests_: Any, context: Any) -> None:
        await answered(
            own.stream_stream(_refusing_on_error(requests(context), context), context),
            context,
        )

    if not handler.request_streaming and not handler.response_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, response_serializer=serialize)
    if not handler.request_streaming:
        return grpc.stream_stream_rpc_method_handler(
            server_streaming, response_serializer=serialize
        )
    if not handler.response_streaming:
        return grpc.stream_unary_rpc_method_handler(client_streaming, response_serializer=serialize)
    return grpc.stream_stream_rpc_method_handler(both_streaming, response_serializer=serialize)


async def _refusing_on_error(messages: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
    try:
        async for message in messages:
            yield message
    except ServiceError as error:
        await context.abort(CODES[error.kind], error.message)


def _refusing(error: ServiceError, streams: bool) -> grpc.RpcMethodHandler[Any, Any]:
    trailers = tuple((name, value) for name, value in error.headers.items())

    async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, error.message, trailers)

    async def refuse_stream(
        requests: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, error.message, trailers)
        yield None  # never reached: abort raises; this makes the function a generator

    # Refused as client-streaming methods, so that the message is never read. Health's Watch
    # streams its answers: it is refused as a stream.
    if streams:
        return grpc.stream_stream_rpc_method_handler(refuse_stream)
    return grpc.stream_unary_rpc_method_handler(refuse)


def _server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS from the certificate and key HTTPS is served with (read once, at start-up), and
    with a client CA, a certificate from every client; None: plaintext."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    client_ca = settings.tls_client_ca_file
    return grpc.ssl_server_credentials(
        [(settings.tls_key_file.read_bytes(), settings.tls_cert_file.read_bytes())],
        root_certificates=client_ca.read_bytes() if client_ca is not None else None,
        require_client_auth=client_ca is not None,
    )


def _reflection_pool() -> DescriptorPool:
    # The V2 messages sit in a descriptor pool of their own (scripts/generate-grpc says why);
    # reflection describes the health and reflection services from the same pool.
    pool = pb.POOL
    for module in (health_pb2, reflection_pb2):
        try:
            pool.FindFileByName(module.DESCRIPTOR.name)
        except KeyError:
            pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool
