"""What to tell a request no route takes: what the path takes, the routes near it, where /docs is.

A 404 or a 405 is where a newcomer starts (``GET /roll`` from a browser, ``POST /rol`` from a
typo), so its message teaches what the other refusals teach: the method and content types to
send, the routes there are with the nearest one named, and the page that documents them all.
Everything here is read from the app's routes as the router holds them, so a new op's route is
named without a word here.
"""

import difflib
import re
from collections.abc import Iterable, Sequence

import orjson
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from app.errors import quote

#: The prefix of the KServe V2 routes, listed as one entry rather than some forty.
V2_PREFIX = "/v2"
#: Methods a route answers that nobody sends on purpose.
_IMPLIED = {"HEAD", "OPTIONS"}
#: A route's JSON example is shown when it is this short; the longer ones are in /docs.
_EXAMPLE_LIMIT = 120


def _documented(routes: Iterable[BaseRoute]) -> list[APIRoute]:
    return [r for r in routes if isinstance(r, APIRoute) and r.include_in_schema]


def _methods(route: APIRoute) -> list[str]:
    return sorted(set(route.methods or ()) - _IMPLIED)


def _content_types(route: APIRoute) -> list[str]:
    """The body's content types the route takes, as its OpenAPI request body declares them."""
    extra = route.openapi_extra or {}
    declared = extra.get("requestBody", {}).get("content", {})
    if declared:
        return list(declared)
    return ["application/json"] if route.body_field is not None else []


def _example(route: APIRoute) -> str:
    """The route's first JSON request example, when it is short, as one line of JSON."""
    extra = route.openapi_extra or {}
    json_body = extra.get("requestBody", {}).get("content", {}).get("application/json", {})
    for example in json_body.get("examples", {}).values():
        text = orjson.dumps(example.get("value")).decode()
        return f" (for example {text})" if len(text) <= _EXAMPLE_LIMIT else ""
    return ""


def _what_to_send(route: APIRoute) -> str:
    methods = " or ".join(_methods(route))
    types = _content_types(route)
    if not types:
        return f"{methods} {route.path_format}"
    return f"{methods} {route.path_format} with Content-Type {' or '.join(types)}{_example(route)}"


def _listing(routes: Sequence[APIRoute]) -> str:
    outside = [r for r in routes if not r.path_format.startswith(V2_PREFIX)]
    # An op's version routes are told once, as a pattern, not one by one.
    versioned = [r for r in outside if _VERSIONED.fullmatch(r.path_format)]
    entries = [f"{' '.join(_methods(r))} {r.path_format}" for r in outside if r not in versioned]
    if versioned:
        entries.append("POST /<op>/v<N> for version N of an op")
    if len(outside) < len(routes):
        entries.append(f"KServe V2 under {V2_PREFIX}/ (GET {V2_PREFIX} for the server's metadata)")
    return ", ".join(entries)


#: An op's route at one of its versions: ``/gather/v7``.
_VERSIONED = re.compile(r"/[a-z0-9_]+/v[0-9]+")


def _nearest(path: str, routes: Sequence[APIRoute]) -> APIRoute | None:
    by_path = {r.path_format: r for r in routes}
    found = difflib.get_close_matches(path, list(by_path), n=1, cutoff=0.6)
    return by_path[found[0]] if found else None


def not_found_hint(routes: Iterable[BaseRoute], method: str, path: str, docs: str) -> str:
    """A 404's message: no such route, the nearest one, the routes there are, the docs."""
    documented = _documented(routes)
    words = [f"Not Found: no route {method[:16]} {quote(path)}."]
    near = _nearest(path, documented)
    if near is not None:
        words.append(f"Did you mean {_what_to_send(near)}?")
    words.append(f"The routes: {_listing(documented)}.")
    words.append(f"Each is documented, with request examples, at {docs}")
    return " ".join(words)


def method_hint(
    routes: Iterable[BaseRoute], method: str, path: str, allowed: Sequence[str], docs: str
) -> str:
    """A 405's message: the methods the path takes and, for a body, its content types."""
    taking = [
        r
        for r in _documented(routes)
        if r.path_regex.match(path) and set(_methods(r)) & set(allowed)
    ]
    methods = " or ".join(m for m in allowed if m not in _IMPLIED)
    words = [f"Method Not Allowed: {quote(path)} takes {methods}, not {method[:16]}."]
    words += [f"Send {_what_to_send(route)}." for route in taking]
    words.append(f"Each route is documented, with request examples, at {docs}")
    return " ".join(words)
