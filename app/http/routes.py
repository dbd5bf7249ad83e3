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

    It is declared to FastAPI like any other route, so the OpenAPI document and the router's
    matching are the framework's own (a ``POST`` to it is usually found before the framework's
    layers, by ``DirectRoutes``, which takes the route the router would take). Its endpoint
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


class DirectRoutes:
    """The op routes found from the app's entry, without the framework's layers in between.

    A ``POST`` to an op's path (``/roll``, ``/gather/v7``, ``/v2/models/roll/infer``) passes
    the framework's error layer, the observer, its exception layer, its exit-stack layer and the
    router's walk before the route runs; only the observer and the route do anything for it
    (the op routes solve no dependencies, raise no framework exception and answer their own
    refusals). Found here, such a request goes to the observer and the route straight: about 15 us
    less a small request, a tenth of what the service adds to uvicorn's own work. It is the same
    route the router would take: built from the router's own order (a path is taken here only
    when the first route the router would match for a ``POST`` to it is an op route), and used
    only when nothing else would see the request (no middleware but the observer, no mount
    point). A bug's exception is answered 500 and raised on, as the framework's error layer
    does. Every other request, method or path goes the framework's way.
    """

    def __init__(self, routes: list[Any]) -> None:
        #: Paths without parameters: the op route the router would take for a POST to each.
        self.plain: dict[str, OpRoute] = {}
        #: The op routes with parameters (``/v2/models/{name}/infer``), in the router's order;
        #: empty when a route of another kind comes before any of them.
        self.templated: list[OpRoute] = []
        seen_other = False
        for route in routes:
            if not isinstance(route, OpRoute) or (route.methods and "POST" not in route.methods):
                seen_other = True
                continue
            if "{" in route.path_format:
                if not seen_other and route._pattern is not None:
                    self.templated.append(route)
                continue
            first = _first_match(routes, route.path_format)
            if first is route:
                self.plain[route.path_format] = route

    def find(self, scope: Scope) -> tuple[OpRoute, Scope] | None:
        """The op route of a ``POST`` and its part of the scope, or None."""
        if scope["method"] != "POST" or scope.get("root_path"):
            return None
        path: str = scope["path"]
        route = self.plain.get(path)
        if route is not None:
            return route, {"endpoint": route.endpoint, "path_params": {}, "route": route}
        if self.templated and path.startswith("/v2/"):
            for route in self.templated:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    return route, child
                if match is not Match.NONE:
                    return None  # the framework's to answer
        return None


def _first_match(routes: list[Any], path: str) -> Any:
    """The route the router takes for a POST to ``path``: the first that matches it fully."""
    probe = {"type": "http", "method": "POST", "path": path, "root_path": "", "path_params": {}}
    for route in routes:
        match, _ = route.matches(probe)
        if match is Match.FULL:
            return route
    return None
