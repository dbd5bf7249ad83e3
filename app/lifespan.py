"""The service's life in a worker: gRPC started beside HTTP, the signals that stop it (both
drained in one graceful timeout) and reload its keys, the start-up heap frozen."""

import asyncio
import gc
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

from fastapi import FastAPI

from app import tracing
from app.access import AccessControl
from app.grpc.server import GrpcServer
from app.http.loop import serve_with
from app.metrics import REQUEST_TALLY
from app.ops import loops
from app.pipeline.run import Pipeline
from app.settings import Settings

LOG = logging.getLogger("tensor_ops.service")


def on_exit_signals(
    loop: asyncio.AbstractEventLoop, begin: Callable[[], None]
) -> Callable[[], None]:
    """Call ``begin`` on ``loop`` as soon as SIGTERM or SIGINT arrives, then let the handler
    that was in place (uvicorn's) take the signal as before; returns what puts it back.

    Signals are handled in the main thread only: elsewhere (an app run by a test client in a
    thread) nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def handle(number: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(begin)
        handler = previous[number]
        if callable(handler):
            handler(number, frame)
        elif handler == signal.SIG_DFL:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    for number in (signal.SIGTERM, signal.SIGINT):
        previous[number] = signal.getsignal(number)
        signal.signal(number, handle)

    def undo() -> None:
        for number, handler in previous.items():
            if signal.getsignal(number) is handle:
                signal.signal(number, handler)

    return undo


def on_reload_signal(
    loop: asyncio.AbstractEventLoop, access: AccessControl | None
) -> Callable[[], None]:
    """Re-read the API keys on SIGHUP (in the main thread only, with keys on); returns what
    takes the handler away. Without it, SIGHUP would end the process: uvicorn leaves it to
    its default. (Under several workers uvicorn's supervisor takes SIGHUP itself and replaces
    the workers one by one; each new one reads the file. Each worker also re-reads the file
    within a second of a change, signal or not.)"""
    if access is None or threading.current_thread() is not threading.main_thread():
        return lambda: None
    try:
        loop.add_signal_handler(signal.SIGHUP, access.keys.reload)
    except (NotImplementedError, RuntimeError):  # an event loop without signal handling
        return lambda: None

    def undo() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return undo


async def _freeze_when_compiled() -> None:
    """Once the compiled loops are ready, what compiling them left moved out of the collector's
    reach, as the start-up's objects are (see below)."""
    # Polled, not waited for in a thread: a stop before then is not held up by that thread.
    while not loops.compiling_over():
        await asyncio.sleep(0.2)
    if loops.compiled_ready():
        gc.collect()
        gc.freeze()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """gRPC started beside HTTP, and both drained on the way out."""
    settings: Settings = app.state.settings
    pipeline: Pipeline = app.state.pipeline
    # The numba loops compile (or load) beside the service: NumPy's answer until they are ready.
    compiling = loops.start_compiling()
    # TLS handshakes within this app's head time limit (uvicorn binds after the lifespan starts).
    serve_with(settings)
    grpc_server = None
    access: AccessControl | None = app.state.access
    # Whether this process is one of several workers (shared memory is refused then): before
    # gRPC binds its own socket, so that only a socket a supervisor handed over is claimed.
    app.state.regions.siblings.claim()
    if settings.grpc_port:
        grpc_server = GrpcServer(
            settings, pipeline, lambda: bool(app.state.ready), access, app.state.regions
        )
        try:
            await grpc_server.start()
        except Exception as error:
            LOG.error("gRPC cannot start: %s", error)
            raise
    app.state.ready = True
    # Everything made at start-up (some 150,000 objects: modules, schemas, the compiled
    # kernels' wrappers) lives as long as the process: moved out of the collector's reach, a
    # full collection no longer walks it (55 ms on this machine, a pause for every request in
    # flight), and the young collections of request garbage stay short.
    # Once per process: what a later app of the same process (a test's) leaves stays collectable.
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()
    # The compiled loops' objects too, once they are there.
    frozen = asyncio.ensure_future(_freeze_when_compiled()) if compiling else None
    stopping: asyncio.Future[None] | None = None

    def begin_stopping() -> None:
        # Readiness turns away new work; gRPC refuses new calls and lets those in flight
        # finish, within the same graceful timeout as HTTP's drain, beside it.
        nonlocal stopping
        app.state.ready = False
        if grpc_server is not None and stopping is None:
            stopping = asyncio.ensure_future(grpc_server.stop())

    # uvicorn ends the lifespan only once its HTTP drain is over: the stop begins with the
    # signal instead, so that the two drains take one graceful timeout, not two.
    undo = on_exit_signals(asyncio.get_running_loop(), begin_stopping)
    undo_reload = on_reload_signal(asyncio.get_running_loop(), access)
    try:
        yield
    finally:
        if frozen is not None:
            frozen.cancel()
        undo_reload()
        undo()
        begin_stopping()
        if stopping is not None:
            await stopping
        # The last requests' figures into the metrics (with several workers, the shared files
        # outlive the worker: its requests stay counted).
        REQUEST_TALLY.flush()
        pipeline.statistics.flush()
        await tracing.flush()  # the worker's last spans, before it exits
