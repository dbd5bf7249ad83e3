"""What an HTTP transport hands the front door: its endpoints, and the routes served directly."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

#: An endpoint that needs nothing but the request.
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class DirectRoute:
    """A route served without the framework: its label in metrics and logs, and its endpoint."""

    label: str
    endpoint: Endpoint
