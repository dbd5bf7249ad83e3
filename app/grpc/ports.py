"""The gRPC port: whether it is free, who may share it, and the start-up errors that say why
not. Standard library only: ``python -m app`` checks the port before uvicorn starts, and its
supervisor should not load the kernels, NumPy or gRPC for that (some 150 MiB)."""

import errno
import fcntl
import multiprocessing
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
def claimed(host: str, port: int, workers: int) -> Iterator[bool]:
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
