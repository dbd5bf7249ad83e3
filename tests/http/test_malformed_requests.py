"""Malformed and hostile requests: always a 4xx with the error shape, never a 5xx."""

import base64
import random

import httpx
import numpy as np
import orjson
import pytest

from app.registry import REGISTRY
from tests.support import npy_b64

pytestmark = pytest.mark.anyio


def seeds() -> list[tuple[str, bytes]]:
    bodies = [
        (f"/{op.name}", ex["value"]) for op in REGISTRY.values() for ex in op.examples.values()
    ]
    bodies.append(
        (
            "/roll",
            {"data": npy_b64(np.arange(24.0).reshape(2, 3, 4)), "shift": [1, 2], "axes": [0, 2]},
        )
    )
    bodies.append(
        (
            "/gather",
            {"data": npy_b64(np.eye(3)), "indices": npy_b64(np.array([2, -1], np.int8)), "axis": 1},
        )
    )
    return [(route, orjson.dumps(body)) for route, body in bodies]


def mutations(rng: random.Random, body: bytes) -> bytes:
    choice = rng.randrange(6)
    data = bytearray(body)
    if choice == 0 and data:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif choice == 1:  # truncate
        del data[rng.randrange(len(data) + 1) :]
    elif choice == 2:  # duplicate a slice
        start = rng.randrange(len(data))
        data[start:start] = data[start : start + rng.randint(1, 20)]
    elif choice == 3:  # swap a value for another JSON value
        payload = orjson.loads(body)
        key = rng.choice(list(payload))
        payload[key] = rng.choice(
            [
                None,
                True,
                -1,
                2**63 - 1,
                -(2**63),
                1.5,
                "",
                "AAAA",
                [],
                [[]],
                [[1], [2, 3]],
                {},
                "x" * 100,
                [True, 1],
                [[[[]]]],
                10**18,
            ]
        )
        return orjson.dumps(payload)
    elif choice == 4:  # add an unknown field or remove a field
        payload = orjson.loads(body)
        if rng.random() < 0.5:
            payload["extra"] = 1
        else:
            payload.pop(rng.choice(list(payload)))
        return orjson.dumps(payload)
    else:  # insert garbage characters
        position = rng.randrange(len(data) + 1)
        data[position:position] = rng.choice([b"\xff", b"\x00", b"NaN", b"1e999", b"{", b"]", b'"'])
    return bytes(data)


async def test_mutated_bodies_never_get_a_5xx(client: httpx.AsyncClient) -> None:
    rng = random.Random(20261123)
    statuses: dict[int, int] = {}
    for _ in range(1500):
        route, body = rng.choice(seeds())
        mutated = mutations(rng, body)
        response = await client.post(
            route, content=mutated, headers={"content-type": "application/json"}
        )
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, (route, mutated[:300], response.text)
        if response.status_code != 200:
            detail = response.json()["detail"]
            assert detail
            assert detail[0]["msg"]
    # The mutations reach every kind of refusal, not only one.
    assert {200, 400, 422} <= set(statuses), statuses


@pytest.mark.parametrize(
    "header",
    [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2**40,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-5,)}",
        "{'descr': '|O', 'fortran_order': False, 'shape': (1,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1099511627776)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'evil': __import__('os')}",
        "[1, 2, 3]",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)*100}",
    ],
)
async def test_lying_npy_headers(client: httpx.AsyncClient, header: str) -> None:
    text = header.encode()
    raw = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + b"\0" * 16
    request = {"data": base64.b64encode(raw).decode(), "shift": 1, "axes": 0}
    response = await client.post("/roll", json=request)
    assert response.status_code in (400, 413, 422), response.text
    assert response.json()["detail"][0]["loc"] == ["body", "data"]


async def test_empty_shapes_with_huge_dimensions(client: httpx.AsyncClient) -> None:
    empty = np.zeros((0, 2**30), dtype=np.float32)
    response = await client.post("/roll", json={"data": npy_b64(empty), "shift": 3, "axes": 1})
    assert response.status_code == 200
    assert response.json()["shape"] == [0, 2**30]
    response = await client.post(
        "/gather", json={"data": npy_b64(empty), "indices": [0, 1], "axis": 0}
    )
    assert response.status_code == 413
