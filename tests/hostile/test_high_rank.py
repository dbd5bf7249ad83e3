"""Data of more than 32 dimensions where TENSOR_OPS_MAX_RANK allows it (up to 64): the ops that
work through a view of about twice the data's rank (BatchToSpace, SpaceToBatch, DepthToSpace,
SpaceToDepth, Tile) answer as they do for the same data without its axes of one element, not a
500. (Rank 33 and more made NumPy refuse the reshape to 2 * rank - 1 or 2 * rank dimensions: a
ValueError, a 500.)
"""

import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pybase64
import pytest

from app.errors import ServiceError
from app.main import create_app
from app.pipeline.jobs import Limits, make_job
from app.registry import REGISTRY
from app.settings import Settings
from tests.support import npy_b64

pytestmark = pytest.mark.anyio

Array = npt.NDArray[Any]
RANKS = (33, 34, 48, 64)


def _ints(values: list[int]) -> Array:
    return np.array(values, np.int64)


def request(name: str, rank: int) -> tuple[dict[str, Array], dict[str, Any]]:
    """A request of ``name`` on data of ``rank`` dimensions, all but the first three (Tile: all
    but the first two) of one element, its blocks, crops and pads 1 and 0 there (Tile's
    repeats 1 but at the last)."""
    units = rank - 3
    values = np.arange(1, 25, dtype=np.float32)
    if name == "tile":
        data = values[:6].reshape(2, 3, *(1,) * (units + 1))
        return {"data": data, "repeats": _ints([2, 1] + [1] * units + [3])}, {}
    if name == "batch_to_space":
        data = values.reshape(4, 3, 2, *(1,) * units)
        return {"data": data, "block_shape": _ints([1, 2, 2] + [1] * units),
                "crops_begin": _ints([0, 1, 0] + [0] * units),
                "crops_end": _ints([0, 0, 1] + [0] * units)}, {}  # fmt: skip
    if name == "space_to_batch":
        data = values.reshape(2, 6, 2, *(1,) * units)
        return {"data": data, "block_shape": _ints([1, 2, 2] + [1] * units),
                "pads_begin": _ints([0, 1, 0] + [0] * units),
                "pads_end": _ints([0, 1, 2] + [0] * units)}, {}  # fmt: skip
    # DepthToSpace and SpaceToDepth: of block size 1 (a larger block needs a dimension of at
    # least 2 per axis: 2 ** (rank - 2) elements), in both modes.
    data = values.reshape(2, 3, 4, *(1,) * units)
    return {"data": data}, {"mode": "depth_first", "block_size": 1}


def answer(name: str, arrays: dict[str, Array], attributes: dict[str, Any], rank: int) -> Array:
    op = REGISTRY[name]
    job = make_job(op, arrays, {**op.attribute_defaults(), **attributes},
                   Limits(rank, 1 << 30, 1 << 31))  # fmt: skip
    [output] = job.outputs()
    return output


def same_but_unit_axes(got: tuple[int, ...], expected: tuple[int, ...], rank: int) -> bool:
    """``got`` is ``expected`` with axes of one element added, up to ``rank`` dimensions."""
    return len(got) == rank and [n for n in got if n != 1] == [n for n in expected if n != 1]


NAMES = ("batch_to_space", "space_to_batch", "depth_to_space", "space_to_depth", "tile")
MODES = ("blocks_first", "depth_first")


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("name", NAMES)
def test_data_of_more_than_32_dimensions_is_answered(name: str, rank: int) -> None:
    arrays, attributes = request(name, rank)
    for mode in MODES if "mode" in attributes else (None,):
        given = {**attributes, "mode": mode} if mode else attributes
        try:
            got = answer(name, arrays, given, 64)
        except ServiceError as error:  # a refusal would be wrong too: the request is valid
            pytest.fail(f"{name} of rank {rank} refused: {error.problems[0].msg}")
        expected = answer(name, request(name, 3)[0], given, 64)
        assert same_but_unit_axes(got.shape, expected.shape, rank), (got.shape, expected.shape)
        assert got.dtype == expected.dtype
        assert np.array_equal(got.reshape(expected.shape).view(np.uint32),
                              expected.view(np.uint32)), (name, mode)  # fmt: skip


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(max_rank=64))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as served:
        yield served


@pytest.mark.parametrize("name", NAMES)
async def test_rank_64_on_the_json_route(client: httpx.AsyncClient, name: str) -> None:
    arrays, attributes = request(name, 64)
    body = {key: npy_b64(array) for key, array in arrays.items()}
    response = await client.post(f"/{name}", json={**body, **attributes})
    assert response.status_code == 200, response.text
    got = np.load(io.BytesIO(pybase64.b64decode(response.json()["data"])))
    expected = answer(name, request(name, 3)[0], attributes, 64)
    assert same_but_unit_axes(got.shape, expected.shape, 64), (got.shape, expected.shape)
    assert np.array_equal(got.reshape(expected.shape), expected)
