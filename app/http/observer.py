"""Every HTTP request's id, key check, metrics and log line, whichever route serves it."""

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import tracing
from app.access import AccessControl
from app.errors import ServiceError
from app.http.errors import REFUSAL_STATE, render_detail, render_v2
from app.observability import Observation

_REQUEST_ID = b"x-request-id"


class HttpObserver:
    """Tags each HTTP request with an id, checks its key, then logs and measures it once it is
    answered: the one layer every request passes, before the router."""

    def __init__(
        self,
        access: AccessControl | None = None,
        op_route: Callable[[Scope], str | None] = lambda scope: None,
    ) -> None:
        #: API keys, when they are on: checked here, before any route runs.
        self.access = access
        #: The template of the op route a request is for, if any (a refused request's label).
        self.op_route = op_route
        if tracing.TRACER is not None:  # each request in a server span (nothing when off)
            self._observed = tracing.http_spans(self._observed)  # type: ignore[method-assign]

    async def observe(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a request through ``app`` (the router)."""
        await self._observed(scope, receive, send, app)

    async def _observed(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        given = None
        for key, value in scope["headers"]:
            if key == _REQUEST_ID or (len(key) == 12 and key.lower() == _REQUEST_ID):
                given = value.decode("latin-1")
                break
        call = Observation(given, 500)
        tag = (_REQUEST_ID, call.request_id.encode())

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                call.bytes_in += len(message.get("body", b""))
            return message

        async def tagging_send(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                call.bytes_out += len(message.get("body", b""))
            elif kind == "http.response.start":
                call.status = message["status"]
                headers = [
                    item for item in message.get("headers", ()) if item[0].lower() != _REQUEST_ID
                ]
                headers.append(tag)
                message = {**message, "headers": headers}
            await send(message)

        label = "unmatched"
        # One state for every scope the routes make of this one (a refusal leaves its fault here).
        state = scope.setdefault("state", {})
        try:
            if self.access is not None and self.access.needs_key(scope["path"]):
                try:
                    call.key = self.access.keys.admit(scope["headers"])
                    # Whose shared memory regions it sees (app/v2/shared_memory.py).
                    scope.setdefault("state", {})["key"] = call.key
                except ServiceError as error:
                    label = self.op_route(scope) or "unauthenticated"
                    await _refusal(scope["path"], error)(scope, counting_receive, tagging_send)
                    return
            await app(scope, counting_receive, tagging_send)
            label = _route_of(scope)
        finally:
            reservation = state.get("reservation")
            call.reserved = int(getattr(reservation, "peak", 0))
            call.fault, call.field = state.get(REFUSAL_STATE, (None, None))
            call.finish(scope["method"], label, scope["path"][:256])


class ObservedApp:
    """The middleware through which the observer sees every HTTP request."""

    def __init__(self, app: ASGIApp, front: HttpObserver) -> None:
        self.app = app
        self.front = front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.front.observe(self.app, scope, receive, send)


def _refusal(path: str, error: ServiceError) -> Response:
    # Refused before any route was chosen: the protocol is told by the path, as V2 puts all of
    # its routes under /v2.
    v2 = path == "/v2" or path.startswith("/v2/")
    return render_v2(error) if v2 else render_detail(error)


def _route_of(scope: Scope) -> str:
    # The route's template (/v2/models/{name}/infer), never the raw path: bounded label values.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
