"""Accept negotiated as RFC 9110 says: media ranges, q weights, wildcards, any case; the raw
.npy when the client prefers it to JSON, JSON otherwise (never a 406)."""

import io

import httpx
import numpy as np
import pytest
from starlette.requests import Request

from app.http.op_routes import wants_npy

NPY = "application/x-npy"
JSON = "application/json"


def request_with(*accept: str | bytes) -> Request:
    headers = [
        (b"accept", value if isinstance(value, bytes) else value.encode("latin-1"))
        for value in accept
    ]
    return Request({"type": "http", "method": "POST", "path": "/roll", "headers": headers})


@pytest.mark.parametrize(
    "accept",
    [
        NPY,
        "APPLICATION/X-NPY",
        "Application/X-Npy; Q=1",
        f"{JSON};q=0.5, {NPY}",
        f"{NPY};q=0.6, {JSON};q=0.5",
        f"{NPY};q=0.001",  # JSON not named: not acceptable
        f"{NPY}, */*",  # equal weights: the range that names .npy is the more specific
        f"{NPY}, application/*",
        f"{NPY}, */*;q=0.8",
        f"application/*;q=0.2, {NPY};q=0.3",
        f"{JSON};q=0, */*",  # JSON refused, anything else welcome
        f"text/html, {NPY};q=0.9, {JSON};q=0.8",
        f"{NPY};charset=binary;q=0.9, {JSON};q=0.1",  # media type parameters before q
        f"{NPY};q=1;ext=1",  # accept extensions after q
        f"{NPY};q=1.000",
        f"garbage, ;;, {NPY}, /, */json",  # malformed ranges beside a good one
    ],
)
def test_npy_is_answered_when_preferred(accept: str) -> None:
    assert wants_npy(request_with(accept)) is True


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "*/*",
        "*",
        "application/*",
        JSON,
        f"{NPY};q=0",
        f"{NPY};q=0.0",
        f"{NPY};q=0.000, */*",
        f"{NPY};q=0.1, {JSON}",
        f"{NPY}, {JSON}",  # a true tie: JSON, the form of the request
        f"{JSON}, {NPY}",
        f"{NPY};q=0.5, {JSON};q=0.5",
        f"{NPY};q=0.5, */*;q=0.9",
        f"*/*;q=0.9, {NPY};q=0.5",
        "text/html",  # neither acceptable: JSON all the same, not a 406
        "text/html, text/plain;q=0.5",
        f"{NPY};q=0, {JSON};q=0",
        f"{NPY}x",
        f"x{NPY}",
        f"{NPY};q=2",  # a malformed weight: the range is ignored
        f"{NPY};q=-1",
        f"{NPY};q=1.5",
        f"{NPY};q=0.1234",
        f"{NPY};q=abc",
        f"{NPY};q=",
        f"{NPY};q",
        f"{NPY};q=nan",
        f"{NPY};q=inf",
        f"{NPY};q= 1e0",
        "*/x-npy",  # a wildcard type with a named subtype is malformed
        "application/x-npy/extra",
        ",,,;;;===",
        "\x00\x01\x7f",
    ],
)
def test_json_is_answered_otherwise(accept: str) -> None:
    assert wants_npy(request_with(accept)) is False


def test_no_accept_header_means_json() -> None:
    assert wants_npy(request_with()) is False


def test_several_accept_lines_are_one_list() -> None:
    assert wants_npy(request_with(f"{JSON};q=0.1", NPY)) is True
    assert wants_npy(request_with(NPY, f"{JSON};q=0.5")) is True
    assert wants_npy(request_with(f"{NPY};q=0.2", f"{JSON};q=0.3")) is False


def test_duplicate_ranges_take_the_highest_weight() -> None:
    assert wants_npy(request_with(f"{NPY};q=0.1, {JSON};q=0.5, {NPY};q=0.9")) is True


def test_a_long_or_binary_header_is_ignored_quickly() -> None:
    assert wants_npy(request_with("a/b;q=0.5, " * 5000 + NPY)) is True
    assert wants_npy(request_with(bytes(range(256)))) is False
    assert wants_npy(request_with(b"\xff\xfe" * 10000)) is False


ROLL = {"data": [[1.0, 2.0], [3.0, 4.0]], "shift": [1], "axes": [1]}
ROLLED = [[2.0, 1.0], [4.0, 3.0]]


def read(response: httpx.Response) -> tuple[str, list[list[float]]]:
    assert response.status_code == 200, response.text
    kind = response.headers["content-type"]
    if kind == NPY:
        return "npy", np.load(io.BytesIO(response.content), allow_pickle=False).tolist()
    assert kind == JSON
    return "json", response.json()["data"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("accept", "form"),
    [
        (None, "json"),
        ("*/*", "json"),
        (NPY, "npy"),
        (f"{NPY};q=0", "json"),
        (f"{JSON};q=0.5, {NPY}", "npy"),
        (f"{NPY};q=0.1, {JSON}", "json"),
        (f"{NPY}, {JSON}", "json"),
        ("text/html", "json"),
        (f"{NPY};q=abc", "json"),
        (";=;=,/,*/;q=q", "json"),
        ("\x01" * 1000, "json"),
    ],
)
async def test_the_json_routes_answer_the_negotiated_form(
    client: httpx.AsyncClient, accept: str | None, form: str
) -> None:
    headers = {} if accept is None else {"accept": accept}
    response = await client.post("/roll", json=ROLL, headers=headers)
    assert read(response) == (form, ROLLED)


@pytest.mark.anyio
async def test_errors_are_json_whatever_is_accepted(client: httpx.AsyncClient) -> None:
    response = await client.post("/roll", json={"data": [1]}, headers={"accept": NPY})
    assert response.status_code == 422
    assert response.headers["content-type"] == JSON
