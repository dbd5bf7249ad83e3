"""The routes that carry the work, as the one router holds them."""

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from app.errors import ServiceError
from app.transports.errors import render_detail

#: An endpoint that needs nothing but the request.
Endpoint = Callable[[Request], Awaitable[Response]]


class OpRoute(APIRoute):
    """A route that runs an op (``POST /roll``, ``POST /v2/models/{name}/infer``...).

    It is declared to FastAPI like any other route, so the OpenAPI document, the router's
    matching and the middleware every request passes are the framework's own. Its endpoint
    takes nothing the framework would resolve (the request, and the path's parameters as
    strings), so once matched it is called directly: no dependency solving and no second
    exception layer between the request and the pipeline, about 80 us of Python a request on
    this stack. A method the route does not take goes the framework's way (a 405).
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # A path with no parameters (/roll) is told by comparing it: the router asks every
        # route it passes, and the framework's own way (a regular expression, its scope
        # bookkeeping) costs a few microseconds each. A mount point (root_path) or parameters
        # take the framework's way.
        if "{" in self.path_format or scope.get("root_path") or scope["type"] != "http":
            return super().matches(scope)
        if scope["path"] != self.path_format:
            return Match.NONE, {}
        child = {"endpoint": self.endpoint, "path_params": {}, "route": self}
        allowed = not self.methods or scope["method"] in self.methods
        return (Match.FULL if allowed else Match.PARTIAL), child

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            await super().handle(scope, receive, send)
            return
        endpoint: Callable[..., Awaitable[Response]] = self.endpoint
        parameters: dict[str, Any] = scope.get("path_params", {})
        try:
            response = await endpoint(Request(scope, receive), **parameters)
        except ServiceError as error:
            response = self.refuse(error)
        await response(scope, receive, send)

    def refuse(self, error: ServiceError) -> Response:
        """A refusal raised before the pipeline took the request (an unknown model)."""
        return render_detail(error)
