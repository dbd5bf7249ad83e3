"""A refusal tells at most ten problems and counts the rest, on every transport.

A body of many bad fields (unknown keys, bad list elements) once got one error line each: a
million of them cost a GiB of the worker's memory and seconds of CPU before a 422 as large as
the body. The first ten are named; the last line says how many more there were; lists the
client sizes (V2 inputs, outputs, shapes) stop at their first bad element.
"""

from typing import Any

import httpx
import orjson
import pytest

from app.errors import PROBLEM_LIMIT, Fault, Problem, ServiceError

pytestmark = pytest.mark.anyio
JSON = {"content-type": "application/json"}


def unknown_fields(count: int) -> bytes:
    fields: dict[str, Any] = {"data": [1, 2], "shift": 1, "axes": 0}
    fields.update({f"unknown{index}": index for index in range(count)})
    return orjson.dumps(fields)


@pytest.mark.parametrize("count", [1, 9, 10, 11, 500])
async def test_unknown_fields_are_named_up_to_the_limit_and_counted_beyond(
    client: httpx.AsyncClient, count: int
) -> None:
    response = await client.post("/roll", content=unknown_fields(count), headers=JSON)
    assert response.status_code == 422
    detail = response.json()["detail"]
    if count <= PROBLEM_LIMIT:
        assert [item["loc"] for item in detail] == [
            ["body", f"unknown{index}"] for index in range(count)
        ]
        assert {item["type"] for item in detail} == {"extra_forbidden"}
        return
    assert len(detail) == PROBLEM_LIMIT
    named = [item["loc"] for item in detail[:-1]]
    assert named == [["body", f"unknown{index}"] for index in range(PROBLEM_LIMIT - 1)]
    assert detail[-1] == {
        "loc": ["body"],
        "msg": f"and {count - PROBLEM_LIMIT + 1} more problems",
        "type": "extra_forbidden",
    }


async def test_unknown_fields_beside_other_problems_are_all_named_when_few(
    client: httpx.AsyncClient,
) -> None:
    body = orjson.dumps({"data": [1, 2], "shift": 1, "bogus": 1})
    response = await client.post("/roll", content=body, headers=JSON)
    assert response.status_code == 422
    kinds = {tuple(item["loc"]): item["type"] for item in response.json()["detail"]}
    assert kinds == {("body", "axes"): "missing", ("body", "bogus"): "extra_forbidden"}


@pytest.mark.parametrize(
    ("payload", "told"),
    [
        ({"inputs": [1] * 1000}, "inputs.0: Input should be a valid dictionary"),
        (
            {"inputs": [{"name": "data", "datatype": "INT8", "data": [1], "shape": ["a"] * 1000}]},
            "inputs.0.shape.0: Input should be a valid integer",
        ),
        (
            {
                "inputs": [{"name": "data", "shape": [1], "datatype": "INT8", "data": [1]}],
                "outputs": [7] * 1000,
            },
            "outputs.0: Input should be a valid dictionary",
        ),
    ],
    ids=["inputs", "shape", "outputs"],
)
async def test_v2_lists_stop_at_their_first_bad_element(
    client: httpx.AsyncClient, payload: dict[str, Any], told: str
) -> None:
    response = await client.post(
        "/v2/models/roll/infer", content=orjson.dumps(payload), headers=JSON
    )
    assert response.status_code == 422
    message = response.json()["error"]
    assert message.startswith(told)
    assert ";" not in message, message


def test_an_error_of_many_problems_keeps_the_first_and_counts_the_rest() -> None:
    problems = [Problem(Fault.INVALID_FIELD, ("body", f"f{index}"), "bad") for index in range(25)]
    error = ServiceError.of(problems)
    assert error.status == 422
    assert [problem.loc for problem in error.problems[:-1]] == [
        ("body", f"f{index}") for index in range(PROBLEM_LIMIT - 1)
    ]
    assert error.problems[-1].loc == ("body",)
    assert error.problems[-1].msg == "and 16 more problems"
    assert error.message.endswith("; and 16 more problems")
    # Counted from a total larger than the problems given (a validator's error count).
    counted = ServiceError.of(problems[:PROBLEM_LIMIT], total=1_000_000)
    assert counted.problems[-1].msg == f"and {1_000_000 - PROBLEM_LIMIT + 1} more problems"
    assert len(ServiceError.of(problems[:3]).problems) == 3
