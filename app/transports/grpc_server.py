"""The gRPC server beside HTTP: same process, settings and memory budget; health, reflection,
a port shared by the workers of one service and by nobody else, and a drain on shutdown."""

import errno
import fcntl
import logging
import multiprocessing
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

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
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb

LOG = logging.getLogger("tensor_ops.grpc")


class GrpcPortError(RuntimeError):
    """The gRPC port cannot be served: another process holds it, or it cannot be bound."""


def grpc_address(host: str, port: int) -> str:
    """``host:port`` as gRPC writes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_is_free(host: str, port: int) -> bool:
    """Whether no socket is bound to ``port`` on ``host``: a plain bind, without SO_REUSEPORT,
    fails while any socket holds the port, one that lets others share it included. An address
    that cannot be bound at all (not this machine's, a port below 1024 without the right) is a
    ``GrpcPortError`` that says so."""
    try:
        addresses = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, protocol, _, address in addresses:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(address)
                except OSError as error:
                    if error.errno == errno.EADDRINUSE:
                        return False
                    raise
    except OSError as error:
        raise GrpcPortError(unbindable_message(host, port, error)) from None
    return True


def unbindable_message(host: str, port: int, error: object) -> str:
    """The start-up error of a gRPC address that cannot be bound for another reason."""
    return (
        f"the gRPC address {grpc_address(host, port)} cannot be bound ({error}); check "
        "TENSOR_OPS_HOST and TENSOR_OPS_GRPC_PORT, or set TENSOR_OPS_GRPC_PORT=0 to serve HTTP "
        "only"
    )


@contextmanager
def _claimed(host: str, port: int, workers: int) -> Iterator[bool]:
    """Whether the port is to be bound shared (SO_REUSEPORT), decided and bound under a lock.

    A process that runs alone binds the port for itself: taken, the bind fails. A worker of a
    supervisor (uvicorn's ``--workers``, or ``TENSOR_OPS_WORKERS`` above 1 for a supervisor
    that forks, as gunicorn does) shares it with its siblings only: the first to claim the
    address writes its supervisor's pid beside it; a later worker joins when the address is
    held by that supervisor's workers, and fails when a stranger holds it (a second service,
    or Triton, which also binds with SO_REUSEPORT and would silently get half the calls).
    """
    if multiprocessing.parent_process() is None and workers <= 1:
        yield False
        return
    name = "".join(c if c.isalnum() else "_" for c in host) or "any"
    owner_file = Path(tempfile.gettempdir()) / f"tensor-ops-grpc-{name}-{port}.owner"
    supervisor = str(os.getppid())
    with owner_file.open("a+") as owner:
        fcntl.flock(owner, fcntl.LOCK_EX)
        owner.seek(0)
        held_by = owner.read().strip()
        if port_is_free(host, port):
            owner.seek(0)
            owner.truncate()
            owner.write(supervisor)
            owner.flush()
        elif held_by != supervisor:
            raise GrpcPortError(held_message(host, port))
        yield True


def held_message(host: str, port: int) -> str:
    """The start-up error of a gRPC port another process holds."""
    return (
        f"the gRPC port {grpc_address(host, port)} is already in use by another process; stop "
        "it, choose a free port with TENSOR_OPS_GRPC_PORT, or set TENSOR_OPS_GRPC_PORT=0 to "
        "serve HTTP only"
    )


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
        with _claimed(host, port, settings.workers) as shared:
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
