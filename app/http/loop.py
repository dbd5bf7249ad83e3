"""The event loop ``python -m app`` serves on: uvloop, with TLS handshakes inside the head's
time limit.

uvicorn hands TLS to the event loop (``create_server(ssl=...)``) without a handshake timeout,
so the loop's own applies: 60 s for a client that connects and sends nothing, or half a
ClientHello, before any limit of the service starts (the request head's begins only once the
handshake is done). This loop gives ``create_server`` the head's limit as its
``ssl_handshake_timeout`` (an asyncio parameter uvloop takes too), and uvicorn takes the loop
through its ``loop`` setting (``app.http.loop:new_loop``).

uvicorn makes the loop before it loads the app, but starts the app's lifespan before it binds:
the lifespan gives the loop the settings the app is served with (``serve_with``), as the head
guard takes them from the app. Without a lifespan (uvicorn's ``--lifespan off``) the
environment's settings apply.
"""

import asyncio
from typing import Any

import uvloop

from app.http.protocol import head_timeout
from app.settings import Settings


class HandshakeLimitedLoop(uvloop.Loop):
    """uvloop's loop, whose TLS servers end a handshake at the head's time limit."""

    #: The served app's head time limit, once its lifespan has started.
    handshake_timeout: float | None = None

    async def create_server(  # type: ignore[override]  # the same call, fewer names spelt
        self, *args: Any, ssl: Any = None, ssl_handshake_timeout: float | None = None, **kwargs: Any
    ) -> asyncio.AbstractServer:
        if ssl is not None and ssl_handshake_timeout is None:
            ssl_handshake_timeout = self.handshake_timeout or head_timeout()  # as a head has
        server: asyncio.AbstractServer = await super().create_server(
            *args, ssl=ssl, ssl_handshake_timeout=ssl_handshake_timeout, **kwargs
        )
        return server


def new_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's ``loop`` setting (a custom loop is named by its factory): each worker's loop."""
    return HandshakeLimitedLoop()


def serve_with(settings: Settings) -> None:
    """Called by the app's lifespan, on the loop that serves it: TLS handshakes of the servers
    bound from now on end at these settings' head time limit (a loop of another kind keeps its
    own)."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, HandshakeLimitedLoop):
        loop.handshake_timeout = settings.rate_window
