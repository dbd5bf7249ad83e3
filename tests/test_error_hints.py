"""The plain JSON routes' errors for the commonest mistakes say what to send instead: a number
sent as a JSON string (read as base64 .npy), a field named unlike the op's (the fields it takes
and the nearest), an attribute sent as a string. Status and location as before: the field first.
"""

from typing import Any

import httpx
import pytest

from tests.support import npy_b64

pytestmark = pytest.mark.anyio


async def refusal(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = await client.post(path, json=body)
    return response.status_code, response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        (
            "/roll",
            {"data": [1, 2, 3], "shift": "1", "axes": [0]},
            "shift",
            '"1" is a string; strings are read as a base64 .npy file, and this one is not valid '
            "base64: send the number 1 or a list of numbers, or base64 of a .npy",
        ),
        (
            "/roll",
            {"data": [1, 2, 3], "shift": 1, "axes": " -2 "},
            "axes",
            '" -2 " is a string; strings are read as a base64 .npy file, and this one is not '
            "valid base64: send the number -2 or a list of numbers, or base64 of a .npy",
        ),
        (
            "/gather",
            {"data": [1, 2, 3], "indices": "[0, 2]", "axis": 0},
            "indices",
            '"[0, 2]" is a string; strings are read as a base64 .npy file, and this one is not '
            "valid base64: send the list [0, 2] without the quotes, or base64 of a .npy",
        ),
        (
            "/gather",
            {"data": [1, 2, 3], "indices": [0], "axis": "zero"},
            "axis",
            '"zero" is a string; strings are read as a base64 .npy file, and this one decodes '
            "to no .npy file (not an .npy file: it does not start with the .npy magic string): "
            "send an integer or a list of integers, or base64 of a .npy",
        ),
        (
            "/roll",
            {"data": "2.5", "shift": 1, "axes": 0},
            "data",
            '"2.5" is a string; strings are read as a base64 .npy file, and this one is not '
            "valid base64: send the number 2.5 or a list of numbers, or base64 of a .npy",
        ),
    ],
)
async def test_a_number_sent_as_a_string_is_told_to_be_sent_as_a_number(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], field: str, message: str
) -> None:
    status, detail = await refusal(client, path, body)
    assert status == 400
    assert detail == [{"loc": ["body", field], "msg": message, "type": "tensor_decode"}]


async def test_a_string_meant_as_an_npy_keeps_its_own_error(client: httpx.AsyncClient) -> None:
    # It starts as every base64 .npy does: what is wrong is the file, not the form.
    broken = npy_b64([1, 2, 3])[:-8]
    status, detail = await refusal(client, "/roll", {"data": broken, "shift": 1, "axes": 0})
    assert status == 400
    assert "strings are read" not in detail[0]["msg"]
    assert detail[0]["loc"] == ["body", "data"]


async def test_a_long_string_is_quoted_short(client: httpx.AsyncClient) -> None:
    text = "1" * 500
    status, detail = await refusal(client, "/roll", {"data": [1], "shift": text, "axes": 0})
    assert status == 400
    assert detail[0]["msg"] == (
        f'"{"1" * 64}"... (500 characters) is a string; strings are read as a base64 .npy '
        "file, and this one decodes to no .npy file (not an .npy file: it does not start with "
        "the .npy magic string): send an integer or a list of integers, or base64 of a .npy"
    )


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        (
            "/roll",
            {"data": [1, 2, 3], "shift": 1, "axis": 0},
            "axis",
            'roll takes data, shift, axes; did you mean "axes"?',
        ),
        (
            "/gather",
            {"data": [1, 2, 3], "indices": [0], "axes": 0},
            "axes",
            'gather takes data, indices, axis, batch_dims; did you mean "axis"?',
        ),
        (
            "/gather",
            {"data": [1, 2, 3], "indices": [0], "axis": 0, "batchdims": 0},
            "batchdims",
            'gather takes data, indices, axis, batch_dims; did you mean "batch_dims"?',
        ),
        (
            "/roll",
            {"data": [1, 2, 3], "shift": 1, "axes": 0, "dtyp": "int8"},
            "dtyp",
            'roll takes data, shift, axes; did you mean "dtype"?',
        ),
        (
            "/roll",
            {"data": [1, 2, 3], "shift": 1, "axes": 0, "colour": 1},
            "colour",
            "roll takes data, shift, axes, and no other field",
        ),
    ],
)
async def test_an_unknown_field_names_the_fields_and_the_nearest(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], field: str, message: str
) -> None:
    status, detail = await refusal(client, path, body)
    assert status == 422
    # The required field it is the near miss of is not told missing as well.
    assert detail == [{"loc": ["body", field], "msg": message, "type": "extra_forbidden"}]


async def test_a_missing_field_with_no_near_miss_is_still_told(client: httpx.AsyncClient) -> None:
    status, detail = await refusal(client, "/roll", {"data": [1], "shift": 1, "colour": 0})
    assert status == 422
    assert detail == [
        {"loc": ["body", "axes"], "msg": "Field required", "type": "missing"},
        {
            "loc": ["body", "colour"],
            "msg": "roll takes data, shift, axes, and no other field",
            "type": "extra_forbidden",
        },
    ]


async def test_many_unknown_fields_each_get_the_hint(client: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {"data": [1], "shift": 1, "axes": 0}
    body |= {f"axis{number}": 0 for number in range(12)}
    status, detail = await refusal(client, "/roll", body)
    assert status == 422
    assert len(detail) == 10
    assert detail[0] == {
        "loc": ["body", "axis0"],
        "msg": 'roll takes data, shift, axes; did you mean "axes"?',
        "type": "extra_forbidden",
    }
    assert detail[-1]["msg"] == "and 3 more problems"


async def test_a_long_unknown_field_is_not_matched_nor_echoed(client: httpx.AsyncClient) -> None:
    key = "axes" + "x" * 5000
    status, detail = await refusal(client, "/roll", {"data": [1], "shift": 1, "axes": 0, key: 1})
    assert status == 422
    assert detail[0]["msg"] == "roll takes data, shift, axes, and no other field"
    assert len(detail[0]["loc"][1]) < 100


async def test_an_attribute_sent_as_a_string_is_told_to_be_a_number(
    client: httpx.AsyncClient,
) -> None:
    body = {"data": [[1, 2]], "indices": [[0]], "axis": 1, "batch_dims": "1"}
    status, detail = await refusal(client, "/gather", body)
    assert status == 422
    assert detail == [
        {
            "loc": ["body", "batch_dims"],
            "msg": '"1" is a string; batch_dims is an integer: send the number 1',
            "type": "invalid_field",
        }
    ]
