"""The gRPC server beside HTTP: same process, settings and memory budget; health, reflection,
a port shared by the workers of one service and by nobody else, and a drain on shutdown."""

import logging
from collections.abc import Callable

import grpc
import grpc.aio
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from app.pipeline.run import Pipeline
from app.settings import Settings
from app.transports.grpc import (
    LARGEST_MESSAGE,
    SERVICE_NAME,
    InferenceService,
    answer_limit,
    inference_handler,
)
from app.transports.ports import (
    GrpcPortError,
    claimed,
    grpc_address,
    held_message,
    port_is_free,
    unbindable_message,
)
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


class GrpcServer:
    """The V2 service over gRPC, started and stopped with the app."""

    def __init__(self, settings: Settings, pipeline: Pipeline, ready: Callable[[], bool]) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.ready = ready
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the port (the one bound, when the setting asks for any)."""
        settings = self.settings
        host, port = settings.host, settings.grpc_port
        with claimed(host, port, settings.workers) as shared:
            server = grpc.aio.server(
                options=[
                    (
                        "grpc.max_receive_message_length",
                        min(settings.max_body_bytes, LARGEST_MESSAGE),
                    ),
                    (
                        "grpc.max_send_message_length",
                        answer_limit(settings.max_output_bytes),
                    ),
                    ("grpc.so_reuseport", int(shared)),
                ]
            )
            server.add_generic_rpc_handlers(
                (inference_handler(InferenceService(self.pipeline, self.ready)),)
            )
            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                server,
                pool=_reflection_pool(),
            )
            try:
                self.port = server.add_insecure_port(grpc_address(host, port))
            except RuntimeError as error:
                held = port and not port_is_free(host, port)
                reason = held_message(host, port) if held else unbindable_message(host, port, error)
                raise GrpcPortError(reason) from None
        await server.start()
        self.server = server
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        LOG.info("gRPC serving", extra={"address": grpc_address(host, self.port)})
        return self.port

    async def stop(self) -> None:
        """Refuse new calls (UNAVAILABLE), let those in flight finish within the graceful
        timeout, then stop."""
        server, self.server = self.server, None
        if server is None:
            return
        await self.health.enter_graceful_shutdown()
        await server.stop(self.settings.graceful_timeout)


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
