"""Every integer an op reads, at the ends of its range, for every op and version in the registry:
each integer or integer-list attribute and each integer input of every spec example set to
2**31, -2**31 - 1, 2**32 + 1, 2**62, 2**63 - 1 and -2**63 (the whole input, and its first element
alone) is answered, or refused with a 4xx naming where, never a 5xx. (A stride of 2**62 where
one patch fits made a view whose int64 strides overflowed: a 500 from ExtractImagePatches and
Col2Im.)"""

from typing import Any

import httpx
import numpy as np
import pytest

from app.ops.declaration import Op
from app.registry import every_version, versions
from tests.transports.test_every_op import app, client

pytestmark = pytest.mark.anyio
__all__ = ["app", "client"]  # test_every_op's fixtures: one app for the module, a client of it

EXTREMES = (2**31, -(2**31) - 1, 2**32 + 1, 2**62, 2**63 - 1, -(2**63))
OPS = every_version()


def variants(op: Op, example: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(the field changed, the request) of each extreme value in each integer field."""
    found = []
    for attribute in op.attributes:
        if attribute.kind not in ("int", "ints"):
            continue
        base = example.get(attribute.name, attribute.default)
        for big in EXTREMES:
            value: Any = big
            if isinstance(base, list | tuple):
                value = [big] * max(len(base), 2)
            found.append((attribute.name, {**example, attribute.name: value}))
    for item in op.inputs:
        given = example.get(item.name)
        if item.name == op.output_type_from or given is None or isinstance(given, str):
            continue
        array = np.array(given)
        if array.dtype.kind not in "iu":
            continue
        for big in EXTREMES:
            whole = np.full(array.shape, big, dtype=object).tolist()
            found.append((item.name, {**example, item.name: whole}))
            if array.size:
                first = array.astype(object)
                first.reshape(-1)[0] = big
                found.append((item.name, {**example, item.name: first.tolist()}))
    return found


@pytest.mark.parametrize("op", OPS, ids=[op.spec for op in OPS])
async def test_integers_at_the_ends_of_their_range_never_get_a_5xx(
    client: httpx.AsyncClient, op: Op
) -> None:
    path = f"/{op.name}/v{op.version}"
    sent = 0
    for example in op.examples.values():
        for field, body in variants(op, dict(example["value"])):
            response = await client.post(path, json=body)
            sent += 1
            assert response.status_code in (200, 400, 413, 422), (field, response.text)
            answer = response.json()
            if response.status_code == 200:
                assert "shape" in answer or "outputs" in answer or isinstance(answer, list)
                continue
            detail = answer["detail"][0]
            assert detail["loc"] and detail["loc"][0] == "body", (field, answer)
            assert detail["msg"], (field, answer)
    # Every op of the family reads an integer somewhere (an attribute or an index-like input).
    assert sent, f"{op.spec}: no integer field in its examples"


@pytest.mark.parametrize(("name", "version"), [("extract_image_patches", 3), ("col2im", 15)])
async def test_a_stride_past_the_data_takes_the_one_patch_that_fits(
    client: httpx.AsyncClient, name: str, version: int
) -> None:
    """A stride of 2**62 where one patch or block fits is that one patch, as a stride of the
    data's size gives it."""
    op = versions(name)[version]
    example = dict(next(iter(op.examples.values()))["value"])
    huge = await client.post(f"/{name}", json={**example, "strides": [2**62, 2**62]})
    assert huge.status_code == 200, huge.text
    side = 10**6  # past every example's size: the same single patch or block
    plain = await client.post(f"/{name}", json={**example, "strides": [side, side]})
    assert plain.status_code == 200, plain.text
    assert huge.json() == plain.json()
