"""A bool byte other than 0 or 1 has one meaning on every transport: true, answered as the byte 1.

NumPy's ``astype(bool)`` and OpenVINO's boolean read any nonzero byte as true; the service makes
it 1 where it decodes a bool tensor (.npy raw, in base64, in an .npz; V2 binary data), so that no
transport passes 0x02 through while another answers ``true``.
"""

import base64
import io
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest

from tensor_ops_wire.dtypes import canonical_bools
from tensor_ops_wire.npy import decode_npy
from tests.support import b64, header_npy, npy_bytes, v2_binary_body, zip_bytes

pytestmark = pytest.mark.anyio

RAW = bytes([0, 1, 2, 255])
EXPECTED = [False, True, True, True]
#: Roll by 1: every transport answers the same, in bytes exactly 0 or 1.
ROLLED = [True, False, True, True]


def bool_npy(raw: bytes, shape: tuple[int, ...], fortran: bool = False) -> bytes:
    """An .npy of bool elements holding these bytes as they are (np.save would keep them too)."""
    text = f"{{'descr': '|b1', 'fortran_order': {fortran}, 'shape': {shape}, }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return header_npy(text, raw)


def from_npy(raw: bytes) -> npt.NDArray[Any]:
    array: npt.NDArray[Any] = np.load(io.BytesIO(raw), allow_pickle=False)
    return array


def assert_canonical(array: npt.NDArray[Any], expected: list[Any]) -> None:
    assert array.dtype == np.bool_
    assert array.tolist() == expected
    assert set(np.ascontiguousarray(array).view(np.uint8).reshape(-1).tolist()) <= {0, 1}


@pytest.mark.parametrize("shift", [0, 1])
async def test_npy_in_json(client: httpx.AsyncClient, shift: int) -> None:
    body = {"data": b64(bool_npy(RAW, (4,))), "shift": [shift], "axes": [0]}
    reply = (await client.post("/roll", json=body)).json()
    assert reply["dtype"] == "bool"
    assert_canonical(from_npy(base64.b64decode(reply["data"])), np.roll(EXPECTED, shift).tolist())


async def test_npy_in_json_answered_as_raw_npy(client: httpx.AsyncClient) -> None:
    body = {"data": b64(bool_npy(RAW, (4,))), "shift": [1], "axes": [0]}
    response = await client.post("/roll", json=body, headers={"accept": "application/x-npy"})
    assert response.status_code == 200, response.text
    assert_canonical(from_npy(response.content), ROLLED)


async def test_npy_in_json_with_the_dtype_named(client: httpx.AsyncClient) -> None:
    body = {"data": b64(bool_npy(RAW, (4,))), "shift": [1], "axes": [0], "dtype": "BOOL"}
    reply = (await client.post("/roll", json=body)).json()
    assert_canonical(from_npy(base64.b64decode(reply["data"])), ROLLED)


async def test_npz(client: httpx.AsyncClient) -> None:
    body = zip_bytes(
        {"data.npy": bool_npy(RAW, (4,)), "shift.npy": npy_bytes([1]), "axes.npy": npy_bytes([0])}
    )
    response = await client.post(
        "/roll", content=body, headers={"content-type": "application/x-npz"}
    )
    assert response.status_code == 200, response.text
    assert_canonical(from_npy(response.content), ROLLED)


async def test_npz_fortran_order(client: httpx.AsyncClient) -> None:
    # Column-major bytes 0, 7 | 2, 0 are the rows [False, True] and [True, False].
    body = zip_bytes(
        {
            "data.npy": bool_npy(bytes([0, 7, 2, 0]), (2, 2), fortran=True),
            "shift.npy": npy_bytes([0]),
            "axes.npy": npy_bytes([0]),
        }
    )
    response = await client.post(
        "/roll", content=body, headers={"content-type": "application/x-npz"}
    )
    assert_canonical(from_npy(response.content), [[False, True], [True, False]])


def v2_binary(raw: bytes, binary_output: bool) -> tuple[bytes, dict[str, str]]:
    shift = np.array([1], dtype="<i8").tobytes()
    axes = np.array([0], dtype="<i8").tobytes()
    head: dict[str, Any] = {
        "inputs": [
            {"name": "data", "shape": [4], "datatype": "BOOL"},
            {"name": "shift", "shape": [1], "datatype": "INT64"},
            {"name": "axes", "shape": [1], "datatype": "INT64"},
        ],
        "outputs": [{"name": "output", "parameters": {"binary_data": binary_output}}],
    }
    return v2_binary_body(head, (raw, shift, axes))


async def test_v2_binary_in_binary_out(client: httpx.AsyncClient) -> None:
    body, headers = v2_binary(RAW, binary_output=True)
    response = await client.post("/v2/models/roll/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    output = orjson.loads(response.content[:length])["outputs"][0]
    assert output["datatype"] == "BOOL"
    raw = response.content[length:]
    assert raw == bytes([1, 0, 1, 1])
    assert_canonical(np.frombuffer(raw, dtype=np.bool_), ROLLED)


async def test_v2_binary_in_json_out(client: httpx.AsyncClient) -> None:
    body, headers = v2_binary(RAW, binary_output=False)
    response = await client.post("/v2/models/roll/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == ROLLED


async def test_gather_of_bool_bytes(client: httpx.AsyncClient) -> None:
    body = {"data": b64(bool_npy(bytes([9, 0, 128]), (3,))), "indices": [2, 1, 0], "axis": 0}
    response = await client.post("/gather", json=body, headers={"accept": "application/x-npy"})
    assert_canonical(from_npy(response.content), [True, False, True])


async def test_every_transport_answers_the_same_bytes(client: httpx.AsyncClient) -> None:
    answers = []
    body = {"data": b64(bool_npy(RAW, (4,))), "shift": [1], "axes": [0]}
    response = await client.post("/roll", json=body, headers={"accept": "application/x-npy"})
    answers.append(from_npy(response.content).tobytes())
    reply = (await client.post("/roll", json=body)).json()
    answers.append(from_npy(base64.b64decode(reply["data"])).tobytes())
    members = {
        "data.npy": bool_npy(RAW, (4,)),
        "shift.npy": npy_bytes([1]),
        "axes.npy": npy_bytes([0]),
    }
    response = await client.post(
        "/roll", content=zip_bytes(members), headers={"content-type": "application/x-npz"}
    )
    answers.append(from_npy(response.content).tobytes())
    v2_body, headers = v2_binary(RAW, binary_output=True)
    response = await client.post("/v2/models/roll/infer", content=v2_body, headers=headers)
    answers.append(response.content[int(response.headers["inference-header-content-length"]) :])
    json_body = {"data": EXPECTED, "shift": [1], "axes": [0]}
    reply = (await client.post("/roll", json=json_body)).json()
    answers.append(np.array(reply["data"], dtype=np.bool_).tobytes())
    assert answers == [bytes([1, 0, 1, 1])] * 5


# The decoder itself: one pass to check, a copy only when a byte must change.


def test_bool_bytes_already_0_or_1_are_not_copied() -> None:
    raw = bool_npy(bytes([0, 1, 1, 0]), (4,))
    array = decode_npy(raw)
    assert np.shares_memory(array, np.frombuffer(raw, dtype=np.uint8))
    assert array.tolist() == [False, True, True, False]


def test_other_bool_bytes_are_made_1_in_a_copy() -> None:
    raw = bool_npy(RAW, (2, 2))
    array = decode_npy(raw)
    assert not np.shares_memory(array, np.frombuffer(raw, dtype=np.uint8))
    assert_canonical(array, [[False, True], [True, True]])
    assert raw.endswith(RAW)  # the body is never written to


@pytest.mark.parametrize(
    "array",
    [
        np.frombuffer(bytes([0, 2, 255]), dtype=np.uint8),
        np.frombuffer(bytes([0, 2, 255, 7]), dtype=np.int16),
        np.zeros(0, dtype=np.bool_),
        np.frombuffer(bytes([0, 1]), dtype=np.bool_),
    ],
)
def test_other_types_and_canonical_bools_are_returned_as_they_are(
    array: npt.NDArray[Any],
) -> None:
    assert canonical_bools(array) is array


def test_a_strided_bool_view_is_made_canonical() -> None:
    base = np.frombuffer(bytes([0, 5, 1, 0, 3, 9]), dtype=np.bool_).reshape(3, 2).T
    assert_canonical(canonical_bools(base), [[False, True, True], [True, False, True]])
