"""Compressed bodies as the RFCs say: every gzip member read, the limit over all, trailing bytes
refused, on every transport."""

import gzip
import zlib
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
import pytest

from app.main import create_app
from app.settings import Settings
from tests.support import gzip_bomb

pytestmark = pytest.mark.anyio

ROLL = {"data": [[1, 2, 3], [4, 5, 6]], "shift": 1, "axes": 1}
ROLLED = [[3, 1, 2], [6, 4, 5]]
V2 = {
    "inputs": [
        {"name": "data", "shape": [2, 3], "datatype": "INT64", "data": [1, 2, 3, 4, 5, 6]},
        {"name": "shift", "shape": [], "datatype": "INT64", "data": [1]},
        {"name": "axes", "shape": [], "datatype": "INT64", "data": [1]},
    ]
}
ROUTES = [("/roll", ROLL), ("/v2/models/roll/infer", V2)]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(max_body_bytes=4096))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        yield client


def rolled(response: httpx.Response) -> list[list[int]]:
    assert response.status_code == 200, response.text
    body = response.json()
    if "outputs" in body:
        output = body["outputs"][0]
        assert output["shape"] == [2, 3]
        flat = output["data"]
        return [flat[:3], flat[3:]]
    result: list[list[int]] = body["data"]
    return result


async def post(
    client: httpx.AsyncClient, path: str, body: bytes, encoding: str = "gzip"
) -> httpx.Response:
    """``body`` sent as JSON in ``encoding``."""
    headers = {"content-encoding": encoding, "content-type": "application/json"}
    return await client.post(path, content=body, headers=headers)


def split_in_members(raw: bytes, parts: int) -> bytes:
    """``raw`` as ``parts`` gzip members one after another (what ``cat a.gz b.gz`` makes)."""
    size = -(-len(raw) // parts)
    return b"".join(gzip.compress(raw[i : i + size]) for i in range(0, len(raw), size))


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
@pytest.mark.parametrize("parts", [2, 3, 7])
async def test_every_gzip_member_is_read(
    client: httpx.AsyncClient, path: str, request_body: object, parts: int
) -> None:
    raw = orjson.dumps(request_body)
    body = split_in_members(raw, parts)
    assert gzip.decompress(body) == raw  # what gzip -dc reads
    response = await post(client, path, body)
    assert rolled(response) == ROLLED


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
@pytest.mark.parametrize("trailing", [b"x", b"\x1f", b"garbage after the end", b"\x00" * 10])
async def test_bytes_after_the_last_member_are_400(
    client: httpx.AsyncClient,
    path: str,
    request_body: object,
    encoding: str,
    compress: Callable[[bytes], bytes],
    trailing: bytes,
) -> None:
    body = compress(orjson.dumps(request_body)) + trailing
    response = await post(client, path, body, encoding)
    assert response.status_code == 400, response.text
    assert "after its last member" in response.text


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
async def test_a_truncated_member_is_400(
    client: httpx.AsyncClient, path: str, request_body: object
) -> None:
    raw = orjson.dumps(request_body)
    body = gzip.compress(raw[:20]) + gzip.compress(raw[20:])[:-6]
    response = await post(client, path, body)
    assert response.status_code == 400, response.text
    assert "truncated" in response.text


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
async def test_the_limit_holds_over_all_members(
    client: httpx.AsyncClient, path: str, request_body: object
) -> None:
    # Each member alone inflates below the 4096-byte limit; together they pass it.
    padded = orjson.dumps(request_body)[:-1] + b"," + b" " * 3000 + b"}"
    body = gzip.compress(padded) + gzip.compress(b" " * 3000)
    response = await post(client, path, body)
    assert response.status_code == 413, response.text
    assert "TENSOR_OPS_MAX_BODY_BYTES" in response.text


async def test_a_gzip_bomb_stops_at_the_limit(client: httpx.AsyncClient) -> None:
    response = await post(client, "/roll", gzip_bomb(64 << 20, b"["))
    assert response.status_code == 413


def deflated(data: bytes) -> bytes:
    return zlib.compress(data)


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
@pytest.mark.parametrize(
    ("header", "steps"),
    [
        ("gzip, gzip", [gzip.compress, gzip.compress]),
        ("deflate, gzip", [deflated, gzip.compress]),
        ("gzip,deflate", [gzip.compress, deflated]),
        ("identity, GZIP", [gzip.compress]),
        ("x-gzip , identity", [gzip.compress]),
    ],
)
async def test_codings_listed_in_the_order_applied_are_undone_in_reverse(
    client: httpx.AsyncClient,
    path: str,
    request_body: object,
    header: str,
    steps: list[Callable[[bytes], bytes]],
) -> None:
    body = orjson.dumps(request_body)
    for step in steps:
        body = step(body)
    response = await post(client, path, body, header)
    assert rolled(response) == ROLLED


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
async def test_codings_on_several_header_lines_count_as_one_list(
    client: httpx.AsyncClient, path: str, request_body: object
) -> None:
    body = zlib.compress(gzip.compress(orjson.dumps(request_body)))
    headers = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
        ("content-encoding", "deflate"),
    ]
    response = await client.post(path, content=body, headers=headers)
    assert rolled(response) == ROLLED


@pytest.mark.parametrize(("path", "request_body"), ROUTES)
@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("gzip, br", "'br' is not supported"),
        ("gzip, gzip, gzip, gzip, gzip", "lists 5 codings; at most 4"),
    ],
)
async def test_a_coding_not_undone_is_415(
    client: httpx.AsyncClient, path: str, request_body: object, header: str, says: str
) -> None:
    response = await post(client, path, gzip.compress(orjson.dumps(request_body)), header)
    assert response.status_code == 415, response.text
    assert says in response.text


async def test_the_limit_holds_at_every_stage(client: httpx.AsyncClient) -> None:
    # The outer gzip inflates to a small inner one; the inner one inflates past 4096 bytes.
    inner = gzip_bomb(1 << 20, b"[")
    response = await post(client, "/roll", gzip.compress(inner), "gzip, gzip")
    assert response.status_code == 413, response.text
