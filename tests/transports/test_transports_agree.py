"""Every transport gives the same answer: JSON (npy and JSON forms), .npz, /v2 JSON, /v2 binary.

The corpus is the legal part of the OpenVINO differential corpus (every element type, ranks 0
to 8, empty dimensions, extreme shifts, every index type), each case sent five ways and compared
bit for bit with the kernels, which the differential tests hold to OpenVINO.
"""

import base64
import io
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import orjson
import pytest

from app.ops import gather, roll
from tensor_ops_wire.dtypes import element_type_of
from tests.cases import GATHER_CASES, ROLL_CASES
from tests.support import assert_same_bits, npy_b64, npz_bytes

pytestmark = pytest.mark.anyio
STRIDE = 4  # every 4th case of the corpus: ~600 cases, 3,000 requests
CASES = [
    ("roll", c.name, {"data": c.data, "shift": c.shift, "axes": c.axes}, 0)
    for c in ROLL_CASES[::STRIDE]
] + [
    ("gather", c.name, {"data": c.data, "indices": c.indices, "axis": c.axis}, c.batch_dims)
    for c in GATHER_CASES[::STRIDE]
]


def kernel(op: str, arrays: dict[str, Any], batch_dims: int) -> Any:
    if op == "roll":
        return roll(arrays["data"], arrays["shift"], arrays["axes"])
    return gather(arrays["data"], arrays["indices"], arrays["axis"], batch_dims)


def wire(array: Any) -> Any:
    """bfloat16 travels as 2-byte unsigned elements."""
    return array.view(np.uint16) if array.dtype == ml_dtypes.bfloat16 else array


def read_npy(content: bytes, dtype: Any) -> Any:
    array = np.load(io.BytesIO(content), allow_pickle=False)
    return array.view(ml_dtypes.bfloat16) if dtype == ml_dtypes.bfloat16 else array


def json_values(array: Any) -> Any:
    if array.dtype in (ml_dtypes.bfloat16, np.float16):
        return array.astype(np.float64).tolist()
    return array.tolist()


def finite(array: Any) -> bool:
    with np.errstate(invalid="ignore"):
        return array.dtype.kind not in "fV" or bool(np.isfinite(array.astype(np.float64)).all())


@pytest.mark.parametrize(("op", "name", "arrays", "batch_dims"), CASES, ids=[c[1] for c in CASES])
async def test_five_transports_agree(
    client: httpx.AsyncClient, op: str, name: str, arrays: dict[str, Any], batch_dims: int
) -> None:
    expected = kernel(op, arrays, batch_dims)
    data = arrays["data"]
    type_name = element_type_of(data.dtype).numpy
    kserve = element_type_of(data.dtype).kserve
    extra = {"batch_dims": batch_dims} if op == "gather" else {}
    answers = {}

    # 1. JSON body, npy form.
    request = {k: npy_b64(wire(v)) for k, v in arrays.items()} | extra | {"dtype": type_name}
    body = (await client.post(f"/{op}", json=request)).json()
    answers["json-npy"] = read_npy(base64.b64decode(body["data"]), data.dtype)
    assert body["dtype"] == type_name
    assert body["shape"] == list(expected.shape)

    # 2. JSON body, JSON form, where JSON can carry the tensor: no NaN or infinity, and no empty
    # dimension but the last (nested lists cannot say the shape (0, 2) or (2, 0, 3)).
    if finite(data) and 0 not in data.shape[:-1]:
        request = {k: npy_b64(v) for k, v in arrays.items() if k != "data"} | extra
        request |= {"data": json_values(data), "dtype": type_name}
        body = (await client.post(f"/{op}", json=request)).json()
        answers["json-json"] = np.array(
            body["data"], dtype=np.float64 if data.dtype.kind in "fV" else data.dtype
        )
        answers["json-json"] = answers["json-json"].astype(data.dtype).reshape(body["shape"])

    # 3. .npz body, raw .npy answer.
    params = extra | ({"dtype": "bfloat16"} if data.dtype == ml_dtypes.bfloat16 else {})
    response = await client.post(
        f"/{op}",
        content=npz_bytes(**{key: wire(value) for key, value in arrays.items()}),
        headers={"content-type": "application/x-npz"},
        params=params,
    )
    assert response.status_code == 200, response.text
    answers["npz"] = read_npy(response.content, data.dtype)

    # 4. /v2 with binary tensors both ways.
    inputs, chunks = [], []
    for key, value in arrays.items():
        raw = np.ascontiguousarray(
            value.astype(value.dtype.newbyteorder("<"))
            if value.dtype.itemsize > 1 and value.dtype != ml_dtypes.bfloat16
            else value
        ).tobytes()
        chunks.append(raw)
        inputs.append(
            {
                "name": key,
                "shape": list(value.shape),
                "datatype": element_type_of(value.dtype).kserve,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    head = orjson.dumps(
        {
            "inputs": inputs,
            "parameters": extra,
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
        }
    )
    response = await client.post(
        f"/v2/models/{op}/infer",
        content=head + b"".join(chunks),
        headers={"inference-header-content-length": str(len(head))},
    )
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    output = orjson.loads(response.content[:length])["outputs"][0]
    assert output["datatype"] == kserve
    dtype = (
        data.dtype
        if data.dtype.itemsize == 1 or data.dtype == ml_dtypes.bfloat16
        else data.dtype.newbyteorder("<")
    )
    answers["v2-binary"] = np.frombuffer(response.content[length:], dtype=dtype).reshape(
        output["shape"]
    )

    # 5. /v2 with JSON tensors both ways (finite values only).
    if finite(data):
        inputs = [
            {
                "name": key,
                "shape": list(value.shape),
                "datatype": element_type_of(value.dtype).kserve,
                "data": json_values(value.reshape(-1)),
            }
            for key, value in arrays.items()
        ]
        body = (
            await client.post(
                f"/v2/models/{op}/infer", json={"inputs": inputs, "parameters": extra}
            )
        ).json()
        output = body["outputs"][0]
        values = np.array(
            output["data"], dtype=np.float64 if data.dtype.kind in "fV" else data.dtype
        )
        answers["v2-json"] = values.astype(data.dtype).reshape(output["shape"])

    for transport, answer in answers.items():
        try:
            assert_same_bits(answer, expected)
        except AssertionError as error:
            raise AssertionError(f"{transport} differs for {name}") from error
