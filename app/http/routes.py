"""The routes that carry the work, as the one router holds them."""

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from app.errors import ServiceError
from app.http.errors import render_detail

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
        # The router asks every route it passes, and the framework's own way (its scope
        # bookkeeping around the regular expression) costs a few microseconds each: a path
        # with no parameters is told by comparing it, one with parameters by a pattern of its
        # own (a parameter is any segment but an empty one, as the framework's ``{name}``
        # reads). A mount point (root_path), a typed parameter or another scope type take the
        # framework's way.
        if scope.get("root_path") or scope["type"] != "http":
            return super().matches(scope)
        pattern = self._pattern
        if pattern is None:
            if "{" in self.path_format:
                return super().matches(scope)
            # As the framework's ``^/roll$`` reads it: a newline may end the path.
            path = scope["path"]
            if path != self.path_format and path != self.path_format + "\n":
                return Match.NONE, {}
            parameters: dict[str, Any] = {}
        else:
            found = pattern.match(scope["path"])
            if found is None:
                return Match.NONE, {}
            parameters = found.groupdict()
        if scope.get("path_params"):
            parameters = {**scope["path_params"], **parameters}
        child = {"endpoint": self.endpoint, "path_params": parameters, "route": self}
        allowed = not self.methods or scope["method"] in self.methods
        return (Match.FULL if allowed else Match.PARTIAL), child

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str] | None:
        """The path as a pattern when it has plain ``{name}`` parameters; None when it has
        none (compared as it is) or a typed one (``{name:int}``, the framework's to read)."""
        if "{" not in self.path_format:
            return None
        pieces = []
        for part in re.split(r"(\{[^{}]*\})", self.path_format):
            if part.startswith("{"):
                name = part[1:-1]
                if not name.isidentifier():
                    return None
                pieces.append(f"(?P<{name}>[^/]+)")
            else:
                pieces.append(re.escape(part))
        # Anchored as the framework anchors its own (``$`` also before a final newline).
        return re.compile("^" + "".join(pieces) + "$")

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
