"""Raw bodies: an .npz in, the raw .npy of the output back, sizes checked before decompression."""

import base64
import io
import struct
import zipfile
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import pytest

from app.main import create_app
from app.ops import gather, roll
from app.registry import REGISTRY
from app.settings import Settings
from tensor_ops_wire.npy import decode_npy
from tests.support import assert_same_bits, npy_bytes, npz_bytes, zip_bytes

pytestmark = pytest.mark.anyio
NPZ = {"content-type": "application/x-npz"}


def load(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-npy"
    return np.load(io.BytesIO(response.content), allow_pickle=False)


def as_arrays(request: dict[str, Any]) -> dict[str, Any]:
    dtype = request.get("dtype")
    arrays = {"data": np.array(request["data"], dtype=dtype)}
    for name in ("shift", "axes", "indices", "axis"):
        if name in request:
            arrays[name] = np.array(request[name])
    return arrays


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
@pytest.mark.parametrize(
    ("route", "example"),
    [
        (f"/{op.name}", e)
        for op in REGISTRY.values()
        # The ops whose inputs and attributes as_arrays and this test build (every op's
        # examples as .npz: tests/transports/test_every_op.py).
        if set(op.input_names) <= {"data", "shift", "axes", "indices", "axis"}
        and {item.name for item in op.attributes} <= {"batch_dims"}
        for n, e in op.examples.items()
        if "npy" not in n
    ],
    ids=lambda x: x if isinstance(x, str) else x["summary"][:22],
)
async def test_spec_examples(
    client: httpx.AsyncClient, route: str, example: dict[str, Any], compressed: bool
) -> None:
    request = example["value"]
    params = {"batch_dims": request["batch_dims"]} if "batch_dims" in request else {}
    body = npz_bytes(compressed, **as_arrays(request))
    output = load(await client.post(route, content=body, headers=NPZ, params=params))
    assert output.tolist() == example["x-expected-output"]


async def test_bfloat16_by_query(client: httpx.AsyncClient) -> None:
    data = np.array([[1.5, np.nan], [-0.0, 3e38]], dtype=ml_dtypes.bfloat16)
    body = npz_bytes(data=data.view(np.uint16), shift=np.int32(1), axes=np.int32(1))
    response = await client.post("/roll", content=body, headers=NPZ, params={"dtype": "bf16"})
    output = load(response)
    assert output.dtype == np.dtype("<u2")
    assert_same_bits(output.view(ml_dtypes.bfloat16), roll(data, np.int32(1), np.int32(1)))


async def test_every_element_type_bit_exact(client: httpx.AsyncClient) -> None:
    rng = np.random.default_rng(11)
    for dtype in ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", ">f8"]:
        raw = rng.integers(0, 256, size=(3, 8 * np.dtype(dtype).itemsize), dtype=np.uint8)
        data = raw.astype(bool) if dtype == "?" else raw.view(dtype)
        indices = np.array([[7, -1], [9, 0]], dtype=np.int16)
        body = npz_bytes(data=data, indices=indices, axis=np.array([1], dtype=np.uint8))
        output = load(await client.post("/gather", content=body, headers=NPZ))
        assert_same_bits(output, gather(data, indices, np.array([1], np.uint8)))


async def test_batch_dims_query(client: httpx.AsyncClient) -> None:
    data = np.arange(24).reshape(2, 3, 4)
    indices = np.array([[3, -1], [0, 9]])
    body = npz_bytes(data=data, indices=indices, axis=np.int64(2))
    output = load(
        await client.post("/gather", content=body, headers=NPZ, params={"batch_dims": -1})
    )
    assert_same_bits(output, gather(data, indices, np.int64(2), -1))


def lying_size() -> bytes:
    """A deflated member whose directory entry claims 10 bytes but inflates to 1 MiB."""
    body = bytearray(
        zip_bytes(
            {
                "data.npy": npy_bytes(np.zeros(1 << 17)),
                "shift.npy": npy_bytes(1),
                "axes.npy": npy_bytes(0),
            },
            zipfile.ZIP_DEFLATED,
        )
    )
    position = body.find(b"PK\x01\x02")
    while position != -1:
        name_length = struct.unpack_from("<H", body, position + 28)[0]
        if body[position + 46 : position + 46 + name_length] == b"data.npy":
            struct.pack_into("<I", body, position + 24, 10)
        position = body.find(b"PK\x01\x02", position + 4)
    return bytes(body)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"not a zip", 400, "not an .npz"),
        (b"PK\x03\x04" + b"\0" * 40, 400, "not an .npz"),
        (
            zip_bytes({"data.npy": npy_bytes([1, 2]), "shift.npy": npy_bytes(1)}),
            422,
            "no member 'axes'",
        ),
        (
            zip_bytes(
                {
                    "data.npy": npy_bytes([1]),
                    "shift.npy": npy_bytes(1),
                    "axes.npy": npy_bytes(0),
                    "x.npy": npy_bytes(0),
                }
            ),
            422,
            "'x' is not an input",
        ),
        (
            zip_bytes(
                {"data.npy": b"garbage", "shift.npy": npy_bytes(1), "axes.npy": npy_bytes(0)}
            ),
            400,
            "magic",
        ),
        (
            zip_bytes(
                {
                    "data.npy": npy_bytes(np.array([{}], dtype=object)),
                    "shift.npy": npy_bytes(1),
                    "axes.npy": npy_bytes(0),
                }
            ),
            400,
            "pickle",
        ),
        (
            zip_bytes(
                {
                    "data.npy": npy_bytes([1, 2]),
                    "shift.npy": npy_bytes(1.5),
                    "axes.npy": npy_bytes(0),
                }
            ),
            422,
            "int32 or int64",
        ),
        (
            zip_bytes(
                {"data.npy": npy_bytes([1, 2]), "shift.npy": npy_bytes(1), "axes.npy": npy_bytes(4)}
            ),
            422,
            "axes = 4 is out of range",
        ),
        (lying_size(), 400, "corrupt"),
    ],
    ids=[
        "text",
        "broken-zip",
        "missing",
        "extra",
        "not-npy",
        "pickle",
        "float-shift",
        "axes-range",
        "lying-size",
    ],
)
async def test_refusals(client: httpx.AsyncClient, body: bytes, status: int, words: str) -> None:
    response = await client.post("/roll", content=body, headers=NPZ)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert words in detail[0]["msg"], detail


async def test_zip_bomb_is_refused_before_it_is_inflated() -> None:
    # A deflated member of 8 MiB of zeros, 8 KiB on the wire, against a limit of 1 MiB: the same
    # rule as 300 MiB against the default 256 MiB, at a size that costs nothing to build.
    app = create_app(Settings(max_body_bytes=1 << 20))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("data.npy", "w", force_zip64=True) as member:
            chunk = b"\0" * (1 << 20)
            for _ in range(8):
                member.write(chunk)
        archive.writestr("shift.npy", npy_bytes(1))
        archive.writestr("axes.npy", npy_bytes(0))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post("/roll", content=buffer.getvalue(), headers=NPZ)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert "TENSOR_OPS_MAX_BODY_BYTES" in detail[0]["msg"], detail


async def test_crc_mismatch_in_a_stored_member(client: httpx.AsyncClient) -> None:
    body = bytearray(
        npz_bytes(data=np.arange(100, dtype=np.int32), shift=np.int64(1), axes=np.int64(0))
    )
    body[body.find(b"\x00\x00\x00\x01\x00\x00\x00") + 3] ^= 0xFF
    response = await client.post("/roll", content=bytes(body), headers=NPZ)
    assert response.status_code == 400
    assert "CRC" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"batch_dims": "x"}, "int64"),
        ({"batch_dims": "1.5"}, "int64"),
        ({"dtype": "complex"}, "unknown"),
    ],
)
async def test_bad_query(client: httpx.AsyncClient, params: dict[str, str], words: str) -> None:
    body = npz_bytes(data=np.arange(3), indices=np.array([0]), axis=np.int64(0))
    response = await client.post("/gather", content=body, headers=NPZ, params=params)
    assert response.status_code == 422
    assert words in response.json()["detail"][0]["msg"]


async def test_roll_refuses_batch_dims(client: httpx.AsyncClient) -> None:
    body = npz_bytes(data=np.arange(3), shift=np.int64(1), axes=np.int64(0))
    response = await client.post("/roll", content=body, headers=NPZ, params={"batch_dims": 1})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "batch_dims"]


async def test_gather_output_limit_from_a_tiny_archive() -> None:
    app = create_app(Settings(max_output_bytes=1 << 20))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        body = npz_bytes(
            True, data=np.zeros((1, 4096)), indices=np.zeros(4096, np.int64), axis=np.int64(0)
        )
        response = await client.post("/gather", content=body, headers=NPZ)
        assert response.status_code == 413
        assert "TENSOR_OPS_MAX_OUTPUT_BYTES" in response.json()["detail"][0]["msg"]


async def test_npz_answer_equals_json_answer(client: httpx.AsyncClient) -> None:
    data = np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32)
    raw = load(
        await client.post(
            "/roll",
            content=npz_bytes(data=data, shift=np.array([2, -3]), axes=np.array([0, 1])),
            headers=NPZ,
        )
    )
    request = {"data": base64.b64encode(npy_bytes(data)).decode(), "shift": [2, -3], "axes": [0, 1]}
    body = (await client.post("/roll", json=request)).json()
    assert_same_bits(raw, decode_npy(base64.b64decode(body["data"])))


def roll_members(extra: int) -> dict[str, bytes]:
    """Roll's three members and ``extra`` empty ones besides."""
    members = {
        "data.npy": npy_bytes(np.arange(6)),
        "shift.npy": npy_bytes(np.array(1)),
        "axes.npy": npy_bytes(np.array(0)),
    }
    members.update({f"x{index}.npy": b"" for index in range(extra)})
    return members


@pytest.mark.parametrize("extra", [62, 70_000])
async def test_an_archive_of_too_many_members_is_refused_before_its_directory_is_read(
    client: httpx.AsyncClient, extra: int
) -> None:
    # zipfile made an object of some 600 bytes of each directory entry (46 bytes and a name on
    # the wire): 60,000 members in a 5 MB body grew the worker by 42 MiB against 5 reserved.
    # 70,000 members take the zip64 end records.
    body = zip_bytes(roll_members(extra))
    if extra > 0xFFFF:
        assert b"PK\x06\x06" in body[-200:]  # the zip64 end record
    response = await client.post("/roll", content=body, headers=NPZ)
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item == {
        "loc": ["body"],
        "msg": ".npz archive holds more than 64 members; expected data, shift, axes",
        "type": "extra_forbidden",
    }


async def test_an_archive_after_other_bytes_is_counted_where_zipfile_reads_it(
    client: httpx.AsyncClient,
) -> None:
    # zipfile finds a directory after a prefix (a self-extracting archive): counted there too.
    body = b"#!/bin/sh\nexit 0\n" * 100 + zip_bytes(roll_members(1000))
    response = await client.post("/roll", content=body, headers=NPZ)
    assert response.status_code == 422, response.text
    assert "more than 64 members" in response.text


async def test_a_few_unknown_members_are_still_named(client: httpx.AsyncClient) -> None:
    response = await client.post("/roll", content=zip_bytes(roll_members(61)), headers=NPZ)
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["loc"] == ["body", "x0"]
    assert item["type"] == "extra_forbidden"


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("batch_dims=0&batch_dims=1", "batch_dims"),
        ("batch_dims=1&batch_dims=1", "batch_dims"),
        ("dtype=int64&dtype=float64", "dtype"),
    ],
)
async def test_a_query_parameter_given_twice_is_refused(
    client: httpx.AsyncClient, query: str, name: str
) -> None:
    """Which of two values counts is not guessed (the last one did, silently), as an input given
    twice in an archive or a V2 request is refused."""
    data = np.arange(6).reshape(2, 3)
    indices = np.array([[2, -1], [0, 7]])
    body = npz_bytes(data=data, indices=indices, axis=np.int64(1))
    response = await client.post(f"/gather?{query}", content=body, headers=NPZ)
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["loc"] == ["query", name]
    assert item["msg"] == f"{name} is given more than once in the query; give it once"
    output = load(await client.post("/gather?batch_dims=1", content=body, headers=NPZ))
    assert_same_bits(output, gather(data, indices, np.int64(1), 1))
    assert output.tolist() == [[2, 2], [3, 0]]  # -1 from the end, 7 out of range: zero
